//! Which device Slurm means by a GPU index. `SLURM_JOB_GPUS`/`SLURM_STEP_GPUS` hold slurmd's
//! indices into its list of GPU device files for the node; NVML names devices by its own index
//! and by the minor number of `/dev/nvidia<minor>`. The two orders differ whenever gres.conf
//! lists files out of order or a subset (`File=/dev/nvidia[2-3]`), so an index is mapped to
//! the device FILE it stands for, then to the NVML device whose minor is that file's minor
//! (`stat` `st_rdev`). Index and minor are never assumed equal, except as a fallback that the
//! record then names.
//!
//! The order, as slurmd builds it (Slurm 22.05 to 26.05; `slurm/README.md` has the source
//! references):
//! - without AutoDetect: the files of the node's GPU lines of gres.conf, as written;
//! - `AutoDetect=nvml`: NVML's devices in NVML index order (PCI bus order); those gres.conf
//!   names for the node when it names files (matched by the name `/dev/nvidia<minor>`), and
//!   files gres.conf names that NVML does not show after them, in natural name order;
//! - `AutoDetect=nvidia` (24.11+): the same set sorted by file name, in natural order.
//!
//!
//! A MIG instance is a `MultipleFiles=` GPU: its parent's file and capability files, which the
//! driver's `mig-minors` table turns into the instance ([`mig`]). AutoDetect=nvml lists each
//! GPU in MIG mode as its MIG instances, in NVML's MIG index order.
//!
//! [`parse`] is pure; [`read_node_gres`] and [`minor_of`] are the thin I/O.

pub(crate) mod mig;
pub(crate) mod parse;

use std::path::{Path, PathBuf};

pub use mig::{Capability, MigMinors};
pub use parse::{NodeGres, parse_gres_conf};

use crate::gpu::GpuInfo;

/// Where gres.conf usually is when neither the settings nor `SLURM_CONF` say.
pub const DEFAULT_PATH: &str = "/etc/slurm/gres.conf";
/// Where a configless slurmd links its cached configuration (`<SlurmdSpoolDir>/conf-cache`).
pub const CONFIGLESS_PATH: &str = "/run/slurm/conf/gres.conf";

/// The paths to try for gres.conf, best first: the site's setting alone when given; else the
/// directory of `slurm_conf` (slurmstepd's own `SLURM_CONF`, which slurmd sets for itself and
/// its children, also when configless), [`DEFAULT_PATH`], [`CONFIGLESS_PATH`].
pub fn candidates(setting: Option<&Path>, slurm_conf: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = setting {
        return vec![p.to_path_buf()];
    }
    let mut out = Vec::new();
    if let Some(dir) = slurm_conf.and_then(Path::parent) {
        out.push(dir.join("gres.conf"));
    }
    for p in [DEFAULT_PATH, CONFIGLESS_PATH] {
        if !out.iter().any(|o| o == Path::new(p)) {
            out.push(PathBuf::from(p));
        }
    }
    out
}

/// The largest gres.conf read: a node's lines are some hundred bytes each, and a file of a
/// thousand nodes' lines is far below this. A larger file is refused, not read.
pub const MAX_GRES_CONF_BYTES: u64 = 1 << 20;

/// A gres.conf that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}: {1}")]
pub struct GresError(pub PathBuf, #[source] pub std::io::Error);

/// Reads the first of `paths` that exists and parses it for `node`. `Ok(None)`: none exists.
/// Only a regular file (or a link to one) of at most [`MAX_GRES_CONF_BYTES`] is read: anything
/// else is an error that says why, never waited on ([`crate::sys::read_small_file`]).
pub fn read_node_gres(
    paths: &[PathBuf],
    node: &str,
) -> Result<Option<(PathBuf, NodeGres)>, GresError> {
    for p in paths {
        match crate::sys::read_small_file(p, MAX_GRES_CONF_BYTES, "a gres.conf") {
            Ok(text) => return Ok(Some((p.clone(), parse_gres_conf(&text, node)))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(GresError(p.clone(), e)),
        }
    }
    Ok(None)
}

/// The minor number of a character device file (`st_rdev`); `None` for anything else.
pub fn minor_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::metadata(path).ok()?;
    md.file_type()
        .is_char_device()
        .then(|| libc::minor(md.rdev()))
}

/// A device file of the node's GPU list and its minor number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFile {
    /// The path as gres.conf names it.
    pub path: String,
    /// Its minor number (`None`: not a character device, or missing).
    pub minor: Option<u32>,
    /// A `MultipleFiles=` GPU's further files: `Some` when they name a MIG instance (in the
    /// driver's table), `None` otherwise.
    pub mig: Option<Capability>,
    /// A `MultipleFiles=` GPU whose further files name no MIG instance known to the table: the
    /// GPU cannot be told.
    pub unknown_caps: bool,
}

/// Whether gres.conf's file is a DRM render node (`/dev/dri/renderD<minor>`): how gres.conf
/// names an AMD GPU (AutoDetect=rsmi writes these). NVIDIA's are `/dev/nvidia<minor>`.
pub fn is_render_node(path: &str) -> bool {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("renderD"))
}

/// What one of Slurm's GPU indices stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A whole NVIDIA GPU, by the minor number of its device file.
    Gpu(u32),
    /// An AMD GPU, by the minor number of its render node.
    Render(u32),
    /// A MIG instance.
    Mig(Capability),
}

impl Target {
    /// Whether NVML device `d` is this target.
    pub fn is(&self, d: &GpuInfo) -> bool {
        use crate::gpu::Vendor;
        match (self, &d.mig) {
            (Target::Gpu(m), None) => d.vendor == Vendor::Nvidia && d.minor == Some(*m),
            (Target::Render(m), None) => d.vendor == Vendor::Amd && d.minor == Some(*m),
            (Target::Mig(c), Some(i)) => {
                d.vendor == Vendor::Nvidia
                    && d.minor == Some(c.gpu_minor)
                    && i.gpu_instance_id == c.gpu_instance
                    && c.compute_instance
                        .is_none_or(|ci| ci == i.compute_instance_id)
            }
            _ => false,
        }
    }
}

/// A gres.conf file that names a whole GPU: NVIDIA's by its minor, or AMD's render node.
fn whole_target(f: &DeviceFile) -> Option<Target> {
    let m = f.minor?;
    Some(if is_render_node(&f.path) {
        Target::Render(m)
    } else {
        Target::Gpu(m)
    })
}

/// Appends to the GPUs AutoDetect found (`chosen`, by file name) the files gres.conf names that
/// it did not find, in natural name order, as slurmd keeps them after its detected ones.
fn append_unlisted(chosen: &mut Vec<(String, Option<Target>)>, files: &[DeviceFile]) {
    let mut extra: Vec<(String, Option<Target>)> = files
        .iter()
        .filter(|f| !chosen.iter().any(|(p, _)| *p == f.path))
        .map(|f| (f.path.clone(), whole_target(f)))
        .collect();
    extra.sort_by(|a, b| parse::natural_cmp(&a.0, &b.0));
    chosen.extend(extra);
}

/// How slurmd orders the node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuOrder {
    /// No AutoDetect: the files of gres.conf, index `i` is `files[i]`.
    Files(Vec<DeviceFile>),
    /// `AutoDetect=nvml`: NVML index order, limited to `files` when gres.conf names some.
    NvmlIndex(Vec<DeviceFile>),
    /// `AutoDetect=nvidia`: natural file-name order, limited to `files` when given.
    FileName(Vec<DeviceFile>),
    /// `AutoDetect=rsmi` (AMD): ROCm SMI's order, taken as PCI bus order (as slurmd's links
    /// order stands in for), limited to `files` when given.
    Rsmi(Vec<DeviceFile>),
    /// Not known; the reason. The index is taken for the minor number (the old assumption).
    Unknown(String),
}

impl GpuOrder {
    /// The order slurmd uses for a node with this gres.conf content; `minor` resolves a path
    /// (the real one is [`minor_of`]); `mig` is the driver's capability table, when there is
    /// one.
    pub fn from_conf(
        conf: &NodeGres,
        minor: impl Fn(&str) -> Option<u32>,
        mig: Option<&MigMinors>,
    ) -> GpuOrder {
        let files: Vec<DeviceFile> = conf
            .devices()
            .into_iter()
            .filter_map(|files| {
                let (first, caps) = files.split_first()?;
                let cap_minors: Vec<u32> = caps.iter().filter_map(|c| minor(c)).collect();
                let instance = mig.and_then(|t| t.instance(&cap_minors));
                Some(DeviceFile {
                    minor: minor(first),
                    path: first.clone(),
                    mig: instance,
                    unknown_caps: !caps.is_empty() && instance.is_none(),
                })
            })
            .collect();
        if conf.too_many_files {
            return GpuOrder::Unknown(format!(
                "gres.conf names more than {} device files for this node",
                parse::MAX_NODE_DEVICES
            ));
        }
        match conf.autodetect.as_deref() {
            None | Some("off") if files.is_empty() => {
                GpuOrder::Unknown("gres.conf names no GPU device file for this node".into())
            }
            None | Some("off") => GpuOrder::Files(files),
            Some("nvml") => GpuOrder::NvmlIndex(files),
            Some("nvidia") => GpuOrder::FileName(files),
            Some("rsmi") => GpuOrder::Rsmi(files),
            Some(other) => GpuOrder::Unknown(format!(
                "gres.conf has AutoDetect={other}, whose order is not known here"
            )),
        }
    }

    /// Whose GPUs Slurm's indices `alloc` are, so that only that vendor's source is opened:
    /// the vendor of their device files (a render node is AMD's), `None` when they are of
    /// both. Without files to tell by: NVIDIA's, except under AutoDetect=rsmi.
    pub fn brand_for(&self, alloc: &[u32]) -> Option<crate::gpu::Vendor> {
        use crate::gpu::Vendor;
        let files = match self {
            GpuOrder::Rsmi(_) => return Some(Vendor::Amd),
            GpuOrder::NvmlIndex(_) | GpuOrder::FileName(_) | GpuOrder::Unknown(_) => {
                return Some(Vendor::Nvidia);
            }
            GpuOrder::Files(f) => f,
        };
        let mut vendors = alloc
            .iter()
            .filter_map(|&a| files.get(a as usize))
            .map(|f| {
                if is_render_node(&f.path) {
                    Vendor::Amd
                } else {
                    Vendor::Nvidia
                }
            });
        let first = vendors.next().unwrap_or(Vendor::Nvidia);
        vendors.all(|v| v == first).then_some(first)
    }

    /// A short name of the method, for the record's `sampler.gpu_mapping`.
    pub fn method(&self) -> &'static str {
        match self {
            GpuOrder::Files(_) => "gres_conf_files",
            GpuOrder::NvmlIndex(_) => "autodetect_nvml",
            GpuOrder::FileName(_) => "autodetect_nvidia",
            GpuOrder::Rsmi(_) => "autodetect_rsmi",
            GpuOrder::Unknown(_) => "index_is_minor",
        }
    }

    /// Slurm's index → target table, given NVML's devices (whole GPUs and MIG instances).
    /// `None` for [`GpuOrder::Unknown`]. An entry is `None` where the GPU cannot be told (a
    /// file without a minor, capability files the driver's table does not name).
    pub fn targets(&self, nvml: &[GpuInfo]) -> Option<Vec<Option<Target>>> {
        let name = |m: u32| format!("/dev/nvidia{m}");
        let detected = |files: &[DeviceFile], sort_by_name: bool| {
            let mut whole: Vec<&GpuInfo> = nvml
                .iter()
                .filter(|d| {
                    d.vendor == crate::gpu::Vendor::Nvidia && d.mig.is_none() && d.minor.is_some()
                })
                .collect();
            whole.sort_by_key(|d| d.index);
            let wanted = |m: u32| files.is_empty() || files.iter().any(|f| f.path == name(m));
            let mut chosen: Vec<(String, Option<Target>)> = Vec::new();
            for d in whole {
                let m = d.minor.unwrap_or_default();
                if !wanted(m) {
                    continue;
                }
                // AutoDetect=nvml lists a GPU in MIG mode as its instances (AutoDetect=nvidia
                // knows no MIG).
                let mut instances: Vec<&GpuInfo> = nvml
                    .iter()
                    .filter(|i| i.mig.as_ref().is_some_and(|x| x.parent_index == d.index))
                    .collect();
                instances.sort_by_key(|i| i.mig.as_ref().map(|x| x.mig_index));
                if instances.is_empty() || sort_by_name {
                    chosen.push((name(m), Some(Target::Gpu(m))));
                }
                if !sort_by_name {
                    for i in instances {
                        let x = i.mig.as_ref().expect("filtered on mig");
                        let cap = Capability {
                            gpu_minor: m,
                            gpu_instance: x.gpu_instance_id,
                            compute_instance: Some(x.compute_instance_id),
                        };
                        chosen.push((name(m), Some(Target::Mig(cap))));
                    }
                }
            }
            append_unlisted(&mut chosen, files);
            if sort_by_name {
                chosen.sort_by(|a, b| parse::natural_cmp(&a.0, &b.0));
            }
            chosen.into_iter().map(|(_, t)| t).collect()
        };
        let listed = |f: &DeviceFile| match (f.mig, f.unknown_caps) {
            (Some(c), _) => Some(Target::Mig(c)),
            (None, true) => None,
            (None, false) => whole_target(f),
        };
        // AutoDetect=rsmi: the AMD GPUs in PCI bus order, those gres.conf names when it names
        // files (by `/dev/dri/renderD<minor>`), then the files it names that are not there.
        let rsmi = |files: &[DeviceFile]| {
            let render = |m: u32| format!("/dev/dri/renderD{m}");
            let mut amd: Vec<&GpuInfo> = nvml
                .iter()
                .filter(|d| d.vendor == crate::gpu::Vendor::Amd && d.minor.is_some())
                .collect();
            amd.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
            let mut chosen: Vec<(String, Option<Target>)> = amd
                .iter()
                .filter_map(|d| d.minor)
                .filter(|m| files.is_empty() || files.iter().any(|f| f.path == render(*m)))
                .map(|m| (render(m), Some(Target::Render(m))))
                .collect();
            append_unlisted(&mut chosen, files);
            chosen.into_iter().map(|(_, t)| t).collect()
        };
        match self {
            GpuOrder::Files(f) => Some(f.iter().map(listed).collect()),
            GpuOrder::NvmlIndex(f) => Some(detected(f, false)),
            GpuOrder::FileName(f) => Some(detected(f, true)),
            GpuOrder::Rsmi(f) => Some(rsmi(f)),
            GpuOrder::Unknown(_) => None,
        }
    }

    /// One line for the record's notes: where the mapping came from.
    pub fn describe(&self, source: &str) -> String {
        let list = |f: &[DeviceFile]| {
            f.iter()
                .map(|f| match (f.minor, f.mig, f.unknown_caps) {
                    (Some(m), Some(c), _) => format!(
                        "{} (minor {m}) MIG gi {}{}",
                        f.path,
                        c.gpu_instance,
                        c.compute_instance
                            .map(|ci| format!(" ci {ci}"))
                            .unwrap_or_default()
                    ),
                    (Some(m), None, true) => format!(
                        "{} (minor {m}) with capability files the driver's mig-minors does not name",
                        f.path
                    ),
                    (Some(m), None, false) => format!("{} (minor {m})", f.path),
                    (None, _, _) => format!("{} (no device)", f.path),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            GpuOrder::Files(f) => format!(
                "GPU indices are positions in {source}'s device files: {}",
                list(f)
            ),
            GpuOrder::NvmlIndex(f) | GpuOrder::FileName(f) | GpuOrder::Rsmi(f) => {
                let how = match self {
                    GpuOrder::NvmlIndex(_) => "AutoDetect=nvml (NVML index order)",
                    GpuOrder::Rsmi(_) => "AutoDetect=rsmi (taken as PCI bus order)",
                    _ => "AutoDetect=nvidia (device file name order)",
                };
                let among = if f.is_empty() {
                    String::new()
                } else {
                    format!(", among {}", list(f))
                };
                format!("GPU indices follow {how} per {source}{among}")
            }
            GpuOrder::Unknown(why) => format!(
                "GPU indices taken as device minor numbers (/dev/nvidia<index>), unchecked: {why}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, minor: Option<u32>) -> GpuInfo {
        GpuInfo::for_test(index, minor)
    }

    fn instance(parent: &GpuInfo, slot: u32, gi: u32) -> GpuInfo {
        GpuInfo {
            uuid: format!("MIG-{}-{slot}", parent.index),
            mig: Some(crate::gpu::MigInfo {
                parent_uuid: parent.uuid.clone(),
                parent_index: parent.index,
                profile: "1g.10gb".into(),
                gpu_instance_id: gi,
                compute_instance_id: 0,
                mig_index: slot,
            }),
            ..parent.clone()
        }
    }

    /// The whole-GPU minors of an order's targets, given NVML's (index, minor) devices.
    trait Minors {
        fn minors(&self, nvml: &[(u32, Option<u32>)]) -> Option<Vec<Option<u32>>>;
    }

    impl Minors for GpuOrder {
        fn minors(&self, nvml: &[(u32, Option<u32>)]) -> Option<Vec<Option<u32>>> {
            let devices: Vec<GpuInfo> = nvml.iter().map(|&(i, m)| gpu(i, m)).collect();
            let t = self.targets(&devices)?;
            Some(
                t.into_iter()
                    .map(|t| match t {
                        Some(Target::Gpu(m)) => Some(m),
                        _ => None,
                    })
                    .collect(),
            )
        }
    }

    fn order(conf: &str) -> GpuOrder {
        order_with(conf, None)
    }

    fn order_with(conf: &str, mig: Option<&MigMinors>) -> GpuOrder {
        // A device file's minor is its trailing number here, plus 100 for the `sim` files.
        GpuOrder::from_conf(
            &parse_gres_conf(conf, "n1"),
            |p| {
                let n: u32 = p
                    .trim_start_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .ok()?;
                Some(if p.contains("sim") { n + 100 } else { n })
            },
            mig,
        )
    }

    const MIG_MINORS: &str = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n\
        gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n";

    #[test]
    fn a_mig_instance_of_gres_conf_is_found_by_its_capability_files() {
        let table = MigMinors::parse(MIG_MINORS);
        let conf = "Name=gpu Type=sim File=/dev/nvidia1\n\
            Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13\n\
            Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22\n";
        let o = order_with(conf, Some(&table));
        let parent = gpu(0, Some(0));
        // NVML lists MIG instance slot 0 = gi 2 before slot 1 = gi 1: gres.conf's order rules.
        let nvml = vec![
            gpu(1, Some(1)),
            parent.clone(),
            instance(&parent, 0, 2),
            instance(&parent, 1, 1),
        ];
        let t = o.targets(&nvml).unwrap();
        assert_eq!(t[0], Some(Target::Gpu(1)));
        let found: Vec<Option<&str>> = t
            .iter()
            .map(|t| {
                t.and_then(|t| nvml.iter().find(|d| t.is(d)))
                    .map(|d| d.uuid.as_str())
            })
            .collect();
        assert_eq!(found, [Some("GPU-1"), Some("MIG-0-1"), Some("MIG-0-0")]);
        assert!(
            o.describe("g")
                .contains("/dev/nvidia0 (minor 0) MIG gi 2 ci 0"),
            "{}",
            o.describe("g")
        );
        // Without the driver's table (or with files it does not name) the instance is unknown:
        // never taken for the whole parent GPU.
        let o = order_with(conf, None);
        assert_eq!(o.targets(&nvml).unwrap()[1..], [None, None]);
        assert!(o.describe("g").contains("mig-minors does not name"));
    }

    #[test]
    fn autodetect_nvml_lists_a_mig_gpu_as_its_instances() {
        let o = order("AutoDetect=nvml\nName=gpu Count=3\n");
        let parent = gpu(0, Some(5));
        let nvml = vec![
            parent.clone(),
            gpu(1, Some(2)),
            instance(&parent, 1, 9),
            instance(&parent, 0, 3),
        ];
        let t = o.targets(&nvml).unwrap();
        let gi = |t: &Option<Target>| match t {
            Some(Target::Mig(c)) => Some(c.gpu_instance),
            _ => None,
        };
        assert_eq!(gi(&t[0]), Some(3));
        assert_eq!(gi(&t[1]), Some(9));
        assert_eq!(t[2], Some(Target::Gpu(2)));
        assert_eq!(t.len(), 3);
        // A MIG target is never the whole parent, nor the other instance.
        assert!(!t[0].unwrap().is(&parent));
        assert!(t[0].unwrap().is(&nvml[3]) && !t[0].unwrap().is(&nvml[2]));
    }

    #[test]
    fn files_in_gres_conf_order_give_their_minors() {
        let o = order("Name=gpu File=/dev/nvidia[2-3]\n");
        assert_eq!(o.method(), "gres_conf_files");
        assert_eq!(o.minors(&[]), Some(vec![Some(2), Some(3)]));
        let o = order("Name=gpu File=/dev/sim[3,1]\nName=gpu File=/dev/none\n");
        assert_eq!(o.minors(&[]), Some(vec![Some(103), Some(101), None]));
        assert!(
            o.describe("/etc/slurm/gres.conf")
                .contains("/dev/sim3 (minor 103)")
        );
    }

    #[test]
    fn autodetect_nvml_follows_nvml_index_order() {
        // NVML index 0 is minor 3, 1 is minor 0, 2 is minor 1.
        let nvml = [(0, Some(3)), (2, Some(1)), (1, Some(0))];
        let o = order("AutoDetect=nvml\nName=gpu Count=3\n");
        assert_eq!(o.method(), "autodetect_nvml");
        assert_eq!(o.minors(&nvml), Some(vec![Some(3), Some(0), Some(1)]));
        // A subset named by file: still NVML order; a file NVML lacks comes last.
        let o = order("AutoDetect=nvml\nName=gpu File=/dev/nvidia[1,3,7]\n");
        assert_eq!(o.minors(&nvml), Some(vec![Some(3), Some(1), Some(7)]));
    }

    #[test]
    fn autodetect_nvidia_sorts_by_file_name() {
        let nvml = [(0, Some(10)), (1, Some(2))];
        let o = order("NodeName=n1 AutoDetect=nvidia\n");
        assert_eq!(o.method(), "autodetect_nvidia");
        assert_eq!(o.minors(&nvml), Some(vec![Some(2), Some(10)]));
    }

    fn amd(index: u32, minor: u32, pci: &str) -> GpuInfo {
        let mut g = gpu(index, Some(minor));
        g.vendor = crate::gpu::Vendor::Amd;
        g.pci_bus_id = Some(pci.into());
        g
    }

    #[test]
    fn render_nodes_are_amd_gpus_and_never_taken_for_nvidia_minors() {
        // A node with both: NVIDIA minor 128 must not be taken for renderD128.
        let o = order("Name=gpu File=/dev/nvidia0\nName=gpu File=/dev/dri/renderD128\n");
        let devices = [
            gpu(0, Some(0)),
            gpu(1, Some(128)),
            amd(0, 128, "0000:c1:00.0"),
        ];
        let t = o.targets(&devices).unwrap();
        assert_eq!(t, vec![Some(Target::Gpu(0)), Some(Target::Render(128))]);
        assert!(t[1].unwrap().is(&devices[2]) && !t[1].unwrap().is(&devices[1]));
        assert_eq!(o.brand_for(&[1]), Some(crate::gpu::Vendor::Amd));
        assert_eq!(o.brand_for(&[0]), Some(crate::gpu::Vendor::Nvidia));
        assert_eq!(o.brand_for(&[0, 1]), None);
    }

    #[test]
    fn autodetect_rsmi_follows_pci_bus_order_among_the_files_named() {
        let o = order("AutoDetect=rsmi\nName=gpu File=/dev/dri/renderD[128-130]\n");
        assert_eq!(o.method(), "autodetect_rsmi");
        // Render minors do not follow PCI order: 130 is on the first bus.
        let devices = [
            amd(0, 128, "0000:c1:00.0"),
            amd(1, 129, "0000:d1:00.0"),
            amd(2, 130, "0000:41:00.0"),
        ];
        let t = o.targets(&devices).unwrap();
        assert_eq!(
            t,
            vec![
                Some(Target::Render(130)),
                Some(Target::Render(128)),
                Some(Target::Render(129))
            ]
        );
        assert_eq!(o.brand_for(&[0]), Some(crate::gpu::Vendor::Amd));
        assert!(o.describe("x").contains("AutoDetect=rsmi"));
    }

    #[test]
    fn unknown_orders_say_why() {
        let o = order("AutoDetect=oneapi\nName=gpu File=/dev/dri/card[0-1]\n");
        assert_eq!(o.method(), "index_is_minor");
        assert_eq!(o.minors(&[(0, Some(0))]), None);
        assert!(o.describe("x").contains("AutoDetect=oneapi"));
        assert!(matches!(
            order("Name=mps Count=100\n"),
            GpuOrder::Unknown(_)
        ));
        let o = order(&"Name=gpu File=/dev/nvidia[0-999]\n".repeat(2));
        assert!(
            o.describe("x").contains("more than 1024 device files"),
            "{o:?}"
        );
    }

    #[test]
    fn candidates_put_the_setting_then_slurm_conf_first() {
        assert_eq!(
            candidates(
                Some(Path::new("/x/gres.conf")),
                Some(Path::new("/y/slurm.conf"))
            ),
            [PathBuf::from("/x/gres.conf")]
        );
        assert_eq!(
            candidates(None, Some(Path::new("/s/conf-cache/slurm.conf"))),
            [
                PathBuf::from("/s/conf-cache/gres.conf"),
                PathBuf::from(DEFAULT_PATH),
                PathBuf::from(CONFIGLESS_PATH)
            ]
        );
        assert_eq!(candidates(None, None).len(), 2);
    }

    #[test]
    fn gres_conf_is_read_bounded_and_never_from_a_fifo() {
        use crate::cgroup::fixture::{TempTree, within};
        use std::time::Duration;
        let t = TempTree::new("gres-read");
        t.write("ok/gres.conf", "Name=gpu File=/dev/nvidia[0-1]\n");
        let fifo = t.fifo("fifo/gres.conf");
        let huge = t.path().join("huge/gres.conf");
        std::fs::create_dir_all(huge.parent().unwrap()).unwrap();
        let f = std::fs::File::create(&huge).unwrap();
        f.set_len(MAX_GRES_CONF_BYTES + 1).unwrap();
        let read = |p: PathBuf| {
            within(Duration::from_secs(2), move || {
                read_node_gres(&[p], "n1").map(|g| g.map(|(_, g)| g.files()))
            })
            .expect("read_node_gres did not return within 2 s")
        };
        assert_eq!(
            read(t.path().join("ok/gres.conf")).unwrap(),
            Some(vec!["/dev/nvidia0".to_string(), "/dev/nvidia1".to_string()])
        );
        // A FIFO (no writer) is refused at once, not waited on.
        let e = read(fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read(huge).unwrap_err().to_string();
        assert!(e.contains("larger than 1 MiB"), "{e}");
        // A missing file is no error: the next place is tried.
        let both = [
            t.path().join("none/gres.conf"),
            t.path().join("ok/gres.conf"),
        ];
        assert!(read_node_gres(&both, "n1").unwrap().is_some());
    }

    #[test]
    fn minor_of_reads_a_character_device() {
        assert_eq!(minor_of(Path::new("/dev/null")), Some(3));
        assert_eq!(minor_of(Path::new("/")), None);
        assert_eq!(minor_of(Path::new("/nonexistent/x")), None);
    }
}
