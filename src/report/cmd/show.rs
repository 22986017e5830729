//! `gpu-tracker-report JOBID[.STEP]` and `ARRAYID_TASK`: a job's summary, its merged records as
//! JSON, its timeline or events, or its plot, from the spool. An array's own id alone goes to
//! the array's summary ([`super::array`]); a job the spool has no records of, to the summary
//! kept in Slurm's database ([`super::elsewhere`]).

use super::context::Context;
use super::exit::{Exit, Stop, fail};
use super::mode::{Format, Table, View};
use super::out::Out;
use crate::report::cmd::args::JobSpec;
use crate::report::text::render;
use crate::report::{self, JobRecords, LoadError, array, story};

/// Shows job `spec` as `view` asks.
pub fn run(ctx: &Context, spec: &JobSpec, view: &View, out: &mut Out) -> Result<Exit, Stop> {
    let root = &ctx.cfg.spool_dir;
    let spool_error = |e: std::io::Error| fail(Exit::Failed, format!("{}: {e}", root.display()));
    if let (Some(j), None, View::Summary) = (spec.job, &spec.step, view) {
        // An array's own id is also one task's job id: alone, it means the whole array.
        if array::find::is_array(root, j).map_err(spool_error)? {
            return super::array::run(ctx, j, out);
        }
    }
    let step_given = spec.step.is_some();
    let job_id = match (spec.job, spec.array) {
        (Some(j), _) => j,
        (None, Some((a, t))) => match array::find::find_task(root, a, t).map_err(spool_error)? {
            Some(j) => j,
            None => return super::elsewhere::run(ctx, &format!("{a}_{t}"), step_given, out),
        },
        (None, None) => return Err(fail(Exit::Usage, "no job given")),
    };
    let max = ctx.cfg.max_summary_records as usize;
    let mut records: JobRecords = match report::load_job_limited(root, job_id, max) {
        Ok(r) => r,
        Err(LoadError::NoRecords(..)) => {
            return super::elsewhere::run(ctx, &job_id.to_string(), step_given, out);
        }
        Err(e @ LoadError::Denied(..)) => return Err(fail(Exit::Denied, e.to_string())),
        Err(e) => return Err(fail(Exit::Failed, e.to_string())),
    };
    if records.records.is_empty() && records.problems.is_empty() {
        // The plugin makes the directory when tracking starts and writes the first record just
        // after, before the step's tasks start.
        return Err(fail(
            Exit::Incomplete,
            format!(
                "job {job_id}: tracking started but no record is written yet (the step is starting, or was killed before writing it)"
            ),
        ));
    }
    if let Some(st) = &spec.step {
        records = records.only_step(st);
        if records.records.is_empty() && records.problems.is_empty() {
            return Err(fail(
                Exit::NotTracked,
                format!("job {job_id} has no record of step {st}"),
            ));
        }
    }
    show(ctx, job_id, &records, spec.step.as_deref(), view, out)?;
    for p in &records.problems {
        out.warn(&format!("job {job_id}: {}", p.message()));
    }
    Ok(Exit::of_problems(&records.problems))
}

/// Prints the records of job `job_id` (of step `step` alone, when given) as `view` asks.
fn show(
    ctx: &Context,
    job_id: u32,
    records: &JobRecords,
    step: Option<&str>,
    view: &View,
    out: &mut Out,
) -> Result<(), Stop> {
    let mut summary = records.summary(step);
    summary.set_co2(ctx.cfg.co2_grams_per_kwh);
    summary.set_classes(&ctx.rules);
    let recs = &records.records;
    if *view != View::Summary && !recs.iter().any(|r| r.timeline.is_some()) {
        return Err(fail(
            Exit::NotTracked,
            format!(
                "job {job_id}: its records have no timeline (written by an earlier gpu-tracker, \
                 or no sample was taken)"
            ),
        ));
    }
    match view {
        View::Timeline(Table::Json) => out.json(&story::timeline_json(job_id, recs)),
        View::Timeline(Table::Csv) => out.text(&story::timeline_csv(recs)),
        View::Events(Table::Json) => out.json(&story::events_json(job_id, recs)),
        View::Events(Table::Csv) => out.text(&story::events_csv(recs)),
        View::Plot(path) => {
            let title = format!(
                "job {job_id}{} ({}): memory, CPU and GPUs over time",
                summary
                    .name
                    .as_deref()
                    .map_or_else(String::new, |n| format!(" {n}")),
                summary.user
            );
            report::plot::draw(&story::plot_data(recs, &title), path)
                .map_err(|e| fail(Exit::Failed, e.to_string()))?;
            out.line(&format!(
                "gpu-tracker-report: drew job {job_id} to {}",
                path.display()
            ))
        }
        View::Summary if ctx.format == Format::Json => out.json(&records.to_json(&summary)),
        View::Summary if recs.is_empty() => {
            out.line(&format!("gpu-tracker: job {job_id}: no readable record"))?;
            for p in &records.problems {
                out.line(&format!("Note:          {}", p.message()))?;
            }
            Ok(())
        }
        View::Summary => out.text(&render(&summary, &records.problems, &ctx.text)),
    }
}
