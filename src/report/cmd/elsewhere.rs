//! A job the spool has no records of: the summary kept in Slurm's database (its
//! `AdminComment`), where there is one; else what Slurm knows of the job, to say why there is
//! nothing to show.

use super::context::Context;
use super::exit::{Exit, Stop, fail};
use super::mode::Format;
use super::out::Out;
use crate::report::stored::{Stored, StoredError};
use crate::report::text::render;
use crate::report::{JobRecords, array};
use crate::slurm::{ctld, db};
use crate::step::record::clean_text;

/// Shows job `job` (an id or `A_T`) from Slurm's database; a step (`step_given`) is not kept
/// there. The failure, when there is nothing to show, says where the job was looked for.
pub fn run(ctx: &Context, job: &str, step_given: bool, out: &mut Out) -> Result<Exit, Stop> {
    let db = if step_given {
        "Slurm's database was not asked (it keeps a job's summary, not a step's)".to_string()
    } else {
        match stored(ctx, job, out)? {
            Ok(exit) => return Ok(exit),
            Err(why) => why,
        }
    };
    Err(not_found(ctx, job, &db))
}

/// A job whose records are not in the spool, from the summary stored in Slurm's database.
/// `Ok(Err(why))` when the database has none, or could not be asked: `why` says which, for
/// people.
fn stored(ctx: &Context, job: &str, out: &mut Out) -> Result<Result<Exit, String>, Stop> {
    let rows = match db::fetch_all(job) {
        Ok(rows) => rows,
        Err(e) => return Ok(Err(format!("Slurm's database could not be asked ({e})"))),
    };
    // An array's own id: sacct lists every task, each with its stored summary.
    if let Some((mut a, notes)) = job
        .parse()
        .ok()
        .and_then(|id| array::db::from_rows(id, &rows, &ctx.rules))
    {
        if let Some(t) = a.tasks.first() {
            // Asked apart: a name may hold newlines and the delimiter.
            let name = db::fetch_name(&format!("{}_{}", a.array_job_id, t.task_id));
            a.name = name.filter(|n| !n.is_empty()).map(|n| clean_text(&n, 100));
        }
        super::array::print(ctx, &a, &notes, out)?;
        return Ok(Ok(if a.incomplete > 0 {
            Exit::Incomplete
        } else {
            Exit::Ok
        }));
    }
    let Some(job_row) = db::the_job(job, rows) else {
        return Ok(Err(format!("sacct shows no job {job} to you")));
    };
    let stored = match Stored::decode(&job_row.admin_comment) {
        Ok(s) if s.job == job_row.job && s.array == job_row.array => s,
        Ok(s) => {
            let other = crate::slurm::command::job_ref(s.job, s.array);
            return Err(fail(
                Exit::Corrupt,
                format!("job {job}: Slurm's database holds job {other}'s summary under it"),
            ));
        }
        Err(StoredError::Absent) => {
            return Ok(Err(
                "Slurm's database has no gpu-tracker summary of it".to_string()
            ));
        }
        Err(e) => {
            return Err(fail(
                Exit::Corrupt,
                format!("job {job}: Slurm's database holds {e}"),
            ));
        }
    };
    let name = db::fetch_name(&crate::slurm::command::job_ref(job_row.job, job_row.array));
    let summary = stored.to_summary(&job_row.user, job_row.uid, name.as_deref(), &ctx.rules);
    if ctx.format == Format::Json {
        // The job's document, with no records: they stayed in the spool.
        out.json(&JobRecords::default().to_json(&summary))?;
    } else {
        out.text(&render(&summary, &[], &ctx.text))?;
    }
    Ok(Ok(if summary.complete {
        Exit::Ok
    } else {
        Exit::Incomplete
    }))
}

/// The failure for a job with no records in the spool and no summary in Slurm's database:
/// where it was looked for (the spool and how its settings were found), what the database
/// said (`db`), and what the user can do. A job that has records elsewhere (another spool, a
/// user Slurm hides jobs from) must not be told it was not tracked.
fn not_found(ctx: &Context, spec: &str, db: &str) -> Stop {
    let looked = format!("{} ({})", ctx.cfg.spool_dir.display(), ctx.spool_origin);
    match ctld::knows(spec) {
        Ok(true) => match ctld::not_started(spec) {
            Some(why) => fail(
                Exit::NotStarted,
                format!(
                    "job {spec} has not started yet ({why}): its records are written once its steps start"
                ),
            ),
            None => fail(
                Exit::NotTracked,
                format!(
                    "job {spec}: no gpu-tracker records of it in {looked}, and {db}. Check that it \
                     was submitted with --gpu-track (or that this site tracks every job); if it \
                     was, ask your administrator where its records are kept"
                ),
            ),
        },
        Ok(false) => fail(
            Exit::UnknownJob,
            format!(
                "unknown job {spec}: Slurm does not show it to you (scontrol, sacct) and there \
                 are no records of it in {looked}. If it is your job, ask your administrator"
            ),
        ),
        Err(why) => fail(
            Exit::UnknownJob,
            format!(
                "no records of job {spec} in {looked}, and Slurm could not be asked whether it \
                 ran ({why})"
            ),
        ),
    }
}
