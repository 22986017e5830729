//! The advice as people and programs read it: the few lines at submission, the same with the
//! table of the matched runs (`gpu-tracker-report --advise`), and its JSON.

use serde::Serialize;

use super::{Advice, Key, PastRun};
use crate::config::AdviseConfig;
use crate::report::runs::slurm_duration;
use crate::units::human_bytes;

/// Each line of the note starts with this.
pub const PREFIX: &str = "gpu-tracker: ";

/// A day, as the note gives it.
fn day(t: i64) -> String {
    local(t, "%Y-%m-%d")
}

/// Unix seconds `t` in local time, formatted.
fn local(t: i64, format: &str) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.with_timezone(&chrono::Local).format(format).to_string())
        .unwrap_or_else(|| "?".into())
}

/// "N past job(s) named ... (ended D1 to D2)".
fn matched(a: &Advice) -> String {
    let runs = if a.runs > a.jobs {
        format!(", {} runs", a.runs)
    } else {
        String::new()
    };
    let (first, last) = (day(a.first_end), day(a.last_end));
    let days = if first == last {
        format!("ended {last}")
    } else {
        format!("ended {first} to {last}")
    };
    format!("{} past job(s) {} ({days}{runs})", a.jobs, a.key.describe())
}

/// What the runs used against what was asked, a phrase each.
fn used(a: &Advice) -> Vec<String> {
    let u = &a.used;
    let mut out = Vec::new();
    if u.mem_needed > 0 {
        let asked = if u.mem_asked > 0 {
            format!(" of {} asked", super::mem_text(u.mem_asked))
        } else {
            String::new()
        };
        out.push(format!("memory {}{asked}", human_bytes(u.mem_needed)));
    }
    if u.cpus > 0 {
        out.push(format!("{:.1} of {} CPU(s) busy", u.cores, u.cpus));
    }
    if u.elapsed > 0.0 {
        let limit = u.limit.map_or_else(String::new, |l| {
            format!(" of a {} limit", slurm_duration(l as f64))
        });
        out.push(format!("ran {}{limit}", slurm_duration(u.elapsed)));
    }
    if u.gpus > 0 {
        let util = u
            .gpu_util
            .map_or_else(String::new, |p| format!(", {p:.0}% busy"));
        out.push(format!(
            "GPUs: {} of {} with a process, {} peak on one{util}",
            u.gpus_used,
            u.gpus,
            human_bytes(u.gpu_mem)
        ));
    }
    out
}

/// The note at submission: who matched, what they used, what would have fitted, how to
/// silence it.
pub fn submission_note(a: &Advice, cfg: &AdviseConfig, report: &str) -> String {
    let mut lines = vec![format!("{} used at most:", matched(a))];
    lines.push(format!("  {}", used(a).join("; ")));
    lines.push(fits_line(a, cfg));
    lines.push(format!("  worth changing: {}", a.changes.join("; ")));
    let arg = match &a.key {
        Key::Name(n) => crate::text::clean_text(n, 100),
        Key::Script(p) => crate::text::clean_text(p, 200),
    };
    lines.push(format!(
        "  (GPU_TRACKER_ADVICE=off silences this; {report} --advise '{arg}' lists the jobs)"
    ));
    lines
        .iter()
        .map(|l| format!("{PREFIX}{l}\n"))
        .collect::<String>()
}

/// "would have fitted them (+20% memory, +50% time): --mem=... --time=..."
fn fits_line(a: &Advice, cfg: &AdviseConfig) -> String {
    let s = &a.suggestion;
    let mut opts = s.options.clone();
    if s.gres.as_deref() == Some("none") {
        opts.push_str(" and no --gres");
    }
    let mut line = format!(
        "would have fitted them (+{:.0}% memory, +{:.0}% time): {}",
        (cfg.mem_margin - 1.0) * 100.0,
        (cfg.time_margin - 1.0) * 100.0,
        opts.trim()
    );
    if !s.smaller_gpus.is_empty() {
        line.push_str(&format!(
            "; a smaller GPU would have done: {}",
            s.smaller_gpus.join(" or ")
        ));
    }
    line
}

/// The text of `gpu-tracker-report --advise`: the note, or why there is none, and the table
/// of the matched runs (newest first).
pub fn report_text(a: Option<&Advice>, key: &Key, runs: &[&PastRun], cfg: &AdviseConfig) -> String {
    let mut out = String::new();
    match a {
        Some(a) => {
            out.push_str(&format!("{} used at most:\n", matched(a)));
            for u in used(a) {
                out.push_str(&format!("  {u}\n"));
            }
            out.push_str(&format!("{}\n", fits_line(a, cfg)));
            if a.changes.is_empty() {
                out.push_str("Their requests fitted them: nothing worth changing.\n");
            } else {
                out.push_str(&format!("Worth changing: {}\n", a.changes.join("; ")));
            }
        }
        None => out.push_str(&format!(
            "No finished tracked job {} in the last {} days.\n",
            key.describe(),
            cfg.days
        )),
    }
    if runs.is_empty() {
        return out;
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<12} {:<16} {:<13} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10}\n",
        "JOB",
        "ENDED",
        "STATE",
        "ELAPSED",
        "LIMIT",
        "MEM NEED",
        "MEM ASKED",
        "CPU BUSY",
        "GPU USED",
        "GPU MEM"
    ));
    for r in runs {
        let job = match r.array {
            Some(a) if a != r.job => format!("{}({a})", r.job),
            _ => r.job.to_string(),
        };
        let limit = r
            .limit
            .map_or_else(|| "-".to_string(), |l| slurm_duration(l as f64));
        let asked = if r.mem_asked > 0 {
            human_bytes(r.mem_asked)
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "{:<12} {:<16} {:<13} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10}\n",
            job,
            local(r.end, "%Y-%m-%d %H:%M"),
            crate::text::clean_text(&r.state, 13),
            slurm_duration(r.elapsed),
            limit,
            human_bytes(r.mem_needed),
            asked,
            format!("{:.1}/{}", r.cores, r.cpus),
            format!("{}/{}", r.gpus_used, r.gpus),
            if r.gpus > 0 {
                human_bytes(r.gpu_mem)
            } else {
                "-".into()
            },
        ));
    }
    out
}

/// The JSON document of `gpu-tracker-report --advise -f json`.
#[derive(Debug, Serialize)]
pub struct AdviceDocument<'a> {
    /// Always [`ADVICE_SCHEMA`].
    pub schema: &'static str,
    /// Version of this document's format.
    pub schema_version: u32,
    /// What was matched.
    pub key: &'a Key,
    /// The advice; `None`: no run matched.
    pub advice: Option<&'a Advice>,
    /// The matched runs, newest first.
    pub runs: &'a [&'a PastRun],
    /// What could not be used, one line each.
    pub notes: &'a [String],
}

/// Value of [`AdviceDocument::schema`].
pub const ADVICE_SCHEMA: &str = "gpu-tracker/advice";
/// Value of [`AdviceDocument::schema_version`].
pub const ADVICE_SCHEMA_VERSION: u32 = 1;

/// The JSON document, pretty, newline-terminated.
pub fn to_json(a: Option<&Advice>, key: &Key, runs: &[&PastRun], notes: &[String]) -> String {
    let doc = AdviceDocument {
        schema: ADVICE_SCHEMA,
        schema_version: ADVICE_SCHEMA_VERSION,
        key,
        advice: a,
        runs,
        notes,
    };
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
