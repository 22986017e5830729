//! Finished jobs from Slurm's database for the site report: one `sacct -X -P` over the whole
//! period, its lines streamed, with the period cut in halves only where slurmdbd refuses it
//! whole (a site's `MaxQueryTimeRange`, or a result over slurmdbd's size limit).
//!
//! Who sees what is Slurm's business: root and Slurm's operators and administrators ask for
//! every user's jobs (`-a`), anyone else for their own (`-u`), and slurmdbd's `PrivateData`
//! still applies to what it answers, as for `sacct` itself.

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Local};

use super::command;

/// What `sacct` is asked for, in this order: the comment last, since another tool's comment
/// may hold the delimiter.
pub const FIELDS: &str =
    "JobIDRaw,UID,User,Account,Partition,State,Start,End,TimelimitRaw,AdminComment";

/// How long one `sacct` over a period may take: a year of a large site is millions of lines.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(600);

/// The shortest piece a period is cut into.
pub const MIN_WINDOW_SECONDS: i64 = 3600;

/// The first piece of a period asked for: a day.
pub const FIRST_WINDOW_SECONDS: i64 = 86_400;

/// About how many jobs one `sacct` call should list: `sacct` then stays near 50 MB.
pub const JOBS_PER_CALL: u64 = 20_000;

/// Runs one `sacct` with the arguments given, handing on each line of its output
/// ([`run_sacct`]; tests give a fake).
pub type Sacct<'a> = dyn FnMut(&[String], &mut dyn FnMut(&str)) -> Result<(), String> + 'a;

/// What to ask Slurm's database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Jobs that ended at or after this time ...
    pub since: DateTime<FixedOffset>,
    /// ... and before this one.
    pub until: DateTime<FixedOffset>,
    /// Every user's jobs (`-a`), or only those of `uid`.
    pub everyone: bool,
    /// The caller.
    pub uid: u32,
    /// The cluster (`-M`), where not the local one.
    pub cluster: Option<String>,
    /// About how many jobs one `sacct` call should list ([`JOBS_PER_CALL`]).
    pub jobs_per_call: u64,
}

/// Who ran a job, as Slurm's database has it: the keys of the groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// User name (uid as digits where the database has no name).
    pub user: String,
    /// Account.
    pub account: String,
    /// Partition (a job submitted to several: the one it ran in).
    pub partition: String,
}

/// One finished job as `sacct` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Slurm's job id (an array task's own).
    pub job: u32,
    /// Who ran it, and where.
    pub owner: Owner,
    /// Slurm's state (`COMPLETED`, `FAILED`, `CANCELLED by 0`, ...).
    pub state: String,
    /// Start time, Unix seconds; `None`: never started.
    pub start: Option<i64>,
    /// End time, Unix seconds; `None`: not ended.
    pub end: Option<i64>,
    /// The time limit, seconds; `None`: none (`UNLIMITED`) or not known.
    pub time_limit_seconds: Option<f64>,
    /// The job's `AdminComment`.
    pub admin_comment: String,
}

/// Parses one line of `sacct -n -X -P -o` [`FIELDS`] run with `SLURM_TIME_FORMAT=%s`. A user
/// name the database does not have is the uid.
pub fn parse_row(line: &str) -> Option<Row> {
    let mut f = line.splitn(10, '|');
    let job = f.next()?.trim().parse().ok()?;
    let uid = f.next()?.trim();
    let user = f.next()?.trim();
    let account = f.next()?.trim().to_string();
    let partition = f.next()?.trim().to_string();
    let state = f.next()?.trim().to_string();
    let time = |t: &str| t.trim().parse::<i64>().ok().filter(|&t| t > 0);
    let start = time(f.next()?);
    let end = time(f.next()?);
    // Minutes, or `UNLIMITED`, `Partition_Limit`, empty.
    let time_limit_seconds = f
        .next()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(|m| m as f64 * 60.0);
    let admin_comment = f.next().unwrap_or_default().to_string();
    let user = if user.is_empty() { uid } else { user };
    Some(Row {
        job,
        owner: Owner {
            user: crate::step::record::clean_text(user, 64),
            account: crate::step::record::clean_text(&account, 64),
            partition: crate::step::record::clean_text(&partition, 64),
        },
        state,
        start,
        end,
        time_limit_seconds,
        admin_comment,
    })
}

/// Whether a job of this row counts in [`from`, `to`): it ran and ended then. Slurm lists every
/// job that ran at any time in the period; each is counted once, in the period of its end.
pub fn ended_within(row: &Row, from: i64, to: i64) -> bool {
    row.start.is_some() && row.end.is_some_and(|e| e >= from && e < to)
}

/// Slurm's time, as `sacct -S/-E` reads it (local time).
fn slurm_time(t: i64) -> String {
    DateTime::from_timestamp(t, 0)
        .map(|d| {
            d.with_timezone(&Local)
                .format("%Y-%m-%dT%H:%M:%S")
                .to_string()
        })
        .unwrap_or_default()
}

/// `sacct`'s arguments for the jobs that ran in [`from`, `to`).
pub fn sacct_args(q: &Query, from: i64, to: i64) -> Vec<String> {
    let mut a: Vec<String> = ["-n", "-X", "-P", "-o", FIELDS, "-S"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.push(slurm_time(from));
    a.push("-E".into());
    a.push(slurm_time(to));
    if q.everyone {
        a.push("-a".into());
    } else {
        a.push("-u".into());
        a.push(q.uid.to_string());
    }
    if let Some(c) = &q.cluster {
        a.push("-M".into());
        a.push(c.clone());
    }
    a
}

/// Whether slurmdbd refused a period for its length or its size, rather than for a fault: then
/// its halves are asked instead.
pub fn refused_as_too_large(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["too wide", "exceeds size limit", "too large", "too many"]
        .iter()
        .any(|w| m.contains(w))
}

/// The jobs that ended in the query's period, a piece of the period at a time: each line
/// `sacct` gives is turned by `convert` as it comes (so nothing sits in memory as text), and a
/// piece's jobs go to `take` once its call succeeded. Returns the number of `sacct` calls.
///
/// `sacct` holds every job of its answer in memory at once (about 2.4 kB a job on Slurm
/// 22.05, whatever fields are asked for: slurmdbd sends whole job records), so the period is
/// asked for in pieces of about [`Query::jobs_per_call`] jobs: the first piece is a day (or the
/// whole period when shorter), each next one as long as the previous one's jobs per second say,
/// but at most twice as long as it; a quiet week takes three calls, a quiet year nine, a busy
/// period as many as its jobs need. A sudden burst after a quiet stretch can still make one
/// piece hold more than the jobs wanted (at most what twice its predecessor's time holds). A
/// piece slurmdbd
/// refuses whole (a site's `MaxQueryTimeRange`, a result over its size limit) is asked for in
/// halves, down to [`MIN_WINDOW_SECONDS`]. `run` runs one `sacct` with its arguments, handing
/// on each line (the real one is [`run_sacct`]).
pub fn jobs<T>(
    q: &Query,
    run: &mut Sacct,
    convert: &mut dyn FnMut(Row) -> Option<T>,
    take: &mut dyn FnMut(Vec<T>),
) -> Result<u32, String> {
    let (since, until) = (q.since.timestamp(), q.until.timestamp());
    let mut calls = 0;
    let mut from = since;
    let mut span = FIRST_WINDOW_SECONDS.min(until - since).max(1);
    // Half the longest piece slurmdbd refused: no later piece is longer.
    let mut cap = i64::MAX;
    while from < until {
        let to = until.min(from.saturating_add(span));
        calls += 1;
        let mut got = Vec::new();
        let mut lines = 0u64;
        let r = run(&sacct_args(q, from, to), &mut |line| {
            lines += 1;
            if let Some(row) = parse_row(line).filter(|r| ended_within(r, from, to)) {
                got.extend(convert(row));
            }
        });
        match r {
            Ok(()) => {
                take(got);
                // The next piece: as long as this one's pace says for the jobs wanted, but at
                // most twice as long (a quiet stretch says little of what follows).
                let per_second = lines as f64 / (to - from).max(1) as f64;
                let paced = if per_second > 0.0 {
                    (q.jobs_per_call as f64 / per_second).min(i64::MAX as f64 / 4.0) as i64
                } else {
                    i64::MAX
                };
                span = paced
                    .min((to - from).saturating_mul(2))
                    .clamp(MIN_WINDOW_SECONDS, cap.max(MIN_WINDOW_SECONDS));
                from = to;
            }
            Err(e) if refused_as_too_large(&e) && to - from >= 2 * MIN_WINDOW_SECONDS => {
                cap = (to - from) / 2;
                span = cap;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(calls)
}

/// Runs `sacct` with `args`, its times as Unix seconds, for at most [`QUERY_DEADLINE`].
pub fn run_sacct(args: &[String], line: &mut dyn FnMut(&str)) -> Result<(), String> {
    command::each_line(
        Command::new("sacct")
            .args(args)
            .env("SLURM_TIME_FORMAT", "%s"),
        QUERY_DEADLINE,
        line,
    )
}
