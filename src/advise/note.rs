//! The advice as people and programs read it: the few lines at submission, the same with the
//! table of the matched runs (`gpu-tracker-report --advise`), and its JSON.

use serde::Serialize;

use super::{Advice, Key, PastRun};
use crate::config::AdviseConfig;
use crate::units::human_bytes;
use crate::units::slurm_duration;

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

/// "N of M run(s) <what>", and what the others did, where some run was stopped at a limit.
fn stopped(a: &Advice, n: usize, what: &str, others: String) -> String {
    let rest = a.runs.saturating_sub(n);
    if rest == 0 {
        format!("{n} of {} run(s) {what}", a.runs)
    } else {
        format!("{n} of {} run(s) {what}; the other {rest} {others}", a.runs)
    }
}

/// What the runs used against what was asked, a phrase each. A resource some run was stopped
/// at the limit of is "not known, at least" that limit.
fn used(a: &Advice) -> Vec<String> {
    let u = &a.used;
    let mut out = Vec::new();
    let asked = if u.mem_asked > 0 {
        format!(" of {} asked", super::mem_text(u.mem_asked))
    } else {
        String::new()
    };
    if let Some(least) = u.mem_at_least {
        out.push(format!(
            "memory not known, more than {} ({})",
            super::mem_text(least),
            stopped(
                a,
                u.ooms,
                "killed at their memory limit",
                format!("needed at most {}{asked}", human_bytes(u.mem_needed))
            )
        ));
    } else if u.mem_needed > 0 {
        out.push(format!("memory {}{asked}", human_bytes(u.mem_needed)));
    }
    if u.cpus > 0 {
        out.push(format!("{:.1} of {} CPU(s) busy", u.cores, u.cpus));
    }
    let limit = u.limit.map_or_else(String::new, |l| {
        format!(" of a {} limit", slurm_duration(l as f64))
    });
    if let Some(least) = u.time_at_least {
        out.push(format!(
            "time not known, more than {} ({})",
            slurm_duration(least as f64),
            stopped(
                a,
                u.timeouts,
                "ran out of their time limit",
                format!("ran at most {}{limit}", slurm_duration(u.elapsed))
            )
        ));
    } else if u.elapsed > 0.0 {
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

/// The note's first line: "... used at most:", or, where some run was stopped at a limit
/// (which says only that it needed more), "... used:".
fn heading(a: &Advice) -> String {
    if a.used.mem_at_least.is_some() || a.used.time_at_least.is_some() {
        format!("{} used:", matched(a))
    } else {
        format!("{} used at most:", matched(a))
    }
}

/// The note at submission: who matched, what they used, what would have fitted (and what is
/// a guess), how to silence it.
pub fn submission_note(a: &Advice, cfg: &AdviseConfig, report: &str) -> String {
    let mut lines = vec![heading(a)];
    lines.push(format!("  {}", used(a).join("; ")));
    lines.extend(fits_lines(a, cfg));
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

/// "would have fitted them (+20% memory, +50% time): --mem=... --time=...", with the options
/// sized from measured needs only; then, where some run was stopped at a limit, "a guess, not
/// a fit (...): --mem=..." with those sized by the guess.
fn fits_lines(a: &Advice, cfg: &AdviseConfig) -> Vec<String> {
    let s = &a.suggestion;
    let sizing = crate::report::sizing::Sizing::of(cfg);
    let guessed = |o: &&str| {
        (s.mem_guess && o.starts_with("--mem=")) || (s.time_guess && o.starts_with("--time="))
    };
    let (guesses, fits): (Vec<&str>, Vec<&str>) = s.options.split_whitespace().partition(guessed);
    let mut margins = Vec::new();
    if s.mem.is_some() && !s.mem_guess {
        margins.push(format!("+{:.0}% memory", sizing.mem_percent()));
    }
    if s.time.is_some() && !s.time_guess {
        margins.push(format!("+{:.0}% time", sizing.time_percent()));
    }
    let mut opts = fits.join(" ");
    if s.gres.as_deref() == Some("none") {
        opts.push_str(" and no --gres");
    }
    let mut out = Vec::new();
    if !opts.trim().is_empty() {
        let margins = if margins.is_empty() {
            String::new()
        } else {
            format!(" ({})", margins.join(", "))
        };
        let mut line = format!("would have fitted them{margins}: {}", opts.trim());
        if !s.smaller_gpus.is_empty() {
            line.push_str(&format!(
                "; a smaller GPU would have done: {}",
                s.smaller_gpus.join(" or ")
            ));
        }
        out.push(line);
    }
    if !guesses.is_empty() {
        let mut rule = String::from(crate::report::sizing::GUESS_RULE);
        if (s.mem_guess && a.used.mem_needed > 0) || (s.time_guess && a.used.elapsed > 0.0) {
            rule.push_str(", or the other runs' need with the margin where more");
        }
        out.push(format!(
            "a guess, not a fit (what they needed is not known; {rule}): {}",
            guesses.join(" ")
        ));
    }
    out
}

/// The text of `gpu-tracker-report --advise`: the note, or why there is none, and the table
/// of the matched runs (newest first).
pub fn report_text(a: Option<&Advice>, key: &Key, runs: &[&PastRun], cfg: &AdviseConfig) -> String {
    let mut out = String::new();
    match a {
        Some(a) => {
            out.push_str(&format!("{}\n", heading(a)));
            for u in used(a) {
                out.push_str(&format!("  {u}\n"));
            }
            for l in fits_lines(a, cfg) {
                out.push_str(&format!("{l}\n"));
            }
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
        // Killed for memory: it needed more than its limit (or its charge), by how much is not
        // known.
        let need = if r.oom {
            format!(
                ">{}",
                human_bytes(if r.mem_asked > 0 {
                    r.mem_asked
                } else {
                    r.mem_peak.max(r.mem_needed)
                })
            )
        } else {
            human_bytes(r.mem_needed)
        };
        out.push_str(&format!(
            "{:<12} {:<16} {:<13} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10}\n",
            job,
            local(r.end, "%Y-%m-%d %H:%M"),
            crate::text::clean_text(&r.state, 13),
            slurm_duration(r.elapsed),
            limit,
            need,
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
