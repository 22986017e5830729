//! What `gpu-tracker -e` writes when the command has ended: the report (text or JSON, to
//! `--output` or stdout) and `--timeline`, `--events` and `--plot`. A failure to write one is
//! reported and does not change the exit status (the command's).

use std::io::Write;
use std::path::Path;

use super::Args;
use crate::launch::Finished;
use crate::report::story;

/// The report, to `file` (`--output`) or stdout. Never loses the figures: a file that cannot
/// be written is said so, and the report goes to the screen.
pub(super) fn write_report(args: &Args, done: &Finished, file: Option<&mut std::fs::File>) {
    let report = if args.format == "json" {
        done.usage.to_json_pretty() + "\n"
    } else {
        done.usage.to_string()
    };
    match file {
        Some(f) => {
            if let Err(e) = f.write_all(report.as_bytes()) {
                eprintln!(
                    "gpu-tracker: error: writing {}: {e}",
                    args.output
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                );
                print_stdout(&report);
            }
        }
        None => print_stdout(&report),
    }
}

/// Writes `--timeline`, `--events` and `--plot`.
pub(super) fn write_story(args: &Args, done: &Finished, command: &str) {
    if args.timeline.is_none() && args.events.is_none() && args.plot.is_none() {
        return;
    }
    // The GPUs' NVML numbers, which the events name.
    let gpus: Vec<(String, u32)> = done
        .usage
        .gpus
        .iter()
        .map(|g| (g.uuid.clone(), g.index))
        .collect();
    let rec = story::command_record(&done.story, command, done.elapsed(), &gpus);
    let recs = std::slice::from_ref(&rec);
    let is_json = |p: &Path| {
        p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    };
    let fail = |p: &Path, e: &dyn std::fmt::Display| {
        eprintln!("gpu-tracker: error: writing {}: {e}", p.display());
    };
    if let Some(p) = &args.timeline {
        let text = if is_json(p) {
            story::timeline_json(0, recs)
        } else {
            story::timeline_csv(recs)
        };
        if let Err(e) = std::fs::write(p, text) {
            fail(p, &e);
        }
    }
    if let Some(p) = &args.events {
        let text = if is_json(p) {
            story::events_json(0, recs)
        } else {
            story::events_csv(recs)
        };
        if let Err(e) = std::fs::write(p, text) {
            fail(p, &e);
        }
    }
    if let Some(p) = &args.plot {
        let title = format!(
            "gpu-tracker -e {}",
            crate::step::record::clean_text(command, 60)
        );
        if let Err(e) = crate::report::plot::draw(&story::plot_data(recs, &title), p) {
            fail(p, &e);
        }
    }
}

/// Prints to stdout; a reader that went away (`| head`) is not an error.
pub(super) fn print_stdout(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|_| out.flush());
}
