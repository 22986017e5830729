//! `gpu-tracker-report --by user|account|partition`: the site report ([`crate::report::site`])
//! over the jobs that ended in a time span, from Slurm's database and the spool.

use chrono::{DateTime, FixedOffset};

use super::context::Context;
use super::exit::{Exit, Stop, fail};
use super::mode::Format;
use super::out::Out;
use crate::report::site::{GroupBy, collect, render};
use crate::slurm::ended;

/// The report by `by` of the jobs of `cluster` that ended from `since` to `until`: every
/// user's for root and Slurm's operators, the caller's own for others.
pub fn run(
    ctx: &Context,
    by: GroupBy,
    (since, until): (DateTime<FixedOffset>, DateTime<FixedOffset>),
    cluster: Option<&str>,
    out: &mut Out,
) -> Result<Exit, Stop> {
    let uid = crate::sys::euid();
    let q = ended::Query {
        since,
        until,
        everyone: crate::slurm::db::sees_every_job(uid),
        uid,
        cluster: cluster.map(str::to_string),
        jobs_per_call: ended::JOBS_PER_CALL,
    };
    let r = collect::collect(
        by,
        &q,
        &ctx.cfg.spool_dir,
        &ctx.rules,
        &mut ended::run_sacct,
    )
    .map_err(|e| fail(Exit::Failed, e))?;
    match ctx.format {
        Format::Json => out.json(&render::json(&r))?,
        Format::Csv => out.text(&render::csv(&r))?,
        Format::Text => out.text(&render::text(&r))?,
    }
    Ok(Exit::Ok)
}
