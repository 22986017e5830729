//! `gpu-tracker-report` with no job: one line per job of the spool (the caller's, `--user`'s
//! or, `--all`, everyone's the caller may read), or the job list as JSON.

use chrono::{DateTime, FixedOffset};
use serde::Serialize;

use super::context::Context;
use super::exit::{Exit, Stop, fail};
use super::mode::Format;
use super::out::Out;
use crate::report::listing::{self, Filter};
use crate::report::{JOB_SCHEMA_VERSION, Problem, Summary};

/// The JSON document of the listing (`--format json`), documented in `slurm/RECORD.md`.
#[derive(Debug, Serialize)]
pub struct JobList<'a> {
    /// Always [`JOB_LIST_SCHEMA`].
    pub schema: &'static str,
    /// The version of the job summaries' format ([`JOB_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Each job's summary, oldest id first.
    pub jobs: Vec<&'a Summary>,
}

/// Value of [`JobList::schema`].
pub const JOB_LIST_SCHEMA: &str = "gpu-tracker/job-list";

/// Lists the jobs of `user` (`None`: everyone's) that ended at or after `since`.
pub fn run(
    ctx: &Context,
    user: Option<&str>,
    since: Option<DateTime<FixedOffset>>,
    out: &mut Out,
) -> Result<Exit, Stop> {
    let filter = Filter {
        user: user.map(str::to_string),
        since,
    };
    let root = &ctx.cfg.spool_dir;
    let scan = listing::scan_with(root, &filter, &ctx.rules)
        .map_err(|e| fail(Exit::Failed, format!("{}: {e}", root.display())))?;
    if ctx.format == Format::Json {
        let list = JobList {
            schema: JOB_LIST_SCHEMA,
            schema_version: JOB_SCHEMA_VERSION,
            jobs: scan.jobs.iter().map(|(_, s)| s).collect(),
        };
        let mut json = serde_json::to_string_pretty(&list).unwrap_or_default();
        json.push('\n');
        out.json(&json)?;
    } else {
        out.line(&listing::header())?;
        for (j, s) in &scan.jobs {
            let incomplete = j
                .problems
                .iter()
                .any(|p| matches!(p, Problem::Incomplete { .. }));
            out.line(&listing::line(s, incomplete))?;
        }
    }
    if scan.unreadable > 0 && crate::sys::euid() == 0 {
        out.warn(&format!(
            "{} job directories could not be read",
            scan.unreadable
        ));
    }
    Ok(Exit::Ok)
}
