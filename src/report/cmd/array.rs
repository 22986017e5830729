//! `gpu-tracker-report ARRAYID`: an array summarised over its tasks in the spool, and the
//! printing of an array's summary wherever it comes from (the spool, Slurm's database).

use super::context::Context;
use super::exit::{Exit, Stop, fail};
use super::mode::Format;
use super::out::Out;
use crate::report::array::{self, ArraySummary};
use crate::report::sizing::Sizing;
use crate::report::{LoadError, Summary};

/// Summarises array `array_id` from the tasks of it in the spool.
pub fn run(ctx: &Context, array_id: u32, out: &mut Out) -> Result<Exit, Stop> {
    let root = &ctx.cfg.spool_dir;
    let loaded = array::find::load_array(root, array_id)
        .map_err(|e| fail(Exit::Failed, format!("{}: {e}", root.display())))?;
    let mut exit = Exit::Ok;
    let mut notes = Vec::new();
    for (id, e) in &loaded.skipped {
        exit = exit.max(match e {
            LoadError::Denied(..) => Exit::Denied,
            LoadError::Refused(..) => Exit::Corrupt,
            _ => Exit::Failed,
        });
        notes.push(format!("task job {id}: {e}"));
    }
    let mut summaries = Vec::new();
    for t in &loaded.tasks {
        let mut s = Summary::from_records(&t.records);
        s.set_co2(ctx.cfg.co2_grams_per_kwh);
        s.set_classes(&ctx.rules);
        summaries.push(s);
        exit = exit.max(Exit::of_problems(&t.problems));
        notes.extend(
            t.problems
                .iter()
                .map(|p| format!("task job {}: {}", t.job_id, p.message())),
        );
    }
    if summaries.is_empty() {
        return Err(fail(
            exit.max(Exit::Failed),
            format!(
                "array {array_id}: no task could be read: {}",
                notes.join("; ")
            ),
        ));
    }
    print(
        ctx,
        &ArraySummary::of(array_id, &summaries, &Sizing::of(&ctx.cfg.advise)),
        &notes,
        out,
    )?;
    for n in &notes {
        out.warn(&format!("array {array_id}: {n}"));
    }
    if loaded.unreadable > 0 && crate::sys::euid() == 0 {
        out.warn(&format!(
            "{} job directories could not be read",
            loaded.unreadable
        ));
    }
    Ok(exit)
}

/// Prints array summary `a` as `--format` asks, with `notes` on what could not be used.
pub fn print(ctx: &Context, a: &ArraySummary, notes: &[String], out: &mut Out) -> Result<(), Stop> {
    if ctx.format == Format::Json {
        out.json(&a.to_json(notes))
    } else {
        out.text(&array::text::render(a, notes, &ctx.text))
    }
}
