//! The site report as text (a table, worst first), CSV (one row per group, a column per class)
//! and JSON (`gpu-tracker/site-report`, docs/REPORT.md).

use std::fmt::Write;

use super::{Group, SiteReport};
use crate::report::classes::TAGS;

/// Local time to the minute.
fn when(t: &chrono::DateTime<chrono::FixedOffset>) -> String {
    t.with_timezone(&chrono::Local)
        .format("%Y-%m-%d %H:%M")
        .to_string()
}

fn pct(p: Option<f64>) -> String {
    crate::units::percent_or(p, "-")
}

/// Hours: a tenth under 1000, whole above (the columns stay aligned up to millions).
fn hours(h: f64) -> String {
    if h < 1000.0 {
        format!("{h:.1}")
    } else {
        format!("{h:.0}")
    }
}

fn sources(g: &Group) -> String {
    match (g.sources.database, g.sources.spool) {
        (0, 0) => "-".into(),
        (_, 0) => "database".into(),
        (0, _) => "spool".into(),
        (d, s) => format!("db {d}, spool {s}"),
    }
}

/// The classes counted, in the tags' order: `mem-over 80, gpu-unused 4`.
pub fn classes_text(g: &Group) -> String {
    let t: Vec<String> = TAGS
        .iter()
        .filter_map(|tag| g.classes.get(*tag).map(|n| format!("{tag} {n}")))
        .collect();
    if t.is_empty() {
        "none".into()
    } else {
        t.join(", ")
    }
}

/// What the columns are, under the table.
const LEGEND: &str = "\
GPU-H: GPU-hours allocated; NOPROC-H: of them, on GPUs no process of the job ran on; IDLE-H:
idle GPU-hours, NOPROC-H included; UTIL: mean GPU utilization; CPU: CPU efficiency; MEMREQ-GH,
MEMUSE-GH: memory requested and peak used, GiB-hours; NOFIG: finished jobs without figures.
Worst first: the most idle GPU-hours, then the most memory asked for and not used.
";

/// The report as people read it.
pub fn text(r: &SiteReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gpu-tracker site report by {}", r.by.name());
    let _ = writeln!(
        o,
        "Period:    jobs that ended from {} to {}",
        when(&r.since),
        when(&r.until)
    );
    let _ = writeln!(o, "Scope:     {}", r.scope);
    let j = &r.jobs;
    let _ = writeln!(
        o,
        "Jobs:      {} with figures ({} from Slurm's database, {} from the spool); {} without{}",
        j.counted,
        j.from_database,
        j.from_spool,
        j.without_figures,
        if j.unreadable > 0 {
            format!(" ({} of them with records you may not read)", j.unreadable)
        } else {
            " (not tracked)".into()
        }
    );
    if r.groups.is_empty() {
        let _ = writeln!(o, "No finished job in the period.");
    } else {
        let width = r
            .groups
            .iter()
            .map(|g| g.group.chars().count())
            .max()
            .unwrap_or(0)
            .clamp(9, 32);
        let head = r.by.name().to_ascii_uppercase();
        let _ = writeln!(
            o,
            "{head:<width$} {:>6} {:>9} {:>9} {:>9} {:>5} {:>5} {:>10} {:>10} {:>6} {:>4} {:>6}  {:<16} CLASSES",
            "JOBS",
            "GPU-H",
            "NOPROC-H",
            "IDLE-H",
            "UTIL",
            "CPU",
            "MEMREQ-GH",
            "MEMUSE-GH",
            "FAILED",
            "OOM",
            "NOFIG",
            "SOURCE"
        );
        for g in &r.groups {
            let name: String = g.group.chars().take(width).collect();
            let _ = writeln!(
                o,
                "{name:<width$} {:>6} {:>9} {:>9} {:>9} {:>5} {:>5} {:>10} {:>10} {:>6} {:>4} {:>6}  {:<16} {}",
                g.jobs,
                hours(g.gpu_hours),
                hours(g.gpu_hours_unused),
                hours(g.gpu_hours_idle),
                pct(g.gpu_utilization_percent),
                pct(g.cpu_efficiency_percent),
                hours(g.memory_requested_gib_hours),
                hours(g.memory_used_gib_hours),
                g.failed_jobs,
                g.oom_jobs,
                g.without_figures,
                sources(g),
                classes_text(g)
            );
        }
        o.push_str(LEGEND);
    }
    for n in &r.notes {
        let _ = writeln!(o, "Note: {n}");
    }
    o
}

/// A CSV field, quoted where it must be.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// The rows as CSV, a header first; a column per class tag.
pub fn csv(r: &SiteReport) -> String {
    let mut o = String::new();
    let mut head = vec![
        r.by.name().to_string(),
        "jobs".into(),
        "without_figures".into(),
        "gpu_hours".into(),
        "gpu_hours_unused".into(),
        "gpu_hours_idle".into(),
        "gpu_utilization_percent".into(),
        "cpu_efficiency_percent".into(),
        "memory_requested_gib_hours".into(),
        "memory_used_gib_hours".into(),
        "failed_jobs".into(),
        "oom_jobs".into(),
        "from_database".into(),
        "from_spool".into(),
    ];
    head.extend(
        TAGS.iter()
            .map(|t| format!("class_{}", t.replace('-', "_"))),
    );
    let _ = writeln!(o, "{}", head.join(","));
    for g in &r.groups {
        let mut row = vec![
            field(&g.group),
            g.jobs.to_string(),
            g.without_figures.to_string(),
            g.gpu_hours.to_string(),
            g.gpu_hours_unused.to_string(),
            g.gpu_hours_idle.to_string(),
            opt(g.gpu_utilization_percent),
            opt(g.cpu_efficiency_percent),
            g.memory_requested_gib_hours.to_string(),
            g.memory_used_gib_hours.to_string(),
            g.failed_jobs.to_string(),
            g.oom_jobs.to_string(),
            g.sources.database.to_string(),
            g.sources.spool.to_string(),
        ];
        row.extend(
            TAGS.iter()
                .map(|t| g.classes.get(*t).copied().unwrap_or(0).to_string()),
        );
        let _ = writeln!(o, "{}", row.join(","));
    }
    o
}

/// The report as JSON.
pub fn json(r: &SiteReport) -> String {
    serde_json::to_string_pretty(r).unwrap_or_default() + "\n"
}
