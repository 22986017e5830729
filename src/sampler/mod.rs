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

pub(crate) mod core;
mod cpu;
pub(crate) mod gpus;
mod options;
pub mod pace;
pub(crate) mod procsum;
pub(crate) mod stats;
pub(crate) mod tree;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::gpu::GpuSource;
use crate::proc::files::FdLimit;
use crate::proc::watch::Watch;
use crate::proc::{ProcFs, ticks_per_second};
use crate::sys;
use crate::tracking_file::StaticData;
pub use crate::tracking_file::Timepoint;
use crate::units::Units;
use crate::usage::{ComputeTime, CpuUtilization, MaxGpuRam, MaxRam, ResourceUsage, TrackingInfo};
pub use options::{EndInfo, MemoryDetail, SamplerOptions, Target};

use self::core::{HistoryFeed, MemSum, RssPeak};
use cpu::CpuAccumulator;
use gpus::GpuAccumulator;
use procsum::ProcReading;

/// The machine's CPU and memory (`/proc/stat`, `/proc/meminfo`: 50 to 100 µs together, more
/// on machines with many CPUs and interrupts) are read at most this often; so are the cgroups
/// nested in the command's (a directory walk): a process moved into a new one is missed until
/// then.
pub const MACHINE_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
struct ProcRecord {
    starttime: u64,
    /// Own + reaped CPU seconds not to count (before tracking began).
    base_cpu: f64,
    base_own: f64,
}

/// The sampler. Call [`Sampler::sample`] at each tick and [`Sampler::finish`] once at the end.
pub struct Sampler {
    opts: SamplerOptions,
    target: Target,
    procfs: ProcFs,
    watch: Watch,
    tps: f64,
    ncores: u32,
    started: Instant,
    last: Option<Instant>,
    samples: u64,
    procs: HashMap<u32, ProcRecord>,
    base_children_cpu: f64,
    cpu: CpuAccumulator,
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
    /// Memory (resident, shared pages once) and CPU seconds of the tree at the latest sample.
    latest: (u64, f64),
    /// What the history recorder was told so far.
    history: HistoryFeed,
    /// When the machine's figures were last read, and the row values they gave (CPU sum and
    /// hardware percent, RAM used).
    machine_at: Option<Instant>,
    machine_row: ([f64; 2], f64),
    /// The command's cgroup and those nested in it, as last looked for (once a second).
    cgroup_dirs: Option<(Instant, Vec<std::path::PathBuf>)>,
    /// The sampler thread's own CPU seconds, when tracking from inside the process, and when
    /// they were asked (once per [`MACHINE_REFRESH`]).
    sampler_cpu: Option<(Instant, f64)>,
}

impl Sampler {
    /// A sampler of `target`. Takes no reading yet.
    pub fn new(opts: SamplerOptions, target: Target) -> Sampler {
        let procfs = ProcFs::new(&opts.proc_root);
        let watch = Watch::new(
            &opts.proc_root,
            opts.memory_detail == MemoryDetail::SmapsRollup,
            if target.in_process {
                // Inside the program measured: a quarter of its limit, untouched.
                FdLimit::from_rlimit()
            } else {
                FdLimit::for_sampler_program()
            },
        );
        let base_children_cpu = if target.in_process {
            0.0
        } else {
            sys::rusage(sys::Who::Children).cpu_seconds
        };
        let gpu = GpuAccumulator::new(opts.gpu_uuids.clone());
        let ncores = crate::proc::online_cpus();
        Sampler {
            procfs,
            watch,
            tps: ticks_per_second() as f64,
            ncores,
            started: Instant::now(),
            last: None,
            samples: 0,
            procs: HashMap::new(),
            base_children_cpu,
            cpu: CpuAccumulator::new(
                ncores,
                f64::from(opts.n_expected_cores.unwrap_or(ncores)),
                opts.interval,
            ),
            threads: [0; 3],
            mem: [RssPeak::default(); 3],
            largest_hwm: 0,
            saw_descendants: false,
            sys_used: 0,
            sys_total: 0,
            gpu,
            notes: Vec::new(),
            notes_seen: HashSet::new(),
            latest: (0, 0.0),
            history: HistoryFeed::default(),
            machine_at: None,
            cgroup_dirs: None,
            machine_row: ([0.0; 2], 0.0),
            sampler_cpu: None,
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

    /// What the sampler has read of its processes since the start ([`crate::proc::watch`]).
    pub fn read_counts(&self) -> crate::proc::watch::WatchCounts {
        self.watch.counts()
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

    /// The latest sample as the timeline takes it (`unix`: when it was taken).
    pub fn observation(&self, unix: f64) -> crate::history::Observation {
        crate::history::Observation {
            unix,
            memory_bytes: self.latest.0,
            alert_memory_bytes: None,
            cpu_seconds: Some(self.latest.1),
            gpus: self.gpu.last_readings().to_vec(),
            oom_kills: None,
            limit_hits: None,
            // Not read for a command outside Slurm: its cgroup is rarely its own.
            pressure: None,
        }
    }

    /// Hands the latest sample (taken at `unix`) to the history recorder `rec`.
    pub fn record(&mut self, rec: &mut crate::history::Recorder, unix: f64) {
        let o = self.observation(unix);
        self.history.observe(rec, &self.gpu, None, o);
    }

    /// UUIDs and NVML indices of the GPUs read, once known; GPUs lost at the latest sample.
    pub fn gpu_devices(&self) -> (Vec<String>, Vec<u32>, Vec<usize>) {
        let (u, i) = self.gpu.devices_seen();
        (u, i, self.gpu.lost_at_last_sample().to_vec())
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
        // Left out of the process's CPU time: asked of the kernel once a second (a system
        // call at every sample cost more than the rest of a sample of a sleeping process). The
        // process's time is counted in ticks of 10 ms; the sampler's since it was last asked,
        // at most a few milliseconds, is counted as the process's until the next ask.
        let sampler_cpu = match self.sampler_cpu {
            _ if !self.target.in_process => 0.0,
            Some((at, cpu)) if now.duration_since(at) < MACHINE_REFRESH => cpu,
            _ => {
                let cpu = sys::thread_cpu_seconds();
                self.sampler_cpu = Some((now, cpu));
                cpu
            }
        };

        let watch = &mut self.watch;
        let nested = &mut self.cgroup_dirs;
        let mut cgroup_procs = |c: &crate::cgroup::Cgroup| {
            if nested
                .as_ref()
                .is_none_or(|(at, _)| now.duration_since(*at) >= MACHINE_REFRESH)
            {
                *nested = Some((now, c.tree_dirs()));
            }
            c.procs_of(nested.as_ref().map_or(&[][..], |(_, d)| &d[..]))
        };
        let members = tree::members_with(
            &self.procfs,
            &self.target,
            usize::MAX,
            &mut cgroup_procs,
            &mut |p| watch.children(p, now),
        )
        .0;
        let mut seen = HashSet::with_capacity(members.len());
        // (0: the main process, 1: a descendant; its reading).
        let mut readings = Vec::with_capacity(members.len());
        let mut main_own = None;
        // Reading descendants' splits from smaps_rollup may take this share of the interval per
        // sample; past it, they are estimated and read first next time. The main process is
        // not held to it; the watch paces each process's costly reads (see `proc::watch`).
        let smaps_budget = self
            .opts
            .interval
            .mul_f64(crate::proc::watch::SPLIT_TIME_SHARE);
        let mut smaps_spent = std::time::Duration::ZERO;
        for pid in members {
            let is_main = pid == self.target.main;
            let allowed = is_main || smaps_spent < smaps_budget;
            let t_read = Instant::now();
            let Ok(r) = self.watch.read(pid, t_read, allowed) else {
                continue;
            };
            smaps_spent += t_read.elapsed();
            if !is_main {
                self.saw_descendants = true;
            }
            let mut pr = ProcReading::of(&r, self.tps);
            let rec = match self.procs.get(&pid) {
                Some(rec) if rec.starttime == r.stat.starttime => *rec,
                _ => {
                    let existed_before = first && self.target.in_process;
                    let rec = ProcRecord {
                        starttime: r.stat.starttime,
                        base_cpu: if existed_before { pr.cpu() } else { 0.0 },
                        base_own: if existed_before { pr.own_cpu } else { 0.0 },
                    };
                    self.procs.insert(pid, rec);
                    rec
                }
            };
            seen.insert(pid);
            // Only the CPU time since tracking began counts.
            pr.own_cpu -= rec.base_own;
            pr.reaped_cpu -= rec.base_cpu - rec.base_own;
            if is_main && self.target.in_process {
                // The sampler thread is not the code being measured.
                pr.threads = pr.threads.saturating_sub(1);
                pr.own_cpu -= sampler_cpu;
            }
            if is_main {
                main_own = Some(pr.own_cpu);
                self.cpu.main_last_reaped = pr.reaped_cpu;
                let own = MemSum {
                    private: pr.private,
                    shared: pr.shared,
                };
                self.mem[0].update(own, pr.hwm);
            }
            readings.push((usize::from(!is_main), pr));
        }
        self.watch.end_sample(|p| seen.contains(&p));
        if let Some(e) = self.watch.take_smaps_error() {
            self.note(format!(
                "private/shared split estimated from /proc/<pid>/statm ({e})"
            ));
        }
        self.procs.retain(|pid, _| seen.contains(pid));
        let groups = procsum::sum_groups(2, readings.iter().map(|(g, r)| (*g, Some(r))));
        let mut all = groups[0];
        all.merge(&groups[1]);
        let mut cum = all.cpu;
        self.largest_hwm = self.largest_hwm.max(all.hwm);
        // Descendants and combined: private pages summed, shared pages counted once.
        self.mem[1].update(groups[1].mem, 0);
        self.mem[2].update(all.mem, self.largest_hwm);
        tp.values[0] = u.ram.from_bytes(groups[0].resident_sum);
        tp.values[1] = u.ram.from_bytes(groups[1].resident_sum);
        tp.values[2] = u.ram.from_bytes(all.mem.total());
        tp.values[10] = groups[0].threads as f64;
        tp.values[11] = groups[1].threads as f64;
        tp.values[12] = all.threads as f64;
        for (g, s) in [groups[0], groups[1], all].iter().enumerate() {
            self.threads[g] = self.threads[g].max(s.threads);
        }

        if !self.target.in_process {
            cum += sys::rusage(sys::Who::Children).cpu_seconds - self.base_children_cpu;
        }
        // The machine's CPU and memory: at most once per MACHINE_REFRESH (rows between carry
        // the last figures), over the time since the last read.
        let machine_due = self
            .machine_at
            .is_none_or(|t| now.duration_since(t) >= MACHINE_REFRESH);
        let meminfo = if machine_due {
            let since = self.machine_at.map(|t| now.duration_since(t).as_secs_f64());
            self.machine_at = Some(now);
            let (c, m) = self.watch.machine();
            if let Some(c) = c {
                self.cpu.system(c, since, Some(&mut tp));
                self.machine_row.0 = [tp.values[13], tp.values[14]];
            }
            m
        } else {
            [tp.values[13], tp.values[14]] = self.machine_row.0;
            tp.values[3] = self.machine_row.1;
            None
        };
        self.cpu.tree(dt, cum, main_own, &mut tp);
        self.latest = (all.mem.total(), cum);

        if let Some(m) = meminfo {
            self.sys_used = self.sys_used.max(m.used);
            self.sys_total = m.total;
            tp.values[3] = u.ram.from_bytes(m.used);
            self.machine_row.1 = tp.values[3];
        }
        let gpu_weight = self::core::sample_weight(dt, self.opts.interval);
        let mut notes = Vec::new();
        if let Some(src) = gpu {
            self.gpu.sample(
                src.as_mut(),
                self.target.main,
                &seen,
                None,
                gpu_weight,
                &u,
                &mut tp,
                &mut notes,
            );
        }
        for n in notes {
            self.note(n);
        }
        // Whole microseconds, as the rows have always had.
        tp.values[21] = (crate::clock::unix_now() * 1e6).floor() / 1e6;
        tp
    }

    /// Final figures. `end` carries what `wait4` told about the main process and the tracker's
    /// reaped children; the final partial interval is accounted from it.
    pub fn finish(mut self, end: EndInfo) -> ResourceUsage {
        let wall = self.started.elapsed().as_secs_f64();
        let u = self.opts.units;
        let hw = self.expected_cores();
        let since = self.last.map(|l| l.elapsed().as_secs_f64()).unwrap_or(wall);
        let machine_since = self
            .machine_at
            .map(|l| l.elapsed().as_secs_f64())
            .unwrap_or(wall);
        let min_interval = self.opts.interval.as_secs_f64() / 2.0;
        if let Ok(now) = self.procfs.cpu_totals() {
            // The machine's share of the last, partial interval; as for the tree, a very short
            // one only counts when there is no other.
            if machine_since >= min_interval || self.samples <= 1 {
                self.cpu.system(now, Some(machine_since), None);
            }
        }
        let mut total_cpu = self.cpu.sampled_total();
        if let Some(ch) = end.children {
            let exact = ch.cpu_seconds - self.base_children_cpu;
            total_cpu = self.cpu.finish_tree(
                exact,
                end.main_own_cpu,
                end.main,
                since,
                self.saw_descendants,
            );
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
        let cpu = self.cpu.finish(wall, total_cpu);
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
                system: cpu.system,
                main: cpu.main,
                descendants: cpu.descendants,
                combined: cpu.combined,
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
