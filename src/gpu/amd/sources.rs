//! What each AMD figure is read from, for the docs, and the figures AMD's kernel files lack.

use crate::gpu::Missing;
use crate::gpu::figures::{NoData, figure};

/// Which figure of an AMD GPU comes from which file (paths under the root), for the docs.
pub const SOURCES: &[(&str, &str)] = &[
    (
        "devices, their compute units, render node, PCI address, unique id",
        "sys/class/kfd/kfd/topology/nodes/<n>/{gpu_id,name,properties}: GPU nodes have a \
         non-zero gpu_id; compute units = simd_count / simd_per_cu",
    ),
    (
        "device files",
        "sys/class/drm/renderD<drm_render_minor>/device (the PCI device; its address must be \
         the KFD node's domain and location_id)",
    ),
    (
        "name, memory size, uuid",
        "<device>/product_name (else \"AMD GPU (<KFD name>)\"), <device>/mem_info_vram_total, \
         <device>/unique_id as GPU-<16 hex digits> (else the PCI address)",
    ),
    (
        "memory in use (device)",
        "<device>/mem_info_vram_used (bytes)",
    ),
    (
        "utilization",
        "<device>/gpu_busy_percent (the graphics/compute engine's busy share, percent)",
    ),
    (
        "power",
        "<device>/hwmon/hwmon<k>/power1_average, else power1_input (microwatts; the hwmon whose \
         name is amdgpu)",
    ),
    (
        "energy",
        "<device>/gpu_metrics energy_accumulator, revisions 1.4 to 1.8 (2^-16 J steps); else \
         the power above integrated over the samples (an estimate, from 0 at the start)",
    ),
    (
        "processes and their memory",
        "sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id> (bytes): processes that opened /dev/kfd, \
         listed once per sample for all GPUs (at most 1024 entries); read for the tracked \
         processes, and for the others only until one holds VRAM on the GPU (at most 1024 \
         files a sample); one holding no VRAM and running no wave on a GPU is not counted on it",
    ),
    (
        "compute partitions",
        "<device>/current_compute_partition other than SPX, or several KFD nodes at one PCI \
         device: every partition's device figures are left out (the whole GPU's), its id gets \
         -p<partition>",
    ),
    (
        "processes' CU occupancy",
        "sys/class/kfd/kfd/proc/<pid>/stats_<gpu_id>/cu_occupancy (compute units with waves in \
         flight now), where the kernel gives it",
    ),
];

/// The figures AMD's kernel files do not give, and why.
pub(super) fn absent_on_amd() -> Vec<Missing> {
    [
        (
            figure::PROCESS_UTILIZATION,
            "AMD's kernel keeps no per-process busy time for compute (HIP's queues run in user \
             mode); the processes' CU occupancy stands in",
        ),
        (
            figure::SM_ACTIVITY,
            "GPM's figures are NVIDIA's; AMD's kernel files have none like them",
        ),
        (
            figure::THROTTLE,
            "not read on AMD GPUs (gpu_metrics' throttle bits differ from one GPU to another)",
        ),
        (
            figure::ECC,
            "not read on AMD GPUs (the kernel's RAS error counts are not read)",
        ),
        (
            figure::XID,
            "Xid errors are NVIDIA's; an AMD GPU's faults reach only the kernel log",
        ),
    ]
    .into_iter()
    .map(|(figure, why)| Missing {
        figure,
        why: NoData::not_supported(why),
    })
    .collect()
}
