//! The result of tracking: the same tree as `gpu_tracker`'s `to_json()` (same keys, same
//! meaning, values in the chosen units), with added keys for what we know and it does not. Added
//! keys come after gpu_tracker's in every object; none is renamed or changes meaning.

mod text;

use serde::{Deserialize, Serialize};

use crate::units::{MemUnit, TimeUnit};

/// Max and mean of a utilization, summed over processing units ("sum") and divided by the units
/// expected ("hardware"), as `gpu_tracker` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessingUnitPercentages {
    /// Highest sum over units seen in one interval (100 = one unit fully busy).
    pub max_sum_percent: f64,
    /// `max_sum_percent` divided by the expected units.
    pub max_hardware_percent: f64,
    /// Mean over the run, weighted by interval length: total busy time / wall time.
    pub mean_sum_percent: f64,
    /// `mean_sum_percent` divided by the expected units.
    pub mean_hardware_percent: f64,
}

/// Everything measured over one tracking session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceUsage {
    /// Peak host memory.
    pub max_ram: MaxRam,
    /// Peak GPU memory.
    pub max_gpu_ram: MaxGpuRam,
    /// CPU utilization and threads.
    pub cpu_utilization: CpuUtilization,
    /// GPU utilization of the selected GPUs.
    pub gpu_utilization: GpuUtilization,
    /// Wall time.
    pub compute_time: ComputeTime,
    /// Added: one entry per GPU on the machine.
    pub gpus: Vec<GpuUsage>,
    /// Added: how the figures were obtained.
    pub tracking: TrackingInfo,
}

/// Resident memory split into private and shared pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RssValues {
    /// Peak resident set size.
    pub total_rss: f64,
    /// Peak of pages mapped by one process only.
    pub private_rss: f64,
    /// Peak of pages also mapped by another process (counted once in descendants and combined).
    pub shared_rss: f64,
}

/// Peak host memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaxRam {
    /// Unit of every memory figure here.
    pub unit: MemUnit,
    /// Memory of the machine.
    pub system_capacity: f64,
    /// Peak memory in use on the whole machine (sampled).
    pub system: f64,
    /// The tracked process. `total_rss` is the kernel's high-water mark: exact.
    pub main: RssValues,
    /// Its descendants, summed.
    pub descendants: RssValues,
    /// Main and descendants together.
    pub combined: RssValues,
    /// Added: the peak RSS of the largest single process of the tree, exact (kernel high-water
    /// marks of live processes, `getrusage` of ended ones).
    pub largest_process_rss: f64,
    /// Added: where `combined.total_rss` comes from: a cgroup peak counter, or `sampled`.
    pub combined_peak_source: String,
    /// Added: whether `combined.total_rss` includes page cache (true for cgroup counters).
    pub combined_peak_includes_page_cache: bool,
}

/// Peak GPU memory, summed over GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaxGpuRam {
    /// Unit of every figure here.
    pub unit: MemUnit,
    /// Memory of all GPUs of the machine.
    pub system_capacity: f64,
    /// Peak GPU memory in use on the machine, by anyone.
    pub system: f64,
    /// Peak GPU memory of the tracked process.
    pub main: f64,
    /// Peak GPU memory of its descendants, summed.
    pub descendants: f64,
    /// Peak GPU memory of both.
    pub combined: f64,
}

/// CPU utilization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuUtilization {
    /// CPUs online.
    pub system_core_count: u32,
    /// Cores the command was expected to use (`--nec`; all by default).
    pub n_expected_cores: u32,
    /// The whole machine (hardware percent against all its cores).
    pub system: ProcessingUnitPercentages,
    /// The tracked process.
    pub main: ProcessingUnitPercentages,
    /// Its descendants.
    pub descendants: ProcessingUnitPercentages,
    /// Both.
    pub combined: ProcessingUnitPercentages,
    /// Most threads of the tracked process at once.
    pub main_n_threads: u64,
    /// Most threads of its descendants at once.
    pub descendants_n_threads: u64,
    /// Most threads of both at once.
    pub combined_n_threads: u64,
}

/// GPU utilization of the selected GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuUtilization {
    /// GPUs on the machine.
    pub system_gpu_count: u32,
    /// GPUs selected (`--guuids`; all by default).
    pub n_expected_gpus: u32,
    /// Utilization summed over the selected GPUs.
    pub gpu_percentages: ProcessingUnitPercentages,
}

/// Time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeTime {
    /// Unit of the figures here.
    pub unit: TimeUnit,
    /// Wall time of the tracking session.
    pub time: f64,
    /// Added: CPU time (user + system) of the main process and its descendants, exact where
    /// the kernel accounts for ended processes.
    pub cpu_time: f64,
}

/// Added: one GPU over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuUsage {
    /// `nvidia` or `amd`.
    #[serde(default)]
    pub vendor: crate::gpu::Vendor,
    /// NVML index; for an AMD GPU its position among the KFD topology's GPUs.
    pub index: u32,
    /// PCI address, where the source gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Whether it counts towards `gpu_utilization` (selected by `--guuids`).
    pub selected: bool,
    /// Unit of the memory figures here (the GPU RAM unit).
    pub unit: MemUnit,
    /// Memory size.
    pub memory_total: f64,
    /// Peak memory in use on the device, by anyone.
    pub max_used: f64,
    /// Peak memory of the tracked processes on the device.
    pub max_tracked: f64,
    /// Mean utilization, percent; `null` where the device does not report it.
    pub mean_utilization_percent: Option<f64>,
    /// Highest utilization seen, percent.
    pub max_utilization_percent: Option<f64>,
    /// Energy used by the device during the run, joules.
    pub energy_joules: Option<f64>,
    /// Whether the device fell off the bus during the run (figures stop there).
    pub lost: bool,
    /// The most processes outside the tracked ones seen on the GPU at once (the step's record
    /// says so; `-e`'s output keeps the Python tool's keys).
    #[serde(skip)]
    pub other_processes: u32,
    /// Of those, the most processes of the job's other steps seen at once, where the tracked
    /// set is a job's step and its job's processes could be told apart (`None` otherwise).
    #[serde(skip)]
    pub other_step_processes: Option<u32>,
    /// Of those, the most processes outside the job seen at once (`None` as above).
    #[serde(skip)]
    pub outside_job_processes: Option<u32>,
    /// Peak memory of the job's processes on the device: the tracked ones and the job's other
    /// steps' at the same reading (`None` as above).
    #[serde(skip)]
    pub max_job_memory: Option<f64>,
    /// Added: SM activity, clock event reasons, Xid and ECC errors, and why a figure has no
    /// value.
    #[serde(flatten)]
    pub depth: crate::gpu::figures::GpuDepth,
}

/// Added: how the figures were obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrackingInfo {
    /// gpu-tracker version.
    pub version: String,
    /// Seconds between samples.
    pub sleep_time: f64,
    /// Samples taken.
    pub samples: u64,
    /// Where the private/shared split comes from: `smaps_rollup` or `status`.
    pub memory_detail: String,
    /// `nvml`, or `none` when no GPU could be read.
    pub gpu_source: String,
    /// CPU seconds the sampler itself used.
    pub sampler_cpu_seconds: f64,
    /// Things worth knowing about these figures (a sampled peak, a lost GPU, ...).
    pub notes: Vec<String>,
}

impl ResourceUsage {
    /// The JSON document, pretty-printed with one-space indent as `gpu_tracker -f json` prints.
    pub fn to_json_pretty(&self) -> String {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        // Serializing plain structs of numbers and strings cannot fail.
        self.serialize(&mut ser).expect("usage serializes");
        String::from_utf8(buf).expect("serde_json writes UTF-8")
    }
}

/// The text report of any usage tree in JSON form (the Python API renders `gpu_tracker`'s keys
/// alone this way).
pub fn render_text(tree: &serde_json::Value) -> String {
    text::render(tree)
}

impl std::fmt::Display for ResourceUsage {
    /// The text report: the same tree and labels as `gpu_tracker`'s text output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = serde_json::to_value(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&text::render(&v))
    }
}
