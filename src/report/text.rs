//! The summary as text: what the end of a job's output shows, and what
//! `gpu-tracker-report <jobid>` prints.

use std::fmt::Write;

use super::Problem;
use super::figures::{Summary, TaskFailure};
use crate::step::record::clean_text;
use crate::units::{MemUnit, TimeUnit};

/// How figures are shown.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextOptions {
    /// Memory unit (`--ru`); `None`: binary units scaled to the figure (MiB, GiB), as `--mem`.
    pub ram: Option<MemUnit>,
    /// Time unit (`--tu`); `None`: `[D-]HH:MM:SS`, as Slurm prints times.
    pub time: Option<TimeUnit>,
    /// One row per task under each step.
    pub tasks: bool,
}

impl TextOptions {
    fn mem(&self, bytes: u64) -> String {
        match self.ram {
            Some(u) => format!("{:.3} {}", u.from_bytes(bytes), short_mem(u)),
            None => crate::units::human_bytes(bytes),
        }
    }

    fn time(&self, seconds: f64) -> String {
        match self.time {
            Some(u) => format!("{:.3} {}", seconds / u.seconds(), u.as_str()),
            None => crate::units::slurm_time(seconds.round().clamp(0.0, 1e12) as u64),
        }
    }

    /// A time within a job (phases, events, idle stretches): tenths of a second under a
    /// minute, where whole seconds would hide a short phase.
    fn moment(&self, seconds: f64) -> String {
        match self.time {
            None if seconds < 59.95 => format!("{:.1} s", seconds.max(0.0)),
            _ => self.time(seconds),
        }
    }
}

fn short_mem(u: MemUnit) -> &'static str {
    match u {
        MemUnit::Bytes => "B",
        MemUnit::Kilobytes => "kB",
        MemUnit::Megabytes => "MB",
        MemUnit::Gigabytes => "GB",
        MemUnit::Terabytes => "TB",
    }
}

fn pct(p: Option<f64>) -> String {
    crate::units::percent_or(p, "n/a")
}

fn failure(f: &TaskFailure) -> String {
    let who = f
        .global_id
        .map_or_else(|| "a task".into(), |g| format!("task {g}"));
    match (f.exit_code, f.signal) {
        (_, Some(sig)) => format!("{who} killed by {}", crate::sys::signal_name(sig)),
        (Some(c), None) => format!("{who} exit code {c}"),
        (None, None) => format!("{who} failed"),
    }
}

/// The line that opens and closes the summary in a job's output.
pub const RULE: &str =
    "==============================================================================";

/// One row per node, and the totals: CPU efficiency, CPU time, peak memory against the request.
fn per_node_table(w: &mut String, s: &Summary, o: &TextOptions) {
    let mem = |peak: u64, req: Option<u64>| match req.filter(|r| *r > 0) {
        Some(r) => format!(
            "{} of {} ({:.0}%)",
            o.mem(peak),
            o.mem(r),
            100.0 * peak as f64 / r as f64
        ),
        None => format!("{} (no limit)", o.mem(peak)),
    };
    // Each GPU of the node: Slurm's index, the job's peak memory on it, mean utilization.
    let gpus = |node: Option<&str>| -> String {
        s.gpus
            .iter()
            .filter(|g| node.is_none_or(|n| g.node == n))
            .map(|g| {
                format!(
                    "{}:{} {}",
                    g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
                    o.mem(g.job_peak_bytes).replace(' ', ""),
                    pct(g.mean_utilization_percent)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let with_gpus = !s.gpus.is_empty();
    let _ = writeln!(w, "Per node:");
    let head = format!(
        "  {:<14} {:>7} {:>10}  {:<30} {:>5}  {}",
        "NODE",
        "CPU EFF",
        "CPU TIME",
        "PEAK MEMORY OF REQUESTED",
        "STEPS",
        if with_gpus {
            "GPU:PEAK MEM MEAN UTIL"
        } else {
            ""
        }
    );
    let _ = writeln!(w, "{}", head.trim_end());
    for n in &s.per_node {
        let line = format!(
            "  {:<14} {:>7} {:>10}  {:<30} {:>5}  {}",
            n.node,
            pct(n.cpu_efficiency_percent),
            o.time(n.cpu_seconds),
            mem(n.peak_bytes, n.requested_bytes),
            n.steps,
            gpus(Some(&n.node))
        );
        let _ = writeln!(w, "{}", line.trim_end());
    }
    let gpu_total = if with_gpus {
        format!(
            "{} GPU(s), {} in all, mean {}",
            s.totals.gpus,
            o.mem(s.totals.gpu_memory_peak_bytes),
            pct(s.totals.gpu_mean_utilization_percent)
        )
    } else {
        String::new()
    };
    let total = format!(
        "  {:<14} {:>7} {:>10}  {:<30} {:>5}  {gpu_total}",
        "total",
        pct(s.cpu.efficiency_percent),
        o.time(s.cpu.seconds),
        mem(s.totals.memory_peak_bytes, s.totals.memory_requested_bytes),
        "",
    );
    let _ = writeln!(w, "{}", total.trim_end());
    let cache = s.per_node.iter().any(|n| n.includes_page_cache);
    let _ = writeln!(
        w,
        "  (memory: each node's peak{}; the total adds the nodes' peaks, which may fall at \
         different times)",
        if cache { ", page cache included" } else { "" }
    );
    if let Some(own) = super::memory::nodes_note(&s.per_node, &|b| o.mem(b)) {
        let _ = writeln!(w, "  {own}");
    }
}

/// Phases, idle GPUs and the events that matter.
fn story(w: &mut String, s: &Summary, o: &TextOptions) {
    if !s.phases.is_empty() {
        let _ = writeln!(w, "Phases:");
        let any_sm = s
            .phases
            .iter()
            .flat_map(|p| &p.gpus)
            .any(|g| g.sm_active_mean_percent.is_some());
        let _ = writeln!(
            w,
            "  {:<20} {:>9} {:>9} {:>11} {:>6}  GPU UTIL, {}PEAK GPU MEM",
            "PHASE",
            "START",
            "TIME",
            "PEAK MEM",
            "CORES",
            if any_sm { "SM ACTIVE, " } else { "" }
        );
        for p in &s.phases {
            let gpus: Vec<String> = p
                .gpus
                .iter()
                .map(|g| {
                    let on = if s.nodes.len() > 1 {
                        format!(" on {}", g.node)
                    } else {
                        String::new()
                    };
                    // SM activity where any GPU measured it (n/a for one that did not).
                    let sm = if any_sm {
                        format!(", SM {}", g.sm_active_text())
                    } else {
                        String::new()
                    };
                    format!(
                        "{}{on}: {}{sm}, {}",
                        g.index,
                        g.utilization_mean_percent
                            .map_or_else(|| "?".into(), |u| format!("{u:.0}%")),
                        g.memory_peak_bytes.map_or_else(|| "?".into(), |b| o.mem(b))
                    )
                })
                .collect();
            let _ = writeln!(
                w,
                "  {:<20} {:>9} {:>9} {:>11} {:>6}  {}",
                clean_text(&p.name, 20),
                o.moment(p.start),
                o.moment(p.end - p.start),
                if p.buckets > 0 {
                    o.mem(p.memory_peak_bytes)
                } else {
                    "-".into()
                },
                p.cpu_mean_cores
                    .map_or_else(|| "-".into(), |c| format!("{c:.2}")),
                if gpus.is_empty() {
                    "-".into()
                } else {
                    gpus.join("; ")
                }
            );
            if let Some(waits) = super::pressure::phase_waits(p) {
                let _ = writeln!(w, "  {:<20} {waits}", "");
            }
        }
    }
    let idle: Vec<_> = s
        .gpu_idle
        .iter()
        .filter(|g| g.idle.idle_seconds >= 1.0)
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(
            w,
            "GPU idle:      (utilization below {}%)",
            idle[0].idle.threshold_percent
        );
        for g in idle {
            let i = &g.idle;
            let mut parts = Vec::new();
            if !i.ever_busy {
                parts.push("never busy".to_string());
            } else {
                for (secs, what) in [
                    (i.at_start_seconds, "at the start"),
                    (i.in_gaps_seconds, "in gaps"),
                    (i.at_end_seconds, "at the end"),
                ] {
                    if secs >= 0.5 {
                        parts.push(format!("{} {what}", o.moment(secs)));
                    }
                }
            }
            let _ = writeln!(
                w,
                "  GPU {} on {}: idle {} of {} ({:.0}%): {}",
                g.index,
                g.node,
                o.moment(i.idle_seconds),
                o.moment(i.observed_seconds),
                g.share_percent,
                parts.join(", ")
            );
        }
    }
    if !s.events.is_empty() {
        let _ = writeln!(w, "Events:");
        for e in &s.events {
            let _ = writeln!(
                w,
                "  {:>9}  {} {:<6} {}",
                o.moment(e.t),
                e.node,
                e.step,
                clean_text(&e.event.detail, 120)
            );
        }
        if s.events_more > 0 {
            let _ = writeln!(
                w,
                "  ... and {} more (gpu-tracker-report {} --events csv)",
                s.events_more, s.job_id
            );
        }
    }
}

/// Renders the summary; `problems` are listed after it.
pub fn render(s: &Summary, problems: &[Problem], o: &TextOptions) -> String {
    let mut out = String::new();
    let w = &mut out;
    let array = match (s.array_job_id, s.array_task_id) {
        (Some(a), Some(t)) => format!(" (array {a}_{t})"),
        _ => String::new(),
    };
    let _ = writeln!(w, "{RULE}");
    let step = s
        .only_step
        .as_deref()
        .map_or_else(String::new, |st| format!(", step {st}"));
    let _ = writeln!(w, "gpu-tracker summary of job {}{array}{step}", s.job_id);
    let _ = writeln!(w, "{RULE}");
    if let Some(n) = &s.name {
        let _ = writeln!(w, "Job name:      {n}");
    }
    let _ = writeln!(w, "User:          {} (uid {})", s.user, s.uid);
    let mut nodes = s.nodes.join(",");
    if let Some(n) = s.job_nodes.filter(|n| *n as usize > s.nodes.len()) {
        let _ = write!(nodes, " ({} of {n} nodes)", s.nodes.len());
    }
    let _ = writeln!(w, "Nodes:         {nodes}");
    if !s.missing_nodes.is_empty() {
        let n = s.missing_nodes.len();
        let mut list = s.missing_nodes[..n.min(10)].join(",");
        if n > 10 {
            let _ = write!(list, " and {} more", n - 10);
        }
        let first = &s.missing_nodes[0];
        let pad = " ".repeat(15);
        let _ = writeln!(
            w,
            "Not seen:      {list}: no record of {} in this spool.",
            if n == 1 { "it" } else { "them" }
        );
        let _ = writeln!(
            w,
            "{pad}No tracked step ran there, or the node keeps its records in a spool of its own:"
        );
        let _ = writeln!(
            w,
            "{pad}read them there (\"gpu-tracker-report {id}\" on {first}), or from Slurm's database",
            id = s.job_id
        );
        let _ = writeln!(
            w,
            "{pad}once the job has ended, where the site stores summaries there (on any node)."
        );
    }
    let state = if s.complete {
        format!("{} step record(s), all final", s.steps.len())
    } else {
        let open: Vec<String> = s
            .steps
            .iter()
            .filter(|st| !st.complete)
            .map(|st| format!("{} on {}", st.id, st.node))
            .collect();
        format!(
            "INCOMPLETE: still running or killed before its final record: {}",
            open.join(", ")
        )
    };
    match &s.source {
        Some(src) => {
            // One clause a line: it names the source, then what it lacks.
            for (i, part) in src.split("; ").enumerate() {
                let label = if i == 0 { "Source:" } else { "" };
                let _ = writeln!(w, "{label:<15}{part}");
            }
        }
        None if s.records_left_out > 0 => {
            let read = s.steps.len();
            let all = read as u64 + s.records_left_out;
            let line = if s.complete {
                format!(
                    "{read} of {all} step records read, all final; the rest left out \
                     (max_summary_records)"
                )
            } else {
                format!(
                    "{read} of {all} step records read, the rest left out \
                     (max_summary_records); {state}"
                )
            };
            let _ = writeln!(w, "Records:       {line}");
        }
        None => {
            let _ = writeln!(w, "Records:       {state}");
        }
    }
    if let Some(n) = s.steps_not_recorded_from {
        let _ = writeln!(
            w,
            "{:<15}steps numbered {n} and above were not recorded (max_step_records)",
            ""
        );
    }
    let _ = writeln!(w, "Elapsed:       {}", o.time(s.elapsed_seconds));
    for (label, line) in super::runs::lines(s) {
        let _ = writeln!(w, "{label:<15}{line}");
    }
    let _ = writeln!(
        w,
        "CPU:           {} efficiency: {} CPU time over {} allocated core(s); at most {:.1} cores busy",
        pct(s.cpu.efficiency_percent),
        o.time(s.cpu.seconds),
        s.cpu.alloc_cpus,
        s.cpu.max_cores
    );
    if s.per_node.len() == 1 {
        let line = super::memory::line(&s.per_node[0], &|b| o.mem(b));
        let _ = writeln!(w, "Memory:        {line}");
    } else if !s.per_node.is_empty() {
        per_node_table(w, s, o);
    }
    super::gpu_text::gpu_section(w, s, &|b| o.mem(b));
    if let Some(line) = s.pressure.as_ref().and_then(|p| p.explanation.as_ref()) {
        let _ = writeln!(w, "Pressure:      {line}");
    }
    if !s.steps.is_empty() && (s.steps.len() > 1 || s.nodes.len() > 1 || o.tasks) {
        let _ = writeln!(w, "Steps:");
        let _ = writeln!(
            w,
            "  {:<11} {:<12} {:>10} {:>6} {:>11} {:>5}  RESULT",
            "STEP", "NODE", "ELAPSED", "CPU", "PEAK MEM", "TASKS"
        );
        for st in &s.steps {
            let result = if !st.complete {
                "incomplete".to_string()
            } else if st.failed.is_empty() {
                "ok".to_string()
            } else {
                st.failed.iter().map(failure).collect::<Vec<_>>().join("; ")
            };
            // A requeued job has a row per step and run.
            let id = match st.run {
                Some(k) if s.runs.len() > 1 => format!("{} r{k}", st.id),
                _ => st.id.clone(),
            };
            let _ = writeln!(
                w,
                "  {:<11} {:<12} {:>10} {:>5.0}% {:>11} {:>5}  {result}",
                id,
                st.node,
                o.time(st.elapsed_seconds),
                st.cpu_efficiency_percent,
                o.mem(st.peak_memory_bytes),
                st.tasks
            );
            if let Some(c) = st.command.as_ref().filter(|_| st.id != "batch") {
                let c: String = c.chars().take(70).collect();
                let _ = writeln!(w, "  {:<11} command: {c}", "");
            }
            if o.tasks {
                if let Some(n) = &st.peak_note {
                    let _ = writeln!(w, "  {:<11} note: {n}", "");
                }
                for t in &st.task_records {
                    let end = match (t.exit_code, t.signal) {
                        (_, Some(sig)) => crate::sys::signal_name(sig),
                        (Some(c), None) => format!("exit {c}"),
                        (None, None) if !t.ended => "running".into(),
                        (None, None) => "?".into(),
                    };
                    let _ = writeln!(
                        w,
                        "    task {:<5} pid {:<8} cpu {:>10} peak mem {:>11}  threads {:<4} {end}",
                        t.global_id.map_or_else(|| "?".into(), |g| g.to_string()),
                        t.pid,
                        o.time(t.cpu_seconds),
                        o.mem(t.peak_memory_bytes),
                        t.max_threads.map_or_else(|| "?".into(), |n| n.to_string())
                    );
                }
            }
        }
    } else if let Some(st) = s.steps.first() {
        if !st.failed.is_empty() {
            let f: Vec<String> = st.failed.iter().map(failure).collect();
            let at_limit = if s.ran_out_of_time() {
                " (at the time limit)"
            } else {
                ""
            };
            let _ = writeln!(w, "Failed tasks:  {}{at_limit}", f.join("; "));
        }
    }
    if !s.imbalance.is_empty() {
        let _ = writeln!(w, "Imbalance:");
        for i in &s.imbalance {
            let _ = writeln!(w, "  * {}", i.message);
        }
    }
    story(w, s, o);
    for e in &s.oom {
        let limit = e
            .limit_bytes
            .map_or_else(String::new, |l| format!(" (limit {})", o.mem(l)));
        let _ = writeln!(
            w,
            "OOM kills:     step {} on {}: {} process(es) killed by the kernel for memory; peak {}{limit}",
            e.step,
            e.node,
            e.kills,
            o.mem(e.peak_bytes)
        );
    }
    for f in &s.faults {
        let _ = writeln!(w, "Tracking:      {f}");
    }
    let _ = writeln!(w, "Classes:       {}", s.class_tags());
    if s.advice.is_empty() {
        let _ = writeln!(w, "Advice:        none; the job used what it asked for.");
    } else {
        let _ = writeln!(w, "Advice:");
        for a in &s.advice {
            let _ = writeln!(w, "  * {}", a.message);
        }
    }
    for p in problems {
        let _ = writeln!(w, "Note:          {}", p.message());
    }
    let _ = writeln!(w, "{RULE}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::tests_support::record;

    #[test]
    fn faults_while_recording_are_listed_cleaned_and_bounded() {
        let mut a = record("n1", "batch");
        a.sampler.faults = vec!["GPUs not tracked: NVML \u{1b}[31mfailed".into()];
        let mut b = record("n1", "0");
        b.sampler.faults = (0..20).map(|i| format!("fault {i}")).collect();
        let s = Summary::from_records(&[a, b]);
        assert_eq!(s.faults.len(), crate::report::figures::MAX_SUMMARY_FAULTS);
        let text = render(&s, &[], &TextOptions::default());
        assert!(
            text.contains("Tracking:      step batch on n1: GPUs not tracked: NVML ?[31mfailed"),
            "{text}"
        );
        assert!(
            text.contains("Tracking:      step 0 on n1: fault 8"),
            "{text}"
        );
        assert!(!text.contains("fault 9"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn idle_gpus_say_when_they_idled_and_phases_show_tenths() {
        let r = record("n1", "batch");
        let mut s = Summary::from_records(&[r]);
        let idle = |start, gaps, end, busy| super::super::story::IdleGpu {
            node: "n1".into(),
            index: 0,
            uuid: "GPU-x".into(),
            idle: crate::history::GpuIdle {
                threshold_percent: 5.0,
                observed_seconds: 100.0,
                idle_seconds: start + gaps + end,
                at_start_seconds: start,
                at_end_seconds: end,
                in_gaps_seconds: gaps,
                longest_seconds: start,
                ever_busy: busy,
                waits: None,
            },
            share_percent: start + gaps + end,
        };
        s.gpu_idle = vec![idle(3.0, 1.5, 0.2, true), idle(100.0, 0.0, 0.0, false)];
        let text = render(&s, &[], &TextOptions::default());
        assert!(
            text.contains(
                "GPU 0 on n1: idle 4.7 s of 00:01:40 (5%): 3.0 s at the start, 1.5 s in gaps\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("idle 00:01:40 of 00:01:40 (100%): never busy"),
            "{text}"
        );
    }

    #[test]
    fn renders_the_figures_with_the_chosen_units() {
        let mut r = record("n1", "batch");
        r.job.alloc_memory_bytes = Some(4 << 30);
        r.memory.peak_bytes = 3 << 30;
        r.tasks[0].exit_code = Some(2);
        let s = Summary::from_records(&[r]);
        let text = render(&s, &[], &TextOptions::default());
        assert!(text.contains("Elapsed:       00:01:00"), "{text}");
        assert!(
            text.contains("peak 3.00 GiB of 4.00 GiB requested (75%)"),
            "{text}"
        );
        assert!(
            text.contains("Failed tasks:  task ? exit code 2")
                || text.contains("a task exit code 2"),
            "{text}"
        );
        assert!(text.contains("\nClasses:       failed\n"), "{text}");
        let text = render(
            &s,
            &[],
            &TextOptions {
                ram: Some(MemUnit::Megabytes),
                time: Some(TimeUnit::Minutes),
                tasks: true,
            },
        );
        assert!(text.contains("peak 3221.225 MB"), "{text}");
        assert!(text.contains("1.000 minutes"), "{text}");
        assert!(text.contains("pid 77"), "{text}");
    }

    #[test]
    fn several_nodes_get_a_row_each_a_total_and_the_unseen_ones_named() {
        let on = |node: &str, cpu: f64| {
            let mut r = record(node, "0");
            r.step.alloc_cpus = Some(2);
            r.cpu.alloc_cpus = 2;
            r.cpu.seconds = cpu;
            r.memory.job_peak_bytes = Some(1 << 30);
            r.job.alloc_memory_bytes = Some(2 << 30);
            r.job.nodes = Some(14);
            r.job.node_list = Some("n[1-14]".into());
            r
        };
        let s = Summary::from_records(&[on("n1", 96.0), on("n2", 6.0)]);
        let text = render(&s, &[], &TextOptions::default());
        assert!(
            text.contains("Nodes:         n1,n2 (2 of 14 nodes)\n"),
            "{text}"
        );
        assert!(
            text.contains("Not seen:      n3,n4,n5,n6,n7,n8,n9,n10,n11,n12 and 2 more: no record of them in this spool.\n"),
            "{text}"
        );
        assert!(text.contains("(\"gpu-tracker-report 42\" on n3)"), "{text}");
        let row = |n: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("  {n} ")))
                .unwrap()
        };
        assert!(
            row("n1").contains("80%") && row("n1").contains("1.00 GiB of 2.00 GiB (50%)"),
            "{text}"
        );
        assert!(row("n2").contains(" 5%"), "{text}");
        assert!(
            row("total").contains("2.00 GiB of 4.00 GiB (50%)"),
            "{text}"
        );
        assert!(
            text.contains("  * node n2: CPU efficiency 5% against 80% on n1 (16.0x less)"),
            "{text}"
        );
    }
}
