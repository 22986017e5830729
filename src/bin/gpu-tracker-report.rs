//! `gpu-tracker-report`: reads the records the Slurm plugin wrote and prints a job's summary,
//! the merged records as JSON, a one-line-per-job listing, or purges old records.
//!
//! It needs no privileges and is not setuid: it shows what the file permissions let the caller
//! read (a user's own jobs; root: every job).

use std::path::Path;
use std::process::ExitCode;

use gpu_tracker::config::Config;
use gpu_tracker::report::args::{Args, parse_spec};
use gpu_tracker::report::array::{self, ArraySummary};
use gpu_tracker::report::classes::ClassRules;
use gpu_tracker::report::epilog::{self, Outcome};
use gpu_tracker::report::listing::{self, Filter};
use gpu_tracker::report::settings::{self, Places};
use gpu_tracker::report::sizing::Sizing;
use gpu_tracker::report::stored::{Stored, StoredError};
use gpu_tracker::report::story;
use gpu_tracker::report::text::{TextOptions, render};
use gpu_tracker::report::{self, JobRecords, LoadError, Problem, Summary};
use gpu_tracker::report::{slurmctl, slurmdb};
use gpu_tracker::slurmconf;
use gpu_tracker::step::record;
use gpu_tracker::units::{MAX_AGE_DAYS, checked_days, within};

/// Exit status: everything shown.
const OK: u8 = 0;
/// Prints like `print!`, with every character that could steer a terminal (escape sequences,
/// invisible reordering) replaced: records hold text that users chose.
macro_rules! say {
    ($($t:tt)*) => {
        print!("{}", record::terminal_safe(&format!($($t)*)))
    };
}

/// [`say!`] with a newline.
macro_rules! sayln {
    ($($t:tt)*) => {
        println!("{}", record::terminal_safe(&format!($($t)*)))
    };
}

/// `eprintln!` through the same filter as [`say!`].
macro_rules! warnln {
    ($($t:tt)*) => {
        eprintln!("{}", record::terminal_safe(&format!($($t)*)))
    };
}

/// Prints JSON with the characters [`say!`] filters written as `\\u` escapes (the same JSON).
fn say_json(json: &str) {
    print!("{}", record::json_terminal_safe(json));
}

/// Exit status: the spool or settings could not be used, or a purge left something behind.
const FAILED: u8 = 1;
/// Exit status: bad command line.
const USAGE: u8 = 2;
/// Exit status: no such job (neither in the spool nor known to Slurm).
const UNKNOWN_JOB: u8 = 3;
/// Exit status: Slurm knows the job, but neither the spool nor Slurm's database has its records.
const NOT_TRACKED: u8 = 4;
/// Exit status: some record is incomplete (the step runs, or was killed before its final
/// record); what there is was shown.
const INCOMPLETE: u8 = 5;
/// Exit status: some record is corrupt; the readable ones were shown.
const CORRUPT: u8 = 6;
/// Exit status: some record is from a newer gpu-tracker; the readable ones were shown.
const FUTURE_SCHEMA: u8 = 7;
/// Exit status: the job's records exist but are not readable by the caller.
const DENIED: u8 = 8;
/// Exit status: Slurm has the job, but it has not started (pending), so nothing is recorded yet.
const NOT_STARTED: u8 = 9;

fn main() -> ExitCode {
    // Run for another user (sudo, from the EpilogSlurmctld): nothing of the caller's
    // environment is taken, not even for parsing the arguments.
    epilog::fix_environment_for_another_user(std::env::args_os());
    let args: Args = match gpu_tracker::cli::parse_or_exit("gpu-tracker-report") {
        Ok(a) => a,
        Err(code) => return code,
    };
    ExitCode::from(run(&args).unwrap_or_else(|(code, msg)| {
        warnln!("gpu-tracker-report: {msg}");
        code
    }))
}

type Failure = (u8, String);

/// The settings, and where the spool they name came from (for people).
struct Site {
    cfg: Config,
    spool_origin: String,
}

/// Finds the settings as Slurm hands them to the plugin ([`settings::find`]); each thing that
/// could not be used on the way is noted on stderr.
fn settings(args: &Args) -> Result<Site, Failure> {
    let found = settings::find(&Places::from_env(args.config.clone()))
        .map_err(|e| (FAILED, e.to_string()))?;
    for n in &found.notes {
        warnln!("gpu-tracker-report: note: {n}");
    }
    let mut spool_origin = found.spool_origin();
    let mut cfg = found.config;
    if let Some(s) = &args.spool {
        cfg.spool_dir = s.clone();
        spool_origin = "given with --spool or GPU_TRACKER_SPOOL".into();
    }
    // Each cluster has its own directory in the spool: from here on spool_dir is this one's.
    let cluster = match &args.cluster {
        Some(c) => slurmconf::cluster_dir_name(Some(c)),
        None => slurmconf::this_cluster_dir(),
    };
    cfg.spool_dir = cfg.spool_dir.join(cluster);
    Ok(Site { cfg, spool_origin })
}

fn run(args: &Args) -> Result<u8, Failure> {
    if let Some(code) = advice(args)? {
        return Ok(code);
    }
    let site = settings(args)?;
    if args.purge {
        return purge(&site.cfg, args.older_than);
    }
    if let Some(id) = args.store_admin_comment {
        return store_in_database(&site.cfg, id);
    }
    if let Some(by) = &args.by {
        return site_report(&site.cfg, args, by);
    }
    if args.format == "csv" {
        return Err((USAGE, "-f csv is for the site report (--by)".into()));
    }
    match &args.job {
        Some(spec) => show_job(&site, args, spec),
        None => list(&site.cfg, args),
    }
}

/// The failure for a job with no records in the spool and no summary in Slurm's database:
/// where it was looked for (the spool and how its settings were found), what the database
/// said (`db`), and what the user can do. A job that has records elsewhere (another spool, a
/// user Slurm hides jobs from) must not be told it was not tracked.
/// The advice commands (`--advise`, `--advice`, and those the submission runs); `None` for
/// any other.
fn advice(args: &Args) -> Result<Option<u8>, Failure> {
    use gpu_tracker::report::advise::run;
    if let Some(fields) = &args.advise_submission {
        return Ok(Some(run::submission(fields)));
    }
    if args.advise_refresh {
        return Ok(Some(run::refresh()));
    }
    if let Some(v) = &args.advice {
        sayln!("{}", run::set_advice(v).map_err(|e| (FAILED, e))?);
        return Ok(Some(OK));
    }
    let Some(arg) = &args.advise else {
        return Ok(None);
    };
    let (code, text) = run::advise(arg, args.format == "json").map_err(|e| (FAILED, e))?;
    if args.format == "json" {
        say_json(&text);
    } else {
        say!("{text}");
    }
    Ok(Some(code))
}

fn not_found(spec: &str, spool: &Path, spool_origin: &str, db: &str) -> Failure {
    let looked = format!("{} ({spool_origin})", spool.display());
    match slurmctl::knows(spec) {
        Ok(true) => match slurmctl::not_started(spec) {
            Some(why) => (
                NOT_STARTED,
                format!(
                    "job {spec} has not started yet ({why}): its records are written once its steps start"
                ),
            ),
            None => (
                NOT_TRACKED,
                format!(
                    "job {spec}: no gpu-tracker records of it in {looked}, and {db}. Check that it \
                     was submitted with --gpu-track (or that this site tracks every job); if it \
                     was, ask your administrator where its records are kept"
                ),
            ),
        },
        Ok(false) => (
            UNKNOWN_JOB,
            format!(
                "unknown job {spec}: Slurm does not show it to you (scontrol, sacct) and there \
                 are no records of it in {looked}. If it is your job, ask your administrator"
            ),
        ),
        Err(why) => (
            UNKNOWN_JOB,
            format!(
                "no records of job {spec} in {looked}, and Slurm could not be asked whether it \
                 ran ({why})"
            ),
        ),
    }
}

/// `--store-admin-comment`: the job's summary into Slurm's database, if the spool has records
/// of the job Slurm names ([`epilog`]).
fn store_in_database(cfg: &Config, job_id: u32) -> Result<u8, Failure> {
    let whose = || epilog::whose(job_id);
    let stored = epilog::store_job(cfg, &cfg.spool_dir, job_id, whose);
    match stored.map_err(|e| (FAILED, format!("{e}: nothing stored")))? {
        Outcome::Nothing(why) => {
            sayln!("gpu-tracker-report: {why}: nothing stored");
            Ok(NOT_TRACKED)
        }
        Outcome::Stored {
            job,
            bytes,
            complete,
            left_out,
        } => {
            sayln!(
                "gpu-tracker-report: stored the summary of job {job} in Slurm's database ({bytes} bytes{}{})",
                if complete {
                    ""
                } else {
                    "; some records were not final"
                },
                if left_out > 0 {
                    format!("; {left_out} record(s) of another job with this id left out")
                } else {
                    String::new()
                }
            );
            Ok(OK)
        }
    }
}

/// A job whose records are not in the spool, from the summary stored in Slurm's database.
/// `Ok(Err(why))` when the database has none, or could not be asked: `why` says which, for
/// people.
fn show_stored(site: &Site, args: &Args, job: &str) -> Result<Result<u8, String>, Failure> {
    let rows = match slurmdb::fetch_all(job) {
        Ok(rows) => rows,
        Err(e) => {
            return Ok(Err(format!("Slurm's database could not be asked ({e})")));
        }
    };
    // An array's own id: sacct lists every task, each with its stored summary.
    if let Some((a, notes)) = job
        .parse()
        .ok()
        .and_then(|id| array::db::from_rows(id, &rows, &Sizing::of(&site.cfg.advise)))
    {
        let mut a = a;
        if let Some(t) = a.tasks.first() {
            // Asked apart: a name may hold newlines and the delimiter.
            let name = slurmdb::fetch_name(&format!("{}_{}", a.array_job_id, t.task_id));
            a.name = name
                .filter(|n| !n.is_empty())
                .map(|n| record::clean_text(&n, 100));
        }
        show_array_summary(args, &a, &notes);
        return Ok(Ok(if a.incomplete > 0 { INCOMPLETE } else { OK }));
    }
    let Some(db) = slurmdb::the_job(job, rows) else {
        return Ok(Err(format!("sacct shows no job {job} to you")));
    };
    let stored = match Stored::decode(&db.admin_comment) {
        Ok(s) if s.job == db.job && s.array == db.array => s,
        Ok(s) => {
            let other = slurmdb::job_ref(s.job, s.array);
            return Err((
                CORRUPT,
                format!("job {job}: Slurm's database holds job {other}'s summary under it"),
            ));
        }
        Err(StoredError::Absent) => {
            return Ok(Err(
                "Slurm's database has no gpu-tracker summary of it".to_string()
            ));
        }
        Err(e) => return Err((CORRUPT, format!("job {job}: Slurm's database holds {e}"))),
    };
    let name = slurmdb::fetch_name(&slurmdb::job_ref(db.job, db.array));
    let summary = stored.to_summary(&db.user, db.uid, name.as_deref());
    if args.format == "json" {
        let doc = serde_json::json!({
            "schema": report::JOB_SCHEMA,
            "schema_version": report::JOB_SCHEMA_VERSION,
            "summary": summary,
            "records": [],
            "problems": [],
        });
        say_json(&format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        ));
    } else {
        let o = TextOptions {
            ram: args.ru,
            time: args.tu,
            tasks: false,
        };
        say!("{}", render(&summary, &[], &o));
    }
    Ok(Ok(if summary.complete { OK } else { INCOMPLETE }))
}

fn show_job(site: &Site, args: &Args, spec_text: &str) -> Result<u8, Failure> {
    let spec = parse_spec(spec_text).map_err(|m| (USAGE, m))?;
    let root = &site.cfg.spool_dir;
    // Not in the spool: the summary kept in Slurm's database, where there is one.
    let elsewhere = |job: &str| -> Result<u8, Failure> {
        let db = match spec.step {
            Some(_) => "Slurm's database was not asked (it keeps a job's summary, not a step's)"
                .to_string(),
            None => match show_stored(site, args, job)? {
                Ok(code) => return Ok(code),
                Err(why) => why,
            },
        };
        Err(not_found(job, root, &site.spool_origin, &db))
    };
    let whole = args.timeline.is_none() && args.events.is_none() && args.plot.is_none();
    if let (Some(j), None, true) = (spec.job, &spec.step, whole) {
        // An array's own id is also one task's job id: alone, it means the whole array.
        if array::find::is_array(root, j)
            .map_err(|e| (FAILED, format!("{}: {e}", root.display())))?
        {
            return show_array(site, args, j);
        }
    }
    let job_id = match (spec.job, spec.array) {
        (Some(j), _) => j,
        (None, Some((a, t))) => {
            match listing::find_array_task(root, a, t)
                .map_err(|e| (FAILED, format!("{}: {e}", root.display())))?
            {
                Some(j) => j,
                None => return elsewhere(&format!("{a}_{t}")),
            }
        }
        (None, None) => return Err((USAGE, "no job given".into())),
    };
    let max = site.cfg.max_summary_records as usize;
    let mut records: JobRecords = match report::load_job_limited(root, job_id, max) {
        Ok(r) => r,
        Err(LoadError::NoRecords(..)) => return elsewhere(&job_id.to_string()),
        Err(e @ LoadError::Denied(..)) => return Err((DENIED, e.to_string())),
        Err(e) => return Err((FAILED, e.to_string())),
    };
    if records.records.is_empty() && records.problems.is_empty() {
        // The plugin makes the directory when tracking starts and writes the first record just
        // after, before the step's tasks start.
        return Err((
            INCOMPLETE,
            format!(
                "job {job_id}: tracking started but no record is written yet (the step is starting, or was killed before writing it)"
            ),
        ));
    }
    if let Some(st) = &spec.step {
        records = records.only_step(st);
        if records.records.is_empty() && records.problems.is_empty() {
            return Err((
                NOT_TRACKED,
                format!("job {job_id} has no record of step {st}"),
            ));
        }
    }
    let mut summary = records.summary(spec.step.as_deref());
    summary.set_co2(site.cfg.co2_grams_per_kwh);
    summary.set_classes(&ClassRules::from_config(&site.cfg));
    let recs = &records.records;
    let has_story = recs.iter().any(|r| r.timeline.is_some());
    if (args.timeline.is_some() || args.events.is_some() || args.plot.is_some()) && !has_story {
        return Err((
            NOT_TRACKED,
            format!(
                "job {job_id}: its records have no timeline (written by an earlier gpu-tracker, \
                 or no sample was taken)"
            ),
        ));
    }
    if let Some(f) = &args.timeline {
        say!(
            "{}",
            if f == "json" {
                story::timeline_json(job_id, recs)
            } else {
                story::timeline_csv(recs)
            }
        );
    } else if let Some(f) = &args.events {
        say!(
            "{}",
            if f == "json" {
                story::events_json(job_id, recs)
            } else {
                story::events_csv(recs)
            }
        );
    } else if let Some(path) = &args.plot {
        let title = format!(
            "job {job_id}{} ({}): memory, CPU and GPUs over time",
            summary
                .name
                .as_deref()
                .map_or_else(String::new, |n| format!(" {n}")),
            summary.user
        );
        report::plot::draw(&story::plot_data(recs, &title), path)
            .map_err(|e| (FAILED, e.to_string()))?;
        sayln!(
            "gpu-tracker-report: drew job {job_id} to {}",
            path.display()
        );
    } else if args.format == "json" {
        say_json(&records.to_json(&summary));
    } else if records.records.is_empty() {
        sayln!("gpu-tracker: job {job_id}: no readable record");
        for p in &records.problems {
            sayln!("Note:          {}", p.message());
        }
    } else {
        let o = TextOptions {
            ram: args.ru,
            time: args.tu,
            tasks: args.tasks,
        };
        say!("{}", render(&summary, &records.problems, &o));
    }
    let code = problems_code(&records.problems);
    for p in &records.problems {
        warnln!("gpu-tracker-report: job {job_id}: {}", p.message());
    }
    Ok(code)
}

/// The exit status the problems of a job's records call for: the highest.
fn problems_code(problems: &[Problem]) -> u8 {
    problems
        .iter()
        .map(|p| match p {
            Problem::Incomplete { .. } => INCOMPLETE,
            Problem::Corrupt { .. } | Problem::Unreadable { .. } => CORRUPT,
            Problem::FutureVersion { .. } => FUTURE_SCHEMA,
        })
        .max()
        .unwrap_or(OK)
}

/// Prints an array's summary as `--format` asks, with `notes` on what could not be used.
fn show_array_summary(args: &Args, a: &ArraySummary, notes: &[String]) {
    if args.format == "json" {
        say_json(&a.to_json(notes));
    } else {
        let o = TextOptions {
            ram: args.ru,
            time: args.tu,
            tasks: args.tasks,
        };
        say!("{}", array::text::render(a, notes, &o));
    }
}

/// `gpu-tracker-report ARRAYID`: the array summarised over its tasks in the spool.
fn show_array(site: &Site, args: &Args, array_id: u32) -> Result<u8, Failure> {
    let root = &site.cfg.spool_dir;
    let loaded = array::find::load_array(root, array_id)
        .map_err(|e| (FAILED, format!("{}: {e}", root.display())))?;
    let mut code = OK;
    let mut notes = Vec::new();
    for (id, e) in &loaded.skipped {
        code = code.max(match e {
            LoadError::Denied(..) => DENIED,
            LoadError::Refused(..) => CORRUPT,
            _ => FAILED,
        });
        notes.push(format!("task job {id}: {e}"));
    }
    let mut summaries = Vec::new();
    for t in &loaded.tasks {
        let mut s = Summary::from_records(&t.records);
        s.set_co2(site.cfg.co2_grams_per_kwh);
        s.set_classes(&ClassRules::from_config(&site.cfg));
        summaries.push(s);
        code = code.max(problems_code(&t.problems));
        notes.extend(
            t.problems
                .iter()
                .map(|p| format!("task job {}: {}", t.job_id, p.message())),
        );
    }
    if summaries.is_empty() {
        return Err((
            code.max(FAILED),
            format!(
                "array {array_id}: no task could be read: {}",
                notes.join("; ")
            ),
        ));
    }
    let a = ArraySummary::of(array_id, &summaries, &Sizing::of(&site.cfg.advise));
    show_array_summary(args, &a, &notes);
    for n in &notes {
        warnln!("gpu-tracker-report: array {array_id}: {n}");
    }
    if loaded.unreadable > 0 && gpu_tracker::sys::euid() == 0 {
        warnln!(
            "gpu-tracker-report: {} job directories could not be read",
            loaded.unreadable
        );
    }
    Ok(code)
}

/// `--by user|account|partition`: the site report (`gpu_tracker::report::site`).
fn site_report(cfg: &Config, args: &Args, by: &str) -> Result<u8, Failure> {
    use gpu_tracker::report::site::{GroupBy, collect, db, render};
    let by = GroupBy::parse(by).map_err(|m| (USAGE, m))?;
    let until = args
        .until
        .unwrap_or_else(|| chrono::Local::now().fixed_offset());
    let since = args.since.unwrap_or(until - chrono::TimeDelta::days(7));
    if since >= until {
        return Err((USAGE, "--since must be before --until".into()));
    }
    let uid = gpu_tracker::sys::euid();
    let q = db::Query {
        since,
        until,
        everyone: db::sees_every_job(uid),
        uid,
        cluster: args.cluster.clone(),
        jobs_per_call: db::JOBS_PER_CALL,
    };
    let rules = ClassRules::from_config(cfg);
    let r = collect::collect(by, &q, &cfg.spool_dir, &rules, &mut db::run_sacct)
        .map_err(|e| (FAILED, e))?;
    match args.format.as_str() {
        "json" => say_json(&render::json(&r)),
        "csv" => say!("{}", render::csv(&r)),
        _ => say!("{}", render::text(&r)),
    }
    Ok(OK)
}

fn list(cfg: &Config, args: &Args) -> Result<u8, Failure> {
    let filter = Filter {
        user: if args.all {
            None
        } else {
            // Without --user: your own jobs, by uid.
            Some(
                args.user
                    .clone()
                    .unwrap_or_else(|| gpu_tracker::sys::euid().to_string()),
            )
        },
        since: args.since,
    };
    let root = &cfg.spool_dir;
    let scan = listing::scan_with(root, &filter, &ClassRules::from_config(cfg))
        .map_err(|e| (FAILED, format!("{}: {e}", root.display())))?;
    if args.format == "json" {
        let docs: Vec<serde_json::Value> = scan
            .jobs
            .iter()
            .map(|(_, s)| serde_json::to_value(s).unwrap_or_default())
            .collect();
        sayln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gpu-tracker/job-list",
                "schema_version": gpu_tracker::report::JOB_SCHEMA_VERSION,
                "jobs": docs,
            }))
            .unwrap_or_default()
        );
    } else {
        sayln!("{}", listing::header());
        for (j, s) in &scan.jobs {
            let incomplete = j
                .problems
                .iter()
                .any(|p| matches!(p, Problem::Incomplete { .. }));
            sayln!("{}", listing::line(s, incomplete));
        }
    }
    if scan.unreadable > 0 && gpu_tracker::sys::euid() == 0 {
        warnln!(
            "gpu-tracker-report: {} job directories could not be read",
            scan.unreadable
        );
    }
    Ok(OK)
}

fn purge(cfg: &Config, older_than: Option<f64>) -> Result<u8, Failure> {
    // Both are checked where they are read (the command line, the settings file); checked again
    // here, as the age must become a Duration without a panic.
    let most = f64::from(MAX_AGE_DAYS);
    let days = match older_than {
        Some(d) if within(d, 0.0, most) => d,
        Some(d) => {
            return Err((
                USAGE,
                format!(
                    "--older-than {d:?}: must be a number of days from 0 to {MAX_AGE_DAYS} (100 years)"
                ),
            ));
        }
        None if within(cfg.retention_days, 0.0, most) => cfg.retention_days,
        None => {
            return Err((
                FAILED,
                format!(
                    "`retention_days` must be from 0 (keep for ever) to {MAX_AGE_DAYS} days (100 years), not {:?}",
                    cfg.retention_days
                ),
            ));
        }
    };
    if days == 0.0 && older_than.is_none() {
        sayln!("gpu-tracker-report: retention_days is 0: records are kept for ever");
        return Ok(OK);
    }
    let age = checked_days(days).ok_or_else(|| (FAILED, format!("{days:?} days: too long")))?;
    let p = listing::purge(&cfg.spool_dir, age)
        .map_err(|e| (FAILED, format!("{}: {e}", cfg.spool_dir.display())))?;
    sayln!(
        "gpu-tracker-report: removed the records of {} job(s) older than {days} days, kept {}",
        p.removed.len(),
        p.kept
    );
    for e in &p.errors {
        warnln!("gpu-tracker-report: {e}");
    }
    Ok(if p.errors.is_empty() { OK } else { FAILED })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_refuses_ages_it_cannot_represent_instead_of_panicking() {
        let cfg = Config {
            spool_dir: "/nonexistent/gpu-tracker-spool".into(),
            ..Config::default()
        };
        let (code, msg) = purge(&cfg, Some(1e300)).unwrap_err();
        assert_eq!(code, USAGE, "{msg}");
        assert!(msg.contains("36525"), "{msg}");
        let (code, _) = purge(&cfg, Some(f64::NAN)).unwrap_err();
        assert_eq!(code, USAGE);
        let huge = Config {
            retention_days: 1e308,
            ..cfg.clone()
        };
        let (code, msg) = purge(&huge, None).unwrap_err();
        assert_eq!(code, FAILED, "{msg}");
        assert!(
            msg.contains("retention_days") && msg.contains("36525"),
            "{msg}"
        );
        // In range, the purge itself runs: here it fails on the missing spool, not on the age.
        let (code, msg) = purge(&cfg, Some(36525.0)).unwrap_err();
        assert_eq!(code, FAILED, "{msg}");
        assert!(msg.contains("/nonexistent/gpu-tracker-spool"), "{msg}");
    }
}
