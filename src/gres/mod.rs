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
//! [`parse`] is pure; [`read_node_gres`] and [`minor_of`] are the thin I/O.

pub mod parse;

use std::path::{Path, PathBuf};

pub use parse::{NodeGres, parse_gres_conf};

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

/// A gres.conf that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}: {1}")]
pub struct GresError(pub PathBuf, #[source] pub std::io::Error);

/// Reads the first of `paths` that exists and parses it for `node`. `Ok(None)`: none exists.
pub fn read_node_gres(
    paths: &[PathBuf],
    node: &str,
) -> Result<Option<(PathBuf, NodeGres)>, GresError> {
    for p in paths {
        match std::fs::read_to_string(p) {
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
    /// Not known; the reason. The index is taken for the minor number (the old assumption).
    Unknown(String),
}

impl GpuOrder {
    /// The order slurmd uses for a node with this gres.conf content; `minor` resolves a path
    /// (the real one is [`minor_of`]).
    pub fn from_conf(conf: &NodeGres, minor: impl Fn(&str) -> Option<u32>) -> GpuOrder {
        let files: Vec<DeviceFile> = conf
            .files()
            .into_iter()
            .map(|p| DeviceFile {
                minor: minor(&p),
                path: p,
            })
            .collect();
        match conf.autodetect.as_deref() {
            None | Some("off") if files.is_empty() => {
                GpuOrder::Unknown("gres.conf names no GPU device file for this node".into())
            }
            None | Some("off") => GpuOrder::Files(files),
            Some("nvml") => GpuOrder::NvmlIndex(files),
            Some("nvidia") => GpuOrder::FileName(files),
            Some(other) => GpuOrder::Unknown(format!(
                "gres.conf has AutoDetect={other}, whose order is not known here"
            )),
        }
    }

    /// A short name of the method, for the record's `sampler.gpu_mapping`.
    pub fn method(&self) -> &'static str {
        match self {
            GpuOrder::Files(_) => "gres_conf_files",
            GpuOrder::NvmlIndex(_) => "autodetect_nvml",
            GpuOrder::FileName(_) => "autodetect_nvidia",
            GpuOrder::Unknown(_) => "index_is_minor",
        }
    }

    /// Slurm's index → minor number table, given NVML's devices as (NVML index, minor).
    /// `None` for [`GpuOrder::Unknown`]. An entry is `None` where the file has no minor.
    pub fn minors(&self, nvml: &[(u32, Option<u32>)]) -> Option<Vec<Option<u32>>> {
        let detected = |files: &[DeviceFile], sort_by_name: bool| {
            let mut sys: Vec<(u32, u32)> = nvml
                .iter()
                .filter_map(|&(i, m)| m.map(|m| (i, m)))
                .collect();
            sys.sort_unstable();
            let name = |m: u32| format!("/dev/nvidia{m}");
            let mut chosen: Vec<(String, Option<u32>)> = if files.is_empty() {
                sys.iter().map(|&(_, m)| (name(m), Some(m))).collect()
            } else {
                sys.iter()
                    .filter(|&&(_, m)| files.iter().any(|f| f.path == name(m)))
                    .map(|&(_, m)| (name(m), Some(m)))
                    .collect()
            };
            let mut extra: Vec<(String, Option<u32>)> = files
                .iter()
                .filter(|f| !chosen.iter().any(|(p, _)| *p == f.path))
                .map(|f| (f.path.clone(), f.minor))
                .collect();
            extra.sort_by(|a, b| parse::natural_cmp(&a.0, &b.0));
            chosen.extend(extra);
            if sort_by_name {
                chosen.sort_by(|a, b| parse::natural_cmp(&a.0, &b.0));
            }
            chosen.into_iter().map(|(_, m)| m).collect()
        };
        match self {
            GpuOrder::Files(f) => Some(f.iter().map(|f| f.minor).collect()),
            GpuOrder::NvmlIndex(f) => Some(detected(f, false)),
            GpuOrder::FileName(f) => Some(detected(f, true)),
            GpuOrder::Unknown(_) => None,
        }
    }

    /// One line for the record's notes: where the mapping came from.
    pub fn describe(&self, source: &str) -> String {
        let list = |f: &[DeviceFile]| {
            f.iter()
                .map(|f| match f.minor {
                    Some(m) => format!("{} (minor {m})", f.path),
                    None => format!("{} (no device)", f.path),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            GpuOrder::Files(f) => format!(
                "GPU indices are positions in {source}'s device files: {}",
                list(f)
            ),
            GpuOrder::NvmlIndex(f) | GpuOrder::FileName(f) => {
                let how = match self {
                    GpuOrder::NvmlIndex(_) => "AutoDetect=nvml (NVML index order)",
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

    fn order(conf: &str) -> GpuOrder {
        // A device file's minor is its trailing number here, plus 100 for the `sim` files.
        GpuOrder::from_conf(&parse_gres_conf(conf, "n1"), |p| {
            let n: u32 = p
                .trim_start_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()?;
            Some(if p.contains("sim") { n + 100 } else { n })
        })
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

    #[test]
    fn unknown_orders_say_why() {
        let o = order("AutoDetect=rsmi\nName=gpu File=/dev/dri/card[0-1]\n");
        assert_eq!(o.method(), "index_is_minor");
        assert_eq!(o.minors(&[(0, Some(0))]), None);
        assert!(o.describe("x").contains("AutoDetect=rsmi"));
        assert!(matches!(
            order("Name=mps Count=100\n"),
            GpuOrder::Unknown(_)
        ));
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
    fn minor_of_reads_a_character_device() {
        assert_eq!(minor_of(Path::new("/dev/null")), Some(3));
        assert_eq!(minor_of(Path::new("/")), None);
        assert_eq!(minor_of(Path::new("/nonexistent/x")), None);
    }
}
