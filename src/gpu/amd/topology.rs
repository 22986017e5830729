//! The KFD topology (`sys/class/kfd/kfd/topology/nodes/<n>/`): one node per CPU socket and per
//! GPU (or GPU partition). A GPU node has a non-zero `gpu_id` (the id its processes' KFD files
//! are named by) and, in `properties`, its compute units (`simd_count` / `simd_per_cu`), its
//! render node (`drm_render_minor`), its PCI address (`domain`, `location_id`) and `unique_id`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::files::{self, FileProblem};
use super::parse;

/// The KFD topology's nodes, under a root.
pub const NODES: &str = "sys/class/kfd/kfd/topology/nodes";

/// One GPU node of the KFD topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdGpu {
    /// The node's number (its directory's name).
    pub node: u32,
    /// `gpu_id`: names the node's files in each process's KFD directory (`vram_<gpu_id>`).
    pub gpu_id: u32,
    /// `name`: the graphics target (`gfx942`); may be empty.
    pub name: String,
    /// `drm_render_minor`: the render node `/dev/dri/renderD<minor>`.
    pub render_minor: Option<u32>,
    /// The PCI address from `domain` and `location_id`.
    pub pci: Option<String>,
    /// Compute units: `simd_count / simd_per_cu`.
    pub compute_units: Option<u32>,
    /// `unique_id`, where not 0.
    pub unique_id: Option<u64>,
}

/// What the topology holds.
#[derive(Debug, Default)]
pub struct Topology {
    /// GPU nodes, in node order.
    pub gpus: Vec<KfdGpu>,
    /// Nodes that could not be read (path and why), left out of `gpus`.
    pub unreadable: Vec<String>,
}

/// A GPU node from its files' contents (pure): `None` for a CPU node (`gpu_id` 0).
pub fn parse_node(node: u32, gpu_id: u64, name: &str, properties: &str) -> Option<KfdGpu> {
    let gpu_id = u32::try_from(gpu_id).ok().filter(|g| *g != 0)?;
    let p: BTreeMap<String, u64> = parse::parse_properties(properties);
    let get = |k: &str| p.get(k).copied();
    let compute_units = match (get("simd_count"), get("simd_per_cu")) {
        (Some(s), Some(per)) if per > 0 && s > 0 => u32::try_from(s / per).ok(),
        _ => None,
    };
    let pci = match (get("domain"), get("location_id")) {
        (Some(d), Some(l)) => parse::pci_address_from_kfd(d, l),
        // Kernels before `domain` was added give only the location: domain 0.
        (None, Some(l)) => parse::pci_address_from_kfd(0, l),
        _ => None,
    };
    Some(KfdGpu {
        node,
        gpu_id,
        name: name.trim().to_string(),
        // 0 is no render node (a CPU node's value).
        render_minor: get("drm_render_minor")
            .filter(|m| *m > 0)
            .and_then(|m| u32::try_from(m).ok()),
        pci,
        compute_units,
        unique_id: get("unique_id").filter(|u| *u != 0),
    })
}

/// The topology under `root`. `Err` with the path when its directory cannot be listed (no
/// KFD: the amdgpu driver is not loaded, or this is no AMD node).
pub fn read(root: &Path) -> Result<Topology, (PathBuf, std::io::Error)> {
    let dir = root.join(NODES);
    let entries = std::fs::read_dir(&dir).map_err(|e| (dir.clone(), e))?;
    let mut numbered: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| parse::parse_number(e.file_name().to_str()?))
        .filter_map(|n| u32::try_from(n).ok())
        .collect();
    numbered.sort_unstable();
    let mut t = Topology::default();
    for n in numbered {
        let at = dir.join(n.to_string());
        let read_node = || -> Result<Option<KfdGpu>, FileProblem> {
            let gpu_id = files::read_number(&at.join("gpu_id"))?;
            if gpu_id == 0 {
                return Ok(None);
            }
            let props = files::read_text(&at.join("properties"), files::MAX_PROPERTIES)?;
            // The name is not needed to read the GPU: a missing one is an empty one.
            let name = files::read_text(&at.join("name"), files::MAX_TEXT).unwrap_or_default();
            Ok(parse_node(n, gpu_id, &name, &props))
        };
        match read_node() {
            Ok(Some(g)) => t.gpus.push(g),
            Ok(None) => {}
            Err(e) => t.unreadable.push(e.to_string()),
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI300X: &str = "cpu_cores_count 0\nsimd_count 1216\nmem_banks_count 1\n\
        simd_per_cu 4\nvendor_id 4098\ndevice_id 29857\nlocation_id 4352\ndomain 0\n\
        drm_render_minor 128\nunique_id 5547384938462516833\n";

    #[test]
    fn a_gpu_node_gives_its_id_render_node_address_and_compute_units() {
        let g = parse_node(2, 53241, "gfx942\n", MI300X).unwrap();
        assert_eq!(
            g,
            KfdGpu {
                node: 2,
                gpu_id: 53241,
                name: "gfx942".into(),
                render_minor: Some(128),
                pci: Some("0000:11:00.0".into()),
                compute_units: Some(304),
                unique_id: Some(5547384938462516833),
            }
        );
    }

    #[test]
    fn a_cpu_node_is_not_a_gpu_and_missing_properties_stay_missing() {
        assert_eq!(
            parse_node(0, 0, "", "cpu_cores_count 96\nsimd_count 0\n"),
            None
        );
        let g = parse_node(
            1,
            7,
            "",
            "simd_count 8\nsimd_per_cu 0\ndrm_render_minor 0\n",
        )
        .unwrap();
        assert_eq!(
            (g.compute_units, g.render_minor, g.pci, g.unique_id),
            (None, None, None, None)
        );
    }
}
