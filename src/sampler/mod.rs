//! The sampler: one object that reads a process tree (or a cgroup), the machine and its GPUs at
//! each tick and keeps maxima, means and totals. It sees pids and paths, never Slurm types, so
//! the CLI, the library API and the SPANK plugin all drive the same code.
//!
//! Where the figures come from, and why they are exact where they say so:
//! - Per-process peak RSS: the kernel's high-water mark (`VmHWM`) of every process at every
//!   sample, and `getrusage`/`wait4` maxima of processes that ended: a spike between samples is
//!   still caught.
//! - The combined peak: the peak counter of the command's own cgroup when there is one; else
//!   the largest sampled sum, raised to the largest single-process peak, and marked `sampled`.
//! - CPU: cumulative user+system time. A live process's time is its own; an ended one's time was
//!   added to its parent's `cutime`/`cstime` when it was reaped (or to the tracker's children
//!   usage), so the sum over the tree is complete, and the mean over the run is total CPU time
//!   divided by wall time.

mod gpus;
pub mod stats;
mod tree;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::gpu::GpuSource;
use crate::proc::{CpuTotals, MemSplit, ProcFs, ticks_per_second};
use crate::sys::{self, Rusage};
use crate::tracking_file::StaticData;
use crate::units::Units;
use crate::usage::{
    ComputeTime, CpuUtilization, MaxGpuRam, MaxRam, ResourceUsage, RssValues, TrackingInfo,
};
use gpus::GpuAccumulator;
use stats::PercentAcc;

/// How the private/shared split of each process is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryDetail {
    /// `/proc/<pid>/smaps_rollup`: the real split, as `gpu_tracker` reports it. Walks the
    /// process's page tables, so it costs more on very large processes.
    SmapsRollup,
    /// `/proc/<pid>/status` only: anonymous memory as private, file and shmem pages as shared.
    /// Cheap at any size; the default inside Slurm.
    Status,
}

impl MemoryDetail {
    fn as_str(self) -> &'static str {
        match self {
            MemoryDetail::SmapsRollup => "smaps_rollup",
            MemoryDetail::Status => "status",
        }
    }
}

/// Settings of a sampler.
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    /// Time between samples.
    pub interval: Duration,
    /// How memory is split into private and shared.
    pub memory_detail: MemoryDetail,
    /// Denominator of CPU hardware percentages; all online CPUs when `None`.
    pub n_expected_cores: Option<u32>,
    /// GPUs counted in `gpu_utilization`; all when `None`.
    pub gpu_uuids: Option<Vec<String>>,
    /// Units of the result.
    pub units: Units,
    /// Where procfs is.
    pub proc_root: PathBuf,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            interval: Duration::from_secs(1),
            memory_detail: MemoryDetail::SmapsRollup,
            n_expected_cores: None,
            gpu_uuids: None,
            units: Units::default(),
            proc_root: PathBuf::from(crate::proc::DEFAULT_ROOT),
        }
    }
}

/// What is tracked.
#[derive(Debug, Clone)]
pub struct Target {
    /// The main process.
    pub main: u32,
    /// Processes whose descendants are tracked: the main process, or the tracker itself when it
    /// is the command's parent and subreaper (then orphans stay in the tree).
    pub tree_roots: Vec<u32>,
    /// Pids never counted (the tracker, when it is a tree root).
    pub exclude: Vec<u32>,
    /// A cgroup holding exactly the tracked processes: exact combined peak.
    pub cgroup: Option<Cgroup>,
    /// The sampler runs inside the main process (library API): its own thread's CPU time and
    /// the thread itself are not counted, and CPU time before the start is not counted.
    pub in_process: bool,
}

/// How the tracked command ended, for the final figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndInfo {
    /// `wait4` usage of the main process (its own plus its waited-for descendants').
    pub main: Option<Rusage>,
    /// The tracker's usage of all its waited-for children (`RUSAGE_CHILDREN`).
    pub children: Option<Rusage>,
}

/// One row of the tracking file: the same columns as `gpu_tracker`'s, in the chosen units.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timepoint {
    /// Column values in `gpu_tracker`'s order (see [`Timepoint::COLUMNS`]).
    pub values: [f64; 22],
}

impl Timepoint {
    /// Column names, as `gpu_tracker` writes them.
    pub const COLUMNS: [&'static str; 22] = [
        "main_ram",
        "descendants_ram",
        "combined_ram",
        "system_ram",
        "main_gpu_ram",
        "descendants_gpu_ram",
        "combined_gpu_ram",
        "system_gpu_ram",
        "gpu_sum_utilization_percent",
        "gpu_hardware_utilization_percent",
        "main_n_threads",
        "descendants_n_threads",
        "combined_n_threads",
        "cpu_system_sum_utilization_percent",
        "cpu_system_hardware_utilization_percent",
        "cpu_main_sum_utilization_percent",
        "cpu_main_hardware_utilization_percent",
        "cpu_descendants_sum_utilization_percent",
        "cpu_descendants_hardware_utilization_percent",
        "cpu_combined_sum_utilization_percent",
        "cpu_combined_hardware_utilization_percent",
        "timestamp",
    ];
}

#[derive(Debug, Clone, Copy)]
struct ProcRecord {
    starttime: u64,
    /// Own + reaped CPU seconds not to count (before tracking began).
    base_cpu: f64,
    base_own: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct RssPeak {
    total: u64,
    private: u64,
    shared: u64,
}

impl RssPeak {
    fn update(&mut self, private: u64, shared: u64, floor: u64) {
        self.private = self.private.max(private);
        self.shared = self.shared.max(shared);
        self.total = self.total.max((private + shared).max(floor));
    }
    fn values(&self, units: &Units) -> RssValues {
        RssValues {
            total_rss: units.ram.from_bytes(self.total),
            private_rss: units.ram.from_bytes(self.private),
            shared_rss: units.ram.from_bytes(self.shared),
        }
    }
}

/// The sampler. Call [`Sampler::sample`] at each tick and [`Sampler::finish`] once at the end.
pub struct Sampler {
    opts: SamplerOptions,
    target: Target,
    procfs: ProcFs,
    tps: f64,
    ncores: u32,
    started: Instant,
    last: Option<Instant>,
    samples: u64,
    procs: HashMap<u32, ProcRecord>,
    base_children_cpu: f64,
    // CPU
    prev_cum: Option<f64>,
    prev_main_own: Option<f64>,
    main_last_reaped: f64,
    combined_cpu: f64,
    main_cpu: f64,
    prev_sys: Option<CpuTotals>,
    cpu_sys: PercentAcc,
    cpu_main: PercentAcc,
    cpu_desc: PercentAcc,
    cpu_comb: PercentAcc,
    threads: [u64; 3],
    // memory
    mem: [RssPeak; 3],
    largest_hwm: u64,
    saw_descendants: bool,
    sys_used: u64,
    sys_total: u64,
    gpu: GpuAccumulator,
    notes: Vec<String>,
    notes_seen: HashSet<String>,
}

impl Sampler {
    /// A sampler of `target`. Takes no reading yet.
    pub fn new(opts: SamplerOptions, target: Target) -> Sampler {
        let procfs = ProcFs::new(&opts.proc_root);
        let base_children_cpu = if target.in_process {
            0.0
        } else {
            sys::rusage(sys::Who::Children).cpu_seconds
        };
        let gpu = GpuAccumulator::new(opts.gpu_uuids.clone());
        Sampler {
            procfs,
            tps: ticks_per_second() as f64,
            ncores: crate::proc::online_cpus(),
            started: Instant::now(),
            last: None,
            samples: 0,
            procs: HashMap::new(),
            base_children_cpu,
            prev_cum: None,
            prev_main_own: None,
            main_last_reaped: 0.0,
            combined_cpu: 0.0,
            main_cpu: 0.0,
            prev_sys: None,
            cpu_sys: PercentAcc::default(),
            cpu_main: PercentAcc::default(),
            cpu_desc: PercentAcc::default(),
            cpu_comb: PercentAcc::default(),
            threads: [0; 3],
            mem: [RssPeak::default(); 3],
            largest_hwm: 0,
            saw_descendants: false,
            sys_used: 0,
            sys_total: 0,
            gpu,
            notes: Vec::new(),
            notes_seen: HashSet::new(),
            opts,
            target,
        }
    }

    /// Adds a note to the result, once.
    pub fn note(&mut self, msg: impl Into<String>) {
        let m = msg.into();
        if self.notes_seen.insert(m.clone()) {
            self.notes.push(m);
        }
    }

    /// The options this sampler runs with.
    pub fn options(&self) -> &SamplerOptions {
        &self.opts
    }

    fn expected_cores(&self) -> f64 {
        f64::from(self.opts.n_expected_cores.unwrap_or(self.ncores))
    }

    /// The tracking file's static data as known now.
    pub fn static_data(&self, units: Units) -> StaticData {
        let (cap, count, selected) = self.gpu.static_info();
        StaticData {
            units,
            ram_system_capacity: units.ram.from_bytes(self.sys_total),
            gpu_ram_system_capacity: units.gpu_ram.from_bytes(cap),
            system_core_count: self.ncores,
            n_expected_cores: self.expected_cores() as u32,
            system_gpu_count: count,
            n_expected_gpus: selected,
        }
    }

    /// Takes one sample and returns it as a tracking-file row.
    pub fn sample(&mut self, gpu: Option<&mut Box<dyn GpuSource>>) -> Timepoint {
        let now = Instant::now();
        let dt = self.last.map(|l| now.duration_since(l).as_secs_f64());
        let first = self.samples == 0;
        self.samples += 1;
        self.last = Some(now);
        let mut tp = Timepoint::default();
        let u = self.opts.units;
        let sampler_cpu = if self.target.in_process {
            sys::thread_cpu_seconds()
        } else {
            0.0
        };

        let members = tree::members(&self.procfs, &self.target);
        let mut seen = HashSet::with_capacity(members.len());
        let (mut priv_sum, mut shared_max) = ([0u64; 3], [0u64; 3]);
        let mut cum = 0.0;
        let mut main_own = None;
        let mut threads_now = [0u64; 2];
        for pid in members {
            let Ok(st) = self.procfs.pid_stat(pid) else {
                continue;
            };
            let Ok(status) = self.procfs.pid_status(pid) else {
                continue;
            };
            let is_main = pid == self.target.main;
            if !is_main {
                self.saw_descendants = true;
            }
            let own = st.own_ticks() as f64 / self.tps;
            let reaped = st.reaped_ticks() as f64 / self.tps;
            let rec = match self.procs.get(&pid) {
                Some(r) if r.starttime == st.starttime => *r,
                _ => {
                    let existed_before = first && self.target.in_process;
                    let r = ProcRecord {
                        starttime: st.starttime,
                        base_cpu: if existed_before { own + reaped } else { 0.0 },
                        base_own: if existed_before { own } else { 0.0 },
                    };
                    self.procs.insert(pid, r);
                    r
                }
            };
            seen.insert(pid);
            let mut threads = status.threads;
            let mut own_counted = own - rec.base_own;
            cum += own + reaped - rec.base_cpu;
            if is_main && self.target.in_process {
                // The sampler thread is not the code being measured.
                threads = threads.saturating_sub(1);
                own_counted -= sampler_cpu;
                cum -= sampler_cpu;
            }
            if is_main {
                main_own = Some(own_counted);
                self.main_last_reaped = reaped - (rec.base_cpu - rec.base_own);
            }
            let split = match self.opts.memory_detail {
                MemoryDetail::SmapsRollup => match self.procfs.pid_smaps_rollup(pid) {
                    Ok(s) => Some(s),
                    Err(e) if e.is_gone() => None,
                    Err(e) => {
                        self.note(format!(
                            "private/shared split estimated from /proc/<pid>/status ({e})"
                        ));
                        MemSplit::from_status(&status)
                    }
                },
                MemoryDetail::Status => MemSplit::from_status(&status),
            };
            let hwm = status.hwm.unwrap_or(0);
            self.largest_hwm = self.largest_hwm.max(hwm);
            let group = if is_main { 0 } else { 1 };
            if let Some(s) = split {
                for g in [group, 2] {
                    priv_sum[g] += s.private;
                    shared_max[g] = shared_max[g].max(s.shared);
                }
                tp.values[group] += u.ram.from_bytes(s.total());
            }
            threads_now[group] += threads;
            if is_main {
                self.mem[0].update(
                    split.map_or(0, |s| s.private),
                    split.map_or(0, |s| s.shared),
                    hwm,
                );
            }
        }
        self.procs.retain(|pid, _| seen.contains(pid));
        // Descendants and combined: private pages summed, shared pages counted once.
        self.mem[1].update(priv_sum[1], shared_max[1], 0);
        self.mem[2].update(priv_sum[2], shared_max[2], self.largest_hwm);
        tp.values[2] = u.ram.from_bytes(priv_sum[2] + shared_max[2]);
        tp.values[10] = threads_now[0] as f64;
        tp.values[11] = threads_now[1] as f64;
        tp.values[12] = (threads_now[0] + threads_now[1]) as f64;
        for g in 0..3 {
            let now = if g == 2 {
                threads_now[0] + threads_now[1]
            } else {
                threads_now[g]
            };
            self.threads[g] = self.threads[g].max(now);
        }

        if !self.target.in_process {
            cum += sys::rusage(sys::Who::Children).cpu_seconds - self.base_children_cpu;
        }
        self.cpu_interval(dt, cum, main_own, &mut tp);

        if let Ok(m) = self.procfs.meminfo() {
            self.sys_used = self.sys_used.max(m.used);
            self.sys_total = m.total;
            tp.values[3] = u.ram.from_bytes(m.used);
        }
        let member_set: HashSet<u32> = seen;
        let gpu_interval = self.opts.interval.as_secs_f64();
        let mut notes = Vec::new();
        if let Some(src) = gpu {
            self.gpu.sample(
                src.as_mut(),
                self.target.main,
                &member_set,
                gpu_interval,
                &u,
                &mut tp,
                &mut notes,
            );
        }
        for n in notes {
            self.note(n);
        }
        tp.values[21] = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
        tp
    }

    fn cpu_interval(
        &mut self,
        dt: Option<f64>,
        cum: f64,
        main_own: Option<f64>,
        tp: &mut Timepoint,
    ) {
        let hw = self.expected_cores();
        if let Ok(sys) = self.procfs.cpu_totals() {
            if let Some(prev) = self.prev_sys {
                let total = sys.total.saturating_sub(prev.total);
                if total > 0 {
                    let busy = sys.busy.saturating_sub(prev.busy) as f64 / total as f64;
                    let sum = busy * f64::from(self.ncores) * 100.0;
                    if let Some(dt) = dt {
                        self.cpu_sys.add(sum, dt);
                    }
                    tp.values[13] = sum;
                    tp.values[14] = sum / f64::from(self.ncores);
                }
            }
            self.prev_sys = Some(sys);
        }
        let comb_delta = self.prev_cum.map(|p| (cum - p).max(0.0));
        let main_delta = match (self.prev_main_own, main_own) {
            (Some(p), Some(n)) => Some((n - p).max(0.0)),
            _ => None,
        };
        if let Some(d) = comb_delta {
            self.combined_cpu += d;
        }
        if let Some(d) = main_delta {
            self.main_cpu += d;
        }
        if let (Some(dt), Some(c)) = (dt.filter(|d| *d > 0.0), comb_delta) {
            let m = main_delta.unwrap_or(0.0).min(c);
            self.add_cpu_percents(m, c, dt, tp, hw);
        }
        self.prev_cum = Some(cum);
        if main_own.is_some() {
            self.prev_main_own = main_own;
        }
    }

    fn add_cpu_percents(&mut self, main: f64, comb: f64, dt: f64, tp: &mut Timepoint, hw: f64) {
        let pct = |cpu: f64| cpu / dt * 100.0;
        let (m, c) = (pct(main), pct(comb));
        let d = (c - m).max(0.0);
        self.cpu_main.add(m, dt);
        self.cpu_desc.add(d, dt);
        self.cpu_comb.add(c, dt);
        for (i, v) in [(15, m), (17, d), (19, c)] {
            tp.values[i] = v;
            tp.values[i + 1] = if hw > 0.0 { v / hw } else { 0.0 };
        }
    }

    /// Final figures. `end` carries what `wait4` told about the main process and the tracker's
    /// reaped children; the final partial interval is accounted from it.
    pub fn finish(mut self, end: EndInfo) -> ResourceUsage {
        let wall = self.started.elapsed().as_secs_f64();
        let u = self.opts.units;
        let hw = self.expected_cores();
        let mut total_cpu = self.combined_cpu;
        if let (Some(prev), Ok(now), Some(last)) =
            (self.prev_sys, self.procfs.cpu_totals(), self.last)
        {
            // The machine's share of the last, partial interval.
            let total = now.total.saturating_sub(prev.total);
            let since = last.elapsed().as_secs_f64();
            if total > 0 && since > 0.0 {
                let busy = now.busy.saturating_sub(prev.busy) as f64 / total as f64;
                self.cpu_sys
                    .add(busy * f64::from(self.ncores) * 100.0, since);
            }
        }
        if let Some(ch) = end.children {
            let exact = ch.cpu_seconds - self.base_children_cpu;
            let since = self.last.map(|l| l.elapsed().as_secs_f64()).unwrap_or(wall);
            let comb_delta = self.prev_cum.map_or(exact, |p| (exact - p).max(0.0));
            // Main's own time is at most its wait4 total less what its children had given it.
            let main_delta = match (end.main, self.prev_main_own) {
                (Some(m), Some(p)) => (m.cpu_seconds - self.main_last_reaped - p).max(0.0),
                (Some(m), None) if !self.saw_descendants => m.cpu_seconds,
                _ => 0.0,
            }
            .min(comb_delta);
            self.main_cpu += main_delta;
            if since > 0.0 {
                let mut tp = Timepoint::default();
                self.add_cpu_percents(main_delta, comb_delta, since, &mut tp, hw);
            }
            total_cpu = (self.combined_cpu + comb_delta).max(exact);
            self.largest_hwm = self.largest_hwm.max(ch.maxrss_bytes);
        }
        if let Some(m) = end.main {
            self.largest_hwm = self.largest_hwm.max(m.maxrss_bytes);
            if !self.saw_descendants {
                // No other process was ever in the tree: the maximum is the main process's own.
                self.mem[0].total = self.mem[0].total.max(m.maxrss_bytes);
            }
        }
        let mut comb = self.mem[2];
        comb.total = comb.total.max(self.largest_hwm).max(self.mem[0].total);
        let cg = self.target.cgroup.clone();
        let (source, cache) = match cg.as_ref().map(|c| (c, c.read())) {
            Some((cg, Ok(r))) if r.peak.is_some() => {
                comb.total = comb.total.max(r.peak.unwrap_or(0));
                if let Some(k) = r.oom_kills.filter(|k| *k > 0) {
                    self.note(format!("{k} process(es) killed by the OOM killer"));
                }
                (cg.peak_source().to_string(), cg.peak_includes_page_cache())
            }
            _ => {
                self.note(
                    "combined peak RSS is sampled (no cgroup of its own): a spike shorter than \
                     the sleep time may be missed; per-process peaks are exact",
                );
                ("sampled".to_string(), false)
            }
        };
        let mean = |cpu: f64| if wall > 0.0 { cpu / wall * 100.0 } else { 0.0 };
        let main_mean = mean(self.main_cpu);
        let comb_mean = mean(total_cpu);
        let (gpus, max_gpu_ram, gpu_util, gpu_notes) = self.gpu.finish(&u);
        for n in gpu_notes {
            self.note(n);
        }
        let sampler_cpu = if self.target.in_process {
            sys::thread_cpu_seconds()
        } else {
            sys::rusage(sys::Who::SelfProcess).cpu_seconds
        };
        ResourceUsage {
            max_ram: MaxRam {
                unit: u.ram,
                system_capacity: u.ram.from_bytes(self.sys_total),
                system: u.ram.from_bytes(self.sys_used),
                main: self.mem[0].values(&u),
                descendants: self.mem[1].values(&u),
                combined: comb.values(&u),
                largest_process_rss: u.ram.from_bytes(self.largest_hwm),
                combined_peak_source: source,
                combined_peak_includes_page_cache: cache,
            },
            max_gpu_ram: MaxGpuRam {
                unit: u.gpu_ram,
                ..max_gpu_ram
            },
            cpu_utilization: CpuUtilization {
                system_core_count: self.ncores,
                n_expected_cores: hw as u32,
                system: self.cpu_sys.finish(f64::from(self.ncores)),
                main: self.cpu_main.finish_with_mean(hw, main_mean),
                descendants: self
                    .cpu_desc
                    .finish_with_mean(hw, (comb_mean - main_mean).max(0.0)),
                combined: self.cpu_comb.finish_with_mean(hw, comb_mean),
                main_n_threads: self.threads[0],
                descendants_n_threads: self.threads[1],
                combined_n_threads: self.threads[2],
            },
            gpu_utilization: gpu_util,
            compute_time: ComputeTime {
                unit: u.time,
                time: u.time.from_seconds(wall),
                cpu_time: u.time.from_seconds(total_cpu),
            },
            gpus,
            tracking: TrackingInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                sleep_time: self.opts.interval.as_secs_f64(),
                samples: self.samples,
                memory_detail: self.opts.memory_detail.as_str().to_string(),
                gpu_source: self.gpu.source_name().to_string(),
                sampler_cpu_seconds: sampler_cpu,
                notes: self.notes,
            },
        }
    }
}
