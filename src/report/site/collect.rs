//! Gathering the site report's jobs: the summaries stored in Slurm's database first, the spool
//! for each finished job the database has no summary of (one job directory opened per such
//! job, never a scan), and the whole spool only where the database cannot be read at all.

use std::path::Path;

use chrono::DateTime;

use super::{GroupBy, JobFacts, Owner, SiteReport, spool_facts};
use crate::report::classes::{self, ClassRules};
use crate::report::listing::{self, Filter};
use crate::report::stored::{Stored, StoredError};
use crate::report::{LoadError, Summary, load_job};
use crate::slurm::ended::{self, Query, Row};

/// What one of Slurm's rows gave.
enum Found {
    Facts(JobFacts),
    NoSummary,
    Damaged(String),
}

struct Entry {
    job: u32,
    owner: Owner,
    state: String,
    time_limit_seconds: Option<f64>,
    found: Found,
}

fn entry(row: Row) -> Entry {
    let found = match Stored::decode(&row.admin_comment) {
        Ok(st) => Found::Facts(JobFacts::from_stored(&st).with_state(&row.state)),
        Err(StoredError::Absent) => Found::NoSummary,
        Err(e) => Found::Damaged(e.to_string()),
    };
    Entry {
        job: row.job,
        owner: row.owner,
        state: row.state,
        time_limit_seconds: row.time_limit_seconds,
        found,
    }
}

/// The site report of `by` for the query: from Slurm's database through `run` (one `sacct`
/// with its arguments, each line handed on: [`ended::run_sacct`]), the spool at `spool` for what
/// the database lacks, classes of spool jobs under `rules`. `Err` only where nothing can be
/// shown: the database cannot be read and the rows need it (`--by account` or `partition`).
pub fn collect(
    by: GroupBy,
    q: &Query,
    spool: &Path,
    rules: &ClassRules,
    run: &mut ended::Sacct,
) -> Result<SiteReport, String> {
    let mut r = SiteReport::new(by, q.since, q.until);
    r.scope = scope(q);
    let mut damaged = 0;
    let mut first_damage = None;
    let mut take = |entries: Vec<Entry>| {
        for e in entries {
            let facts = match e.found {
                Found::Facts(f) => f,
                found => {
                    if let Found::Damaged(why) = found {
                        damaged += 1;
                        first_damage.get_or_insert(format!("job {}: {why}", e.job));
                    }
                    match load_job(spool, e.job) {
                        Ok(j) if !j.records.is_empty() => {
                            spool_facts(Summary::from_records(&j.records), rules)
                                .with_state(&e.state)
                        }
                        Err(LoadError::Denied(..)) => {
                            r.add_without_figures(&e.owner, true);
                            continue;
                        }
                        _ => {
                            r.add_without_figures(&e.owner, false);
                            continue;
                        }
                    }
                }
            };
            let facts = with_time_over(facts, &e.state, e.time_limit_seconds, rules);
            r.add(&e.owner, &facts);
        }
    };
    match ended::jobs(q, run, &mut |row| Some(entry(row)), &mut take) {
        Ok(calls) => r.sacct_calls = calls,
        Err(e) if by == GroupBy::User => {
            let mut r = SiteReport::new(by, q.since, q.until);
            r.scope = scope(q);
            r.notes.push(format!(
                "Slurm's database could not be read ({e}): the jobs are those of the spool alone"
            ));
            from_spool_alone(&mut r, q, spool, rules);
            r.finish();
            return Ok(r);
        }
        Err(e) => {
            return Err(format!(
                "--by {} needs Slurm's database, which could not be read: {e}",
                by.name()
            ));
        }
    }
    if let Some(first) = first_damage {
        r.notes.push(format!(
            "{damaged} stored summary(ies) could not be read and were taken from the spool where it had them ({first})"
        ));
    }
    r.finish();
    Ok(r)
}

/// `time-over`, which only Slurm's database can tell (the records do not carry the time
/// limit): a job that completed far under its time limit.
fn with_time_over(
    mut f: JobFacts,
    state: &str,
    limit: Option<f64>,
    rules: &ClassRules,
) -> JobFacts {
    let completed = state.split_whitespace().next() == Some("COMPLETED");
    let over =
        limit.is_some_and(|limit| completed && classes::time_over(f.elapsed_seconds, limit, rules));
    if over && !f.classes.iter().any(|t| t == "time-over") {
        f.classes.push("time-over".into());
    }
    f
}

/// Whose jobs the report holds, for people.
fn scope(q: &Query) -> String {
    if q.everyone {
        "every user's jobs".into()
    } else {
        format!(
            "your own jobs ({})",
            crate::sys::user_name(q.uid).unwrap_or_else(|| format!("uid {}", q.uid))
        )
    }
}

/// Every job of the spool that ended in the period (the caller's own unless `q.everyone`), by
/// user: what `--by user` can still say without Slurm's database.
fn from_spool_alone(r: &mut SiteReport, q: &Query, spool: &Path, rules: &ClassRules) {
    let filter = Filter {
        user: (!q.everyone).then(|| q.uid.to_string()),
        since: Some(q.since),
    };
    let scan = match listing::scan_with(spool, &filter, rules) {
        Ok(s) => s,
        Err(e) => {
            r.notes.push(format!(
                "the spool could not be read either: {}: {e}",
                spool.display()
            ));
            return;
        }
    };
    for (_, s) in scan.jobs {
        let ended = s
            .end
            .as_deref()
            .and_then(|e| DateTime::parse_from_rfc3339(e).ok());
        if ended.is_some_and(|e| e >= q.until) {
            continue;
        }
        let owner = Owner {
            user: s.user.clone(),
            ..Owner::default()
        };
        r.add(&owner, &spool_facts(s, rules));
    }
}
