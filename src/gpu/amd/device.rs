//! An amdgpu device's own files, found through its render node as Slurm names it:
//! `sys/class/drm/renderD<minor>/device` leads to the PCI device's directory, which holds
//! `gpu_busy_percent`, `mem_info_vram_used`, `mem_info_vram_total`, `unique_id`,
//! `product_name`, `gpu_metrics`, and `hwmon/hwmon<k>/` (the one whose `name` is `amdgpu`)
//! with `power1_average` or `power1_input` (microwatts).

use std::path::{Path, PathBuf};

use super::files::{self, FileProblem};
use super::parse;

/// The render nodes' class directory, under a root.
pub const DRM: &str = "sys/class/drm";

/// The hwmon power files, in the order they are preferred: the average suits an integral
/// better than a snapshot; a GPU gives the one its firmware supports (some both).
pub const POWER_FILES: [&str; 2] = ["power1_average", "power1_input"];

/// Where one GPU's device files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFiles {
    /// The device's directory (the render node's `device` link, resolved).
    pub dir: PathBuf,
    /// Its PCI address, when the directory is a PCI device's (its name).
    pub pci: Option<String>,
    /// The amdgpu hwmon power file, where the device has one.
    pub power: Option<(PathBuf, &'static str)>,
}

/// Finds the device files of render node `minor` under `root`. The link must lead to a
/// directory inside `root`: a fixture's link that climbs out of it is refused.
pub fn locate(root: &Path, minor: u32) -> Result<DeviceFiles, FileProblem> {
    let link = root
        .join(DRM)
        .join(format!("renderD{minor}"))
        .join("device");
    let dir = std::fs::canonicalize(&link).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            FileProblem::Missing(link.clone())
        } else {
            FileProblem::Unreadable(link.clone(), e)
        }
    })?;
    let inside = std::fs::canonicalize(root)
        .map(|r| dir.starts_with(r))
        .unwrap_or(false);
    if !inside || !dir.is_dir() {
        return Err(FileProblem::Garbage(
            link,
            format!(
                "a link to {}, not a device directory under the root",
                dir.display()
            ),
        ));
    }
    let pci = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse::parse_pci_address);
    let power = find_power(&dir);
    Ok(DeviceFiles { dir, pci, power })
}

/// The power file of the device's amdgpu hwmon directory.
fn find_power(dir: &Path) -> Option<(PathBuf, &'static str)> {
    let mut hwmons: Vec<PathBuf> = std::fs::read_dir(dir.join("hwmon"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("hwmon"))
        .map(|e| e.path())
        .collect();
    hwmons.sort();
    let hw = hwmons.into_iter().find(|h| {
        files::read_text(&h.join("name"), files::MAX_TEXT).is_ok_and(|n| n.trim() == "amdgpu")
    })?;
    POWER_FILES
        .iter()
        .map(|f| (hw.join(f), *f))
        .find(|(p, _)| p.is_file())
}

impl DeviceFiles {
    /// The path of the device file `name`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A number file of the device.
    pub fn number(&self, name: &str) -> Result<u64, FileProblem> {
        files::read_number(&self.file(name))
    }

    /// Whether the device's directory is still there (a GPU that fell off the bus, or whose
    /// driver was unbound, takes it away).
    pub fn present(&self) -> bool {
        self.dir.is_dir()
    }

    /// `product_name`, if the board gives one.
    pub fn product_name(&self) -> Option<String> {
        let t = files::read_text(&self.file("product_name"), files::MAX_TEXT).ok()?;
        parse::parse_product_name(&t)
    }

    /// `unique_id`, if the GPU has one.
    pub fn unique_id(&self) -> Option<u64> {
        let t = files::read_text(&self.file("unique_id"), files::MAX_TEXT).ok()?;
        parse::parse_unique_id(&t)
    }

    /// The `gpu_metrics` table.
    pub fn gpu_metrics(&self) -> Result<Vec<u8>, FileProblem> {
        files::read_bytes(&self.file("gpu_metrics"), files::MAX_METRICS)
    }

    /// Power drawn, microwatts.
    pub fn power_uw(&self) -> Option<Result<u64, FileProblem>> {
        self.power.as_ref().map(|(p, _)| files::read_number(p))
    }
}
