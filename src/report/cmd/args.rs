//! The command line of `gpu-tracker-report`: its options ([`Args`]), the checks of their values
//! (`--since`, `--older-than`), and the job argument ([`parse_spec`]). Kept in the library so
//! that the whole of it can be exercised without running the program: [`check`] reads a command
//! line the way the program does, without reading any file or spool.

use std::ffi::OsString;
use std::path::PathBuf;

use chrono::{
    DateTime, Datelike, FixedOffset, Local, NaiveDate, NaiveDateTime, TimeDelta, TimeZone,
};
use clap::Parser;

use crate::units::{FIRST_SINCE_YEAR, LAST_SINCE_YEAR, MAX_AGE_DAYS, MemUnit, TimeUnit};

/// Shows what a Slurm job used (peak memory, CPU, GPU memory and utilization, time), from the
/// records gpu-tracker's Slurm plugin wrote. With no JOB, lists your jobs (or --user's, or
/// --all) one line each.
///
/// The spool is the one the plugin's settings name, found as Slurm hands them to the plugin:
/// --config, else GPU_TRACKER_CONFIG, else the config= of the plugstack.conf line that loads
/// the plugin (slurm.conf from SLURM_CONF or /etc/slurm/slurm.conf; its PlugStackConfig, else
/// the plugstack.conf beside it, and the files that includes), else
/// /etc/slurm/gpu-tracker.toml, else the built-in defaults.
///
/// Exit status: 0 shown; 1 error; 2 usage; 3 unknown job; 4 no records of a job Slurm knows; 5
/// incomplete records; 6 corrupt record; 7 record from a newer gpu-tracker; 8 not readable by
/// you; 9 not started yet. When several apply the highest is returned, and the readable records
/// are still shown.
#[derive(Debug, Parser)]
#[command(name = "gpu-tracker-report", version)]
pub struct Args {
    /// Job: JOBID, JOBID.STEP (STEP: batch, extern, interactive or a number), ARRAYID_TASK,
    /// or ARRAYID alone: every task of the array summarised together.
    pub job: Option<String>,
    /// Output: text (the summary) or json (the merged records, see RECORD.md); with --by also
    /// csv.
    #[arg(short = 'f', long = "format", default_value = "text", value_parser = ["text", "json", "csv"])]
    pub format: String,
    /// Memory unit: bytes, kilobytes, megabytes, gigabytes or terabytes (decimal, as in
    /// gpu-tracker); default: MiB/GiB as Slurm's --mem.
    #[arg(long = "ru", value_name = "RAM_UNIT")]
    pub ru: Option<MemUnit>,
    /// Time unit: seconds, minutes, hours or days; default: HH:MM:SS.
    #[arg(long = "tu", value_name = "TIME_UNIT")]
    pub tu: Option<TimeUnit>,
    /// Add a row per task under each step.
    #[arg(long = "tasks")]
    pub tasks: bool,
    /// Print the job's timeline instead of the summary: memory, CPU and each GPU over time
    /// (each bucket's min, mean and max) and the pressure stall where the kernel keeps it, as
    /// csv or json.
    #[arg(long = "timeline", value_name = "FORMAT", value_parser = ["csv", "json"],
          requires = "job", conflicts_with_all = ["events", "plot"])]
    pub timeline: Option<String>,
    /// Print the job's events instead of the summary (task starts and exits, OOM kills, memory
    /// limit hits, lost GPUs, phase marks, alerts), as csv or json.
    #[arg(long = "events", value_name = "FORMAT", value_parser = ["csv", "json"],
          requires = "job", conflicts_with = "plot")]
    pub events: Option<String>,
    /// Draw memory, CPU, the pressure stall (where the kernel keeps it) and each GPU's memory
    /// and utilization over time, phases and events marked, one line per node, to FILE (.svg
    /// or .png), instead of printing the summary.
    #[arg(long = "plot", value_name = "FILE", requires = "job")]
    pub plot: Option<PathBuf>,
    /// List the jobs of this user (name or uid).
    #[arg(
        short = 'u',
        long = "user",
        value_name = "NAME",
        conflicts_with = "job"
    )]
    pub user: Option<String>,
    /// List jobs that ended at or after DATE: YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (years 1970 to
    /// 9999), or an age of at most 100 years such as 7d, 12h, 30m.
    #[arg(
        short = 'S',
        long = "since",
        value_name = "DATE",
        conflicts_with = "job",
        value_parser = parse_since
    )]
    pub since: Option<DateTime<FixedOffset>>,
    /// Site report: one row per user, account or partition, worst first (idle GPU-hours,
    /// then memory asked for and not used), over the jobs that ended from --since (default 7
    /// days ago) to --until (default now), from the summaries kept in Slurm's database, and the
    /// spool for jobs it has none of. Root and Slurm's operators see every user's jobs, others
    /// their own. As text, csv or json.
    #[arg(long = "by", value_name = "GROUP", value_parser = ["user", "account", "partition"],
          conflicts_with_all = ["job", "user", "all", "purge", "store_admin_comment", "older_than"])]
    pub by: Option<String>,
    /// With --by: jobs that ended before DATE (the forms of --since); default now.
    #[arg(short = 'U', long = "until", value_name = "DATE", requires = "by", value_parser = parse_since)]
    pub until: Option<DateTime<FixedOffset>>,
    /// List every user's jobs (root sees all; others see only what they may read).
    #[arg(short = 'a', long = "all", conflicts_with_all = ["job", "user"])]
    pub all: bool,
    /// Remove records older than the site's retention_days (or --older-than). Run as the
    /// spool's owner (root), from cron or the Epilog.
    #[arg(long = "purge", conflicts_with_all = ["job", "user", "all", "since"])]
    pub purge: bool,
    /// With --purge: age in days, from 0 to 36525 (100 years).
    #[arg(long = "older-than", value_name = "DAYS", requires = "purge", value_parser = parse_days)]
    pub older_than: Option<f64>,
    /// Check this node, for admins: whether slurmstepd here will load the plugin and track
    /// jobs (the plugstack line, the plugin's Slurm release and glibc, slurmd's restart, the
    /// settings, the spool, cgroups, GPUs against gres.conf, the live directory), one line a
    /// check: ok, warn or FAIL with the fix. Exit status 1 when a check failed. Run as root,
    /// with SLURM_CONF where slurm.conf is not /etc/slurm/slurm.conf (or slurmd's -f). The
    /// settings are the plugin's, found as the plugin finds them: --spool and GPU_TRACKER_SPOOL
    /// are left aside. As text or json.
    #[arg(long = "check-node", alias = "check",
          conflicts_with_all = ["job", "user", "all", "purge", "by", "store_admin_comment",
                                "advise", "config", "cluster"])]
    pub check_node: bool,
    /// Settings file of the plugin (default: GPU_TRACKER_CONFIG, else the one Slurm's
    /// plugstack.conf names: see --help).
    #[arg(long = "config", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Spool directory (overrides the settings file's spool_dir).
    #[arg(long = "spool", value_name = "DIR", env = "GPU_TRACKER_SPOOL")]
    pub spool: Option<PathBuf>,
    /// Cluster whose records to read (default: ClusterName in slurm.conf, found through
    /// SLURM_CONF or /etc/slurm/slurm.conf).
    #[arg(long = "cluster", value_name = "NAME")]
    pub cluster: Option<String>,
    /// Store the job's summary in Slurm's database (its AdminComment, through sacctmgr), for
    /// reading it later where the spool is out of reach. Run by the site's EpilogSlurmctld as
    /// Slurm's user (slurm/epilog-slurmctld), through sudo where that is not root: it takes the
    /// job id and nothing else (not --config, --spool or GPU_TRACKER_SPOOL). Stores only the
    /// records of the job Slurm names (its user's, begun after it started); waits up to 30 s
    /// for records still being finished.
    #[arg(long = "store-admin-comment", value_name = "JOBID", exclusive = true)]
    pub store_admin_comment: Option<u32>,
    /// Advice from your own finished jobs: what your tracked jobs named NAME (or run from the
    /// batch script SCRIPT) used over the last days against what they asked for, the request
    /// that would have fitted them, and the table of them; the note sbatch prints at
    /// submission, whole (docs/REPORT.md). As text or json.
    #[arg(long = "advise", value_name = "NAME|SCRIPT",
          conflicts_with_all = ["job", "user", "all", "purge", "by", "store_admin_comment"])]
    pub advise: Option<String>,
    /// The note at submission, on or off for you for good (GPU_TRACKER_ADVICE=off silences one
    /// submission).
    #[arg(long = "advice", value_name = "on|off", value_parser = ["on", "off"], exclusive = true)]
    pub advice: Option<String>,
    /// Run by slurm/cli_filter.lua at each submission: the note for the submission's options,
    /// given as NAME=VALUE arguments.
    #[arg(long = "advise-submission", hide = true, exclusive = true, num_args = 0..,
          allow_hyphen_values = true, value_name = "NAME=VALUE")]
    pub advise_submission: Option<Vec<String>>,
    /// Run by --advise-submission: asks Slurm's database for the caller's history.
    #[arg(long = "advise-refresh", hide = true, exclusive = true)]
    pub advise_refresh: bool,
}

/// Reads the command line `argv` (the program's name first) as `gpu-tracker-report` does, job
/// argument included, without acting on it: nothing is read from the spool or the settings
/// file. A job argument that is not a job id gives an error of kind
/// [`clap::error::ErrorKind::InvalidValue`] holding [`parse_spec`]'s message (the program
/// itself reports that one when it looks the job up, with the same exit status 2).
pub fn check(argv: &[OsString]) -> Result<Args, clap::Error> {
    let args = Args::try_parse_from(argv)?;
    if let Some(job) = &args.job {
        parse_spec(job)
            .map_err(|m| clap::Error::raw(clap::error::ErrorKind::InvalidValue, m + "\n"))?;
    }
    Ok(args)
}

/// A job argument: `JOBID`, `JOBID.STEP`, `ARRAY_TASK`, `ARRAY_TASK.STEP`.
#[derive(Debug, PartialEq)]
pub struct JobSpec {
    /// The job id, when given as one.
    pub job: Option<u32>,
    /// The array job id and task id, when given as `ARRAY_TASK`.
    pub array: Option<(u32, u32)>,
    /// The step: `batch`, `extern`, `interactive` or a number.
    pub step: Option<String>,
}

/// Reads a job argument; the error is the one line the program prints.
pub fn parse_spec(s: &str) -> Result<JobSpec, String> {
    let bad = || format!("{s:?} is not a job id (JOBID, JOBID.STEP or ARRAYID_TASK)");
    let (id, step) = match s.split_once('.') {
        Some((i, st)) => {
            let ok = matches!(st, "batch" | "extern" | "interactive")
                || (!st.is_empty() && st.chars().all(|c| c.is_ascii_digit()));
            if !ok {
                return Err(bad());
            }
            (i, Some(st.to_string()))
        }
        None => (s, None),
    };
    let num = |t: &str| t.parse::<u32>().map_err(|_| bad());
    match id.split_once('_') {
        Some((a, t)) => Ok(JobSpec {
            job: None,
            array: Some((num(a)?, num(t)?)),
            step,
        }),
        None => Ok(JobSpec {
            job: Some(num(id)?),
            array: None,
            step,
        }),
    }
}

/// `--older-than`: days, from 0 to [`MAX_AGE_DAYS`].
pub fn parse_days(s: &str) -> Result<f64, String> {
    crate::cli::number_within(
        s,
        0.0,
        f64::from(MAX_AGE_DAYS),
        &format!("must be a number of days from 0 to {MAX_AGE_DAYS} (100 years)"),
    )
}

/// `--since`: a date, a date and time (local), or an age (`7d`, `12h`, `30m`). Ages are whole
/// units up to [`MAX_AGE_DAYS`]; dates are from [`FIRST_SINCE_YEAR`] to [`LAST_SINCE_YEAR`]. The
/// error is what clap prints after `invalid value '...' for '--since <DATE>': `.
pub fn parse_since(s: &str) -> Result<DateTime<FixedOffset>, String> {
    let now = Local::now().fixed_offset();
    let age_range = || {
        format!(
            "an age must be a whole number of days, hours or minutes (7d, 12h, 30m) from 0 to {MAX_AGE_DAYS} days (100 years)"
        )
    };
    if let Some(age) = parse_age(s) {
        let age = age.ok_or_else(age_range)?;
        return now.checked_sub_signed(age).ok_or_else(age_range);
    }
    let date_range =
        || format!("a date must be from {FIRST_SINCE_YEAR}-01-01 to {LAST_SINCE_YEAR}-12-31");
    let in_range = |year: i32| (FIRST_SINCE_YEAR..=LAST_SINCE_YEAR).contains(&year);
    // The year is checked on the date as written, before it is placed in the local time zone.
    let local = |n: NaiveDateTime| {
        if !in_range(n.year()) {
            return Some(Err(date_range()));
        }
        Local
            .from_local_datetime(&n)
            .earliest()
            .map(|t| Ok(t.fixed_offset()))
    };
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0).and_then(local) {
            return t;
        }
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Some(t) = NaiveDateTime::parse_from_str(s, f).ok().and_then(local) {
            return t;
        }
    }
    match DateTime::parse_from_rfc3339(s) {
        Ok(t) if in_range(t.year()) => Ok(t),
        Ok(_) => Err(date_range()),
        Err(_) => {
            Err("expected YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], or an age like 7d, 12h or 30m".into())
        }
    }
}

/// An age for `--since` (a number ending in d, h or m): `None` when `s` is not one, `Some(None)`
/// when it is one but not a whole number of units within [`MAX_AGE_DAYS`].
pub fn parse_age(s: &str) -> Option<Option<TimeDelta>> {
    let unit: i64 = match s.chars().last()? {
        'd' => 86_400,
        'h' => 3_600,
        'm' => 60,
        _ => return None,
    };
    let n = &s[..s.len() - 1];
    // Meant as an age (1e30h, -5d, nand), whether or not it is a usable one.
    n.parse::<f64>().ok()?;
    let most = i64::from(MAX_AGE_DAYS) * 86_400 / unit;
    Some(
        n.parse::<i64>()
            .ok()
            .filter(|v| (0..=most).contains(v))
            .and_then(|v| TimeDelta::try_seconds(v * unit)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_specs() {
        assert_eq!(
            parse_spec("12").unwrap(),
            JobSpec {
                job: Some(12),
                array: None,
                step: None
            }
        );
        assert_eq!(
            parse_spec("12.batch").unwrap().step.as_deref(),
            Some("batch")
        );
        assert_eq!(parse_spec("7_3.0").unwrap().array, Some((7, 3)));
        for bad in ["", "x", "12.", "12.foo", "1_", "_2", "12.0.1", "-1"] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn since_dates_and_ages() {
        assert!(parse_since("2026-11-01").is_ok());
        assert!(parse_since("2026-11-01T10:30").is_ok());
        let week = parse_since("7d").unwrap();
        let age = Local::now().fixed_offset() - week;
        assert_eq!(age.num_days(), 7);
        assert!(parse_since("last week").is_err());
    }

    #[test]
    fn since_ages_are_whole_units_up_to_a_hundred_years() {
        for s in [
            "99999999d",
            "1e30h",
            "9223372036854775807h",
            "9999999999999m",
            "-5d",
            "36526d",
            "876601h",
            "52596001m",
            "1.5d",
            "nand",
        ] {
            let e = parse_since(s).unwrap_err();
            assert!(e.contains("36525 days (100 years)"), "{s}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let now = Local::now().fixed_offset();
        for (s, days) in [("36525d", 36525), ("876600h", 36525), ("52596000m", 36525)] {
            let age = now - parse_since(s).unwrap();
            assert!((age.num_days() - days).abs() <= 1, "{s}: {age}");
        }
        assert!(parse_since("0d").is_ok());
    }

    #[test]
    fn since_dates_are_from_1970_to_9999() {
        for s in [
            "0001-01-01",
            "1969-12-31",
            "-262143-01-01",
            "0000-01-01T00:00:00Z",
            "1969-12-31T23:59:59+00:00",
        ] {
            let e = parse_since(s).unwrap_err();
            assert!(e.contains("1970-01-01 to 9999-12-31"), "{s}: {e}");
        }
        for s in [
            "1970-01-01",
            "2999-01-01",
            "9999-12-31",
            "9999-12-31T23:59:59+14:00",
        ] {
            assert!(parse_since(s).is_ok(), "{s}");
        }
    }

    #[test]
    fn older_than_is_a_usage_error_outside_0_to_36525_days() {
        for v in ["1e300", "nan", "inf", "-1", "36526", "1e19"] {
            let e = Args::try_parse_from([
                "gpu-tracker-report".to_string(),
                "--purge".into(),
                format!("--older-than={v}"),
            ])
            .unwrap_err();
            assert_eq!(e.exit_code(), 2, "{v}");
            let first = e.to_string().lines().next().unwrap().to_string();
            assert!(
                first.contains("from 0 to 36525 (100 years)"),
                "{v}: {first}"
            );
        }
        for (v, days) in [("0", 0.0), ("0.5", 0.5), ("36525", 36525.0)] {
            let a =
                Args::try_parse_from(["gpu-tracker-report", "--purge", "--older-than", v]).unwrap();
            assert_eq!(a.older_than, Some(days));
        }
    }

    #[test]
    fn check_reads_the_whole_command_line_job_included() {
        let argv = |items: &[&str]| -> Vec<OsString> {
            std::iter::once("gpu-tracker-report")
                .chain(items.iter().copied())
                .map(OsString::from)
                .collect()
        };
        for ok in [
            &["123"][..],
            &["45_7.0"],
            &["--format", "json", "9.batch"],
            &["--since", "7d", "-a"],
            &["--purge", "--older-than", "30"],
        ] {
            assert!(check(&argv(ok)).is_ok(), "{ok:?}");
        }
        let e = check(&argv(&["../../etc"])).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("is not a job id"), "{e}");
        let e = check(&argv(&["--since", "7d", "12"])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        // --store-admin-comment, run as root through sudo: the job id and nothing else.
        let store = check(&argv(&["--store-admin-comment", "12"])).unwrap();
        assert_eq!(store.store_admin_comment, Some(12));
        assert!(check(&argv(&["--store-admin-comment=12"])).is_ok());
        for bad in [
            &["--store-admin-comment", "12", "--config", "/etc/shadow"][..],
            &["--config", "/etc/shadow", "--store-admin-comment", "12"],
            &["--store-admin-comment", "12", "--spool", "/tmp"],
            &["--store-admin-comment", "12", "--cluster", "c"],
            &["--store-admin-comment", "12", "--format", "json"],
            &["--store-admin-comment", "12", "13"],
            &["--store-admin-comment", "12_1"],
            &["--store-admin-comment", "-1"],
        ] {
            let e = check(&argv(bad)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }
}
