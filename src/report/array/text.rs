//! The array summary as text, in the job summary's look (see [`crate::report::text`]).

use std::fmt::Write;

use super::{ArraySummary, Spread, TaskFigures};
use crate::report::text::{RULE, TextOptions};
use crate::units::human_bytes;

fn mem(o: &TextOptions, bytes: f64) -> String {
    match o.ram {
        Some(u) => format!("{:.3} {}", u.from_bytes(bytes as u64), u.as_str()),
        None => human_bytes(bytes as u64),
    }
}

fn time(o: &TextOptions, seconds: f64) -> String {
    match o.time {
        Some(u) => format!("{:.3} {}", u.from_seconds(seconds), u.as_str()),
        None => super::slurm_time(seconds.round().max(0.0) as u64),
    }
}

/// One row of the spread table: label, min, median, max.
fn spread_row(w: &mut String, label: &str, s: Option<Spread>, f: &dyn Fn(f64) -> String) {
    let Some(s) = s else {
        let _ = writeln!(w, "  {label:<14} n/a");
        return;
    };
    let _ = writeln!(
        w,
        "  {label:<14} {:>12} {:>12} {:>12}",
        f(s.min),
        f(s.median),
        f(s.max)
    );
}

fn task_state(t: &TaskFigures) -> &'static str {
    if t.oom_killed {
        "OOM-killed"
    } else if t.failed {
        "failed"
    } else if !t.complete {
        "incomplete"
    } else {
        "completed"
    }
}

/// The array summary; with `o.tasks`, a row per task.
pub fn render(a: &ArraySummary, problems: &[String], o: &TextOptions) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "{RULE}");
    let _ = writeln!(
        w,
        "gpu-tracker summary of array {} ({} task(s))",
        a.array_job_id, a.tasks_found
    );
    let _ = writeln!(w, "{RULE}");
    if let Some(n) = &a.name {
        let _ = writeln!(w, "Job name:      {n}");
    }
    let _ = writeln!(w, "User:          {} (uid {})", a.user, a.uid);
    let mut state = format!(
        "{} found: {} completed, {} failed, {} OOM-killed",
        a.tasks_found, a.completed, a.failed, a.oom_killed
    );
    if a.incomplete > 0 {
        let _ = write!(
            state,
            ", {} still running or without a final record",
            a.incomplete
        );
    }
    let _ = writeln!(w, "Tasks:         {state}");
    let _ = writeln!(
        w,
        "{:<16} {:>12} {:>12} {:>12}",
        "Over tasks:", "MIN", "MEDIAN", "MAX"
    );
    spread_row(w, "Elapsed", a.elapsed_seconds, &|s| time(o, s));
    spread_row(w, "Peak memory", a.peak_memory_bytes, &|b| mem(o, b));
    spread_row(
        w,
        "CPU efficiency",
        a.cpu_efficiency_percent,
        &crate::units::percent,
    );
    if a.tasks.iter().any(|t| t.gpus_allocated > 0) {
        spread_row(
            w,
            "GPU util",
            a.gpu_utilization_percent,
            &crate::units::percent,
        );
        spread_row(w, "GPU memory", a.gpu_memory_bytes, &|b| mem(o, b));
    }
    if a.outliers.is_empty() {
        let _ = writeln!(w, "Outliers:      none");
    }
    for (i, x) in a.outliers.iter().enumerate() {
        let (what, value, median) = match x.figure {
            "elapsed" => ("elapsed", time(o, x.value), time(o, x.median)),
            _ => ("peak memory", mem(o, x.value), mem(o, x.median)),
        };
        let label = if i == 0 { "Outliers:" } else { "" };
        let _ = writeln!(
            w,
            "{label:<15}task {} (job {}): {what} {value}, {:.1}x the median {median}",
            x.task_id, x.job_id, x.ratio
        );
    }
    if !a.classes.is_empty() {
        let list: Vec<String> = a.classes.iter().map(|(t, n)| format!("{t} {n}")).collect();
        let _ = writeln!(w, "Classes:       {}", list.join(", "));
    }
    let _ = writeln!(w, "Next time:     {}", a.right_size.line);
    if o.tasks {
        let _ = writeln!(
            w,
            "Per task:\n  {:>6} {:>10} {:>12} {:>12} {:>7} {:>5}  STATE",
            "TASK", "JOBID", "ELAPSED", "PEAK MEM", "CPU EFF", "GPUS"
        );
        for t in &a.tasks {
            let _ = writeln!(
                w,
                "  {:>6} {:>10} {:>12} {:>12} {:>7} {:>5}  {}",
                t.task_id,
                t.job_id,
                time(o, t.elapsed_seconds),
                mem(o, t.peak_memory_bytes as f64),
                t.cpu_efficiency_percent
                    .map_or_else(|| "n/a".into(), crate::units::percent),
                t.gpus_used,
                task_state(t)
            );
        }
    }
    for p in problems {
        let _ = writeln!(w, "Note:          {p}");
    }
    let _ = writeln!(w, "{RULE}");
    out
}
