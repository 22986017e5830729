//! Compute partitions of one AMD GPU (the MI300 series' DPX, TPX, QPX and CPX modes): each
//! partition is a KFD topology node of its own, with its own `gpu_id` (its processes' VRAM and
//! CU occupancy are its own) and its own render node. Partition 0's render node is the PCI
//! device's own (the kernel's `amdgpu_xcp.c` gives it the whole GPU's DRM device); the others'
//! lead to a platform device (`amdgpu_xcp.<n>`) without the amdgpu files. So every device file,
//! read through partition 0, counts the whole GPU: all partitions' VRAM, busy time, power and
//! energy. None of those is a partition's figure.
//!
//! A device is partitioned when its `current_compute_partition` says a mode other than `SPX`,
//! or when more than one KFD node lives at its PCI address: the kernel gives each partition's
//! node the device's `location_id` with the partition's number or'ed into its low bits (the
//! function's), and the device's `unique_id`.

use super::device::DeviceFiles;
use super::files;
use super::topology::KfdGpu;

/// The device file naming the compute partition mode (`SPX`, `DPX`, `TPX`, `QPX`, `CPX`).
pub const MODE_FILE: &str = "current_compute_partition";

/// The mode of a GPU that is one partition: the whole GPU.
pub const WHOLE: &str = "SPX";

/// One compute partition of a partitioned GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Its number on the device (0 for the partition whose render node is the device's).
    pub index: u32,
    /// The mode the device's `current_compute_partition` names, where it could be read.
    pub mode: Option<String>,
    /// The GPU (a position in the topology's GPUs) whose render node leads to the PCI device:
    /// the device's name, memory size and unique id are read there.
    pub device: Option<usize>,
}

/// The PCI device a KFD node belongs to: its address without the function (where partitions
/// put their number), and its unique id.
fn device_key(k: &KfdGpu, files: Option<&DeviceFiles>) -> Option<(String, Option<u64>)> {
    let pci = k
        .pci
        .clone()
        .or_else(|| files.and_then(|f| f.pci.clone()))?;
    let slot = pci.rsplit_once('.').map_or(pci.as_str(), |(s, _)| s);
    Some((slot.to_string(), k.unique_id))
}

/// The mode in a `current_compute_partition` file's text: one short word, upper case.
pub fn parse_mode(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty() && t.len() <= 8 && t.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| t.to_ascii_uppercase())
}

/// For each GPU of the topology (`located`: each one's device files, in the same order), the
/// partition it is, or `None` for a whole GPU.
pub fn find(gpus: &[KfdGpu], located: &[Option<DeviceFiles>]) -> Vec<Option<Partition>> {
    let keys: Vec<Option<(String, Option<u64>)>> = gpus
        .iter()
        .enumerate()
        .map(|(i, k)| device_key(k, located.get(i).and_then(|f| f.as_ref())))
        .collect();
    let mut out = vec![None; gpus.len()];
    for (i, key) in keys.iter().enumerate() {
        let Some(key) = key else { continue };
        // The GPUs at the same device, in KFD node order (the topology's order).
        let group: Vec<usize> = (0..gpus.len())
            .filter(|&j| keys[j].as_ref() == Some(key))
            .collect();
        // The member whose render node leads to the PCI device itself.
        let device = group.iter().copied().find(|&j| {
            located
                .get(j)
                .and_then(|f| f.as_ref())
                .is_some_and(|f| f.pci.is_some())
        });
        let mode = device
            .and_then(|j| located[j].as_ref())
            .and_then(|f| files::read_text(&f.file(MODE_FILE), files::MAX_TEXT).ok())
            .and_then(|t| parse_mode(&t));
        let partitioned = group.len() > 1 || mode.as_deref().is_some_and(|m| m != WHOLE);
        if partitioned {
            let index = group.iter().position(|&j| j == i).unwrap_or(0);
            out[i] = Some(Partition {
                index: index as u32,
                mode,
                device,
            });
        }
    }
    out
}

impl Partition {
    /// The GPU's id with the partition in it: `GPU-<unique id>-p<index>`, so that two
    /// partitions of one device are two GPUs.
    pub fn id(&self, device_id: &str) -> String {
        format!("{device_id}-p{}", self.index)
    }

    /// Why a partition has no device figures, for its notes and `no_data`.
    pub fn why_no_device_figures(&self, pci: Option<&str>) -> String {
        format!(
            "compute partition {} of the GPU at {} ({} mode): its device's memory in use, busy \
             %, power and energy are the whole GPU's, every partition's use included, so none \
             is this partition's; its processes' VRAM and CU occupancy are its own",
            self.index,
            pci.unwrap_or("an unknown PCI address"),
            self.mode.as_deref().unwrap_or("a partitioned")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_one_short_word() {
        assert_eq!(parse_mode("CPX\n").as_deref(), Some("CPX"));
        assert_eq!(parse_mode("spx").as_deref(), Some("SPX"));
        assert_eq!(parse_mode(""), None);
        assert_eq!(parse_mode("C P X"), None);
    }
}
