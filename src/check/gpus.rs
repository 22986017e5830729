//! The GPUs: the sources the plugin reads them from (NVML, AMD's kernel files) found, and each
//! GPU gres.conf gives this node matched to one of them, as the plugin maps a step's
//! allocation (`GpuOrder`), one line per node slurmd serves on this machine.

use std::path::{Path, PathBuf};

use super::slurmd::Slurmd;
use super::{Check, SlurmConfText};
use crate::config::Config;
use crate::gpu::{GpuConfig, GpuInfo, Vendor};
use crate::gres::{self, GpuOrder, MigMinors, NodeGres};

/// One line per node: the GPUs gres.conf gives it against those the sources read.
pub fn check(cfg: &Config, conf: &SlurmConfText, daemons: &[Slurmd], out: &mut Vec<Check>) {
    let source = open(cfg);
    let mut nodes: Vec<String> = daemons.iter().filter_map(|d| d.node.clone()).collect();
    if nodes.is_empty() {
        nodes.push(crate::sys::hostname());
    }
    let setting = (!cfg.gres_conf.is_empty()).then(|| PathBuf::from(&cfg.gres_conf));
    let paths = gres::candidates(setting.as_deref(), Some(&conf.path));
    let mig = MigMinors::read(Path::new(&cfg.mig_minors_file))
        .ok()
        .flatten();
    for node in nodes {
        let read = gres::read_node_gres(&paths, &node).map_err(|e| e.to_string());
        let read = read.map(|r| {
            r.map(|(path, g)| {
                let order = GpuOrder::from_conf(&g, |p| gres::minor_of(Path::new(p)), mig.as_ref());
                (path, g, order)
            })
        });
        out.push(decide(&node, read, &source));
    }
}

/// The GPUs the plugin's sources read on this node, or why none: NVML from `nvml_library`
/// (only when root's alone: the plugin loads it as root) and AMD's files under `amd_root`,
/// each opened on its own, as a step opens the one its GPUs' vendor needs.
pub fn open(cfg: &Config) -> Result<Vec<GpuInfo>, String> {
    let mut found = Vec::new();
    let mut why = Vec::new();
    for vendor in [Vendor::Nvidia, Vendor::Amd] {
        if vendor == Vendor::Nvidia
            && cfg.nvml_library.contains('/')
            && let Err(e) =
                crate::trust::check_root_trusted(Path::new(&cfg.nvml_library), "nvml_library")
        {
            why.push(e);
            continue;
        }
        let config = GpuConfig {
            nvml_lib: (!cfg.nvml_library.is_empty()).then(|| PathBuf::from(&cfg.nvml_library)),
            disabled: false,
            mig: true,
            brand: Some(vendor),
            amd_root: Some(PathBuf::from(&cfg.amd_root)),
        };
        match crate::gpu::open(&config) {
            Ok(s) => found.extend(s.devices().iter().cloned()),
            Err(e) => why.push(e.to_string()),
        }
    }
    if found.is_empty() && !why.is_empty() {
        return Err(why.join("; "));
    }
    Ok(found)
}

/// A node's GPUs for people: `2 NVIDIA (minors 4, 7)`.
fn describe(devices: &[GpuInfo]) -> String {
    let mut parts = Vec::new();
    for v in [Vendor::Nvidia, Vendor::Amd] {
        let of: Vec<&GpuInfo> = devices.iter().filter(|d| d.vendor == v).collect();
        if of.is_empty() {
            continue;
        }
        let minors: Vec<String> = of
            .iter()
            .filter(|d| d.mig.is_none())
            .filter_map(|d| d.minor.map(|m| m.to_string()))
            .collect();
        let mig = of.iter().filter(|d| d.mig.is_some()).count();
        let mut s = format!(
            "{} {} (minors {})",
            of.len() - mig,
            v.as_str(),
            minors.join(", ")
        );
        if mig > 0 {
            s.push_str(&format!(" and {mig} MIG instances"));
        }
        parts.push(s);
    }
    parts.join(", ")
}

/// The decision for `node`: its gres.conf (the file, its lines, the order slurmd gives them;
/// `None`: no gres.conf) against what the sources read.
pub fn decide(
    node: &str,
    gres: Result<Option<(PathBuf, NodeGres, GpuOrder)>, String>,
    source: &Result<Vec<GpuInfo>, String>,
) -> Check {
    let name = "gpus";
    let gres = match gres {
        Ok(g) => g,
        Err(e) => {
            return Check::warn(
                name,
                format!("node {node}: gres.conf cannot be read ({e}): GPUs are mapped by guess"),
                "make gres.conf a readable regular file",
            );
        }
    };
    let wants = gres.as_ref().filter(|(_, g, _)| {
        !g.gpus.is_empty() || g.autodetect.as_deref().is_some_and(|a| a != "off")
    });
    let found = source.as_deref().unwrap_or_default();
    let Some((path, _, order)) = wants else {
        if found.is_empty() {
            return Check::ok(
                name,
                format!("node {node}: no GPUs in gres.conf, none found"),
            );
        }
        return Check::warn(
            name,
            format!(
                "node {node}: {} found, but gres.conf gives this node none: Slurm does not \
                 allocate them, and what jobs do on them is not theirs",
                describe(found)
            ),
            "add the node's GPUs to gres.conf (and Gres=gpu:N to its NodeName line)",
        );
    };
    let at = path.display();
    if let Err(why) = source {
        return Check::fail(
            name,
            format!("node {node}: {at} gives it GPUs, but no source reads any: {why}"),
            "install the NVIDIA driver's libnvidia-ml.so.1 (or set nvml_library), or AMD's \
             amdgpu driver; and run the check as root",
        );
    }
    let Some(targets) = order.targets(found) else {
        return Check::warn(
            name,
            format!(
                "node {node}: {} found, but the order slurmd gives them is not known ({}): the \
                 plugin takes Slurm's index for the minor number",
                describe(found),
                order.describe(&at.to_string())
            ),
            "name the GPUs' device files in gres.conf (File=) or use AutoDetect",
        );
    };
    let missing: Vec<usize> = targets
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.as_ref().is_some_and(|t| found.iter().any(|d| t.is(d))))
        .map(|(i, _)| i)
        .collect();
    if targets.is_empty() || !missing.is_empty() {
        return Check::warn(
            name,
            format!(
                "node {node}: {} found, but of the {} GPUs {at} gives it, index {missing:?} \
                 matches none of them: steps on them get no GPU figures",
                describe(found),
                targets.len()
            ),
            "make gres.conf name the device files of the GPUs this node has",
        );
    }
    let matched: Vec<String> = targets
        .iter()
        .flatten()
        .filter_map(|t| found.iter().find(|d| t.is(d)))
        .map(|d| {
            let minor = d.minor.map(|m| format!(" minor {m}")).unwrap_or_default();
            match &d.mig {
                Some(i) => format!(
                    "{}{minor} MIG gi {} ci {}",
                    d.vendor.as_str(),
                    i.gpu_instance_id,
                    i.compute_instance_id
                ),
                None => format!("{}{minor}", d.vendor.as_str()),
            }
        })
        .collect();
    Check::ok(
        name,
        format!(
            "node {node}: the {} GPUs of {at} ({}) are found: {}",
            targets.len(),
            order.method(),
            matched.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    fn nvidia(index: u32, minor: u32) -> GpuInfo {
        GpuInfo {
            vendor: Vendor::Nvidia,
            index,
            minor: Some(minor),
            pci_bus_id: None,
            compute_units: None,
            uuid: format!("GPU-{index}"),
            name: "H100".into(),
            memory_total: 80 << 30,
            mig: None,
        }
    }

    fn gres_of(text: &str, node: &str) -> Result<Option<(PathBuf, NodeGres, GpuOrder)>, String> {
        let g = gres::parse_gres_conf(text, node);
        // /dev/nvidiaN has minor N on a real node; here the name says it.
        let minor = |p: &str| p.strip_prefix("/dev/nvidia")?.parse().ok();
        let order = GpuOrder::from_conf(&g, minor, None);
        Ok(Some((PathBuf::from("/etc/slurm/gres.conf"), g, order)))
    }

    #[test]
    fn every_gpu_of_gres_conf_must_be_one_the_sources_read() {
        let conf = "NodeName=n1 Name=gpu File=/dev/nvidia[0-1]\n";
        let two = Ok(vec![nvidia(0, 0), nvidia(1, 1)]);
        let c = decide("n1", gres_of(conf, "n1"), &two);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.said.contains("the 2 GPUs of /etc/slurm/gres.conf"),
            "{}",
            c.said
        );
        assert!(
            c.said
                .ends_with("are found: nvidia minor 0, nvidia minor 1"),
            "{}",
            c.said
        );
        // One GPU fell off the bus, or gres.conf names the wrong files.
        let one = Ok(vec![nvidia(0, 0)]);
        let c = decide("n1", gres_of(conf, "n1"), &one);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.said.contains("index [1] matches none"), "{}", c.said);
        // gres.conf gives GPUs, no source reads any: GPU jobs lose every GPU figure.
        let none = Err("NVML: libnvidia-ml.so.1 not found".to_string());
        let c = decide("n1", gres_of(conf, "n1"), &none);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.said.contains("libnvidia-ml.so.1 not found"), "{}", c.said);
    }

    #[test]
    fn a_cpu_node_passes_and_unlisted_gpus_are_told() {
        let conf = "NodeName=n1 Name=gpu File=/dev/nvidia[0-1]\n";
        let none = Err("no GPU source".to_string());
        assert_eq!(
            decide("cpu1", gres_of(conf, "cpu1"), &none).status,
            Status::Ok
        );
        assert_eq!(decide("cpu1", Ok(None), &none).status, Status::Ok);
        let c = decide("cpu1", Ok(None), &Ok(vec![nvidia(0, 0)]));
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.said.contains("gres.conf gives this node none"),
            "{}",
            c.said
        );
        let c = decide("n1", Err("gres.conf: denied".into()), &none);
        assert_eq!(c.status, Status::Warn);
    }
}
