//! What Slurm's controller says of a job, through `scontrol` and `squeue`: whether it knows
//! the job, why it has not started, and whose it is and when it started. Each command runs
//! through [`command::run`], with a deadline, so a controller that does not answer never holds
//! the report; each asks only for fields the job's user cannot write (no name, comment or
//! path), so no text of theirs can pass for an answer.

use std::process::Command;
use std::time::Duration;

use super::command;

/// How long one `scontrol` or `squeue` may take.
pub const CONTROLLER_DEADLINE: Duration = Duration::from_secs(10);

/// Whether Slurm knows `id` (a job id or `A_T`): asks `scontrol` (the jobs the controller still
/// holds), then `sacct`. `Err(why)` when neither shows it and `sacct` gave no answer (it could
/// not be run, or failed): then nobody can say that the job does not exist.
pub fn knows(id: &str) -> Result<bool, String> {
    let scontrol = command::run(
        Command::new("scontrol").args(["-o", "show", "job", id]),
        CONTROLLER_DEADLINE,
    );
    if scontrol.is_ok_and(|out| !out.trim().is_empty()) {
        return Ok(true);
    }
    let sacct = command::run(
        Command::new("sacct").args(["-n", "-X", "-o", "JobID", "-j", id]),
        command::COMMAND_DEADLINE,
    )?;
    Ok(!sacct.trim().is_empty())
}

/// Why a job Slurm still holds has not started: `Some("PENDING, Resources")` while it is
/// pending or its nodes are being configured, `None` otherwise or when `squeue` cannot say.
pub fn not_started(id: &str) -> Option<String> {
    let out = command::run(
        Command::new("squeue").args(["-h", "-j", id, "-o", "%T %r"]),
        CONTROLLER_DEADLINE,
    )
    .ok()?;
    parse_not_started(&out)
}

/// [`not_started`] from `squeue -o "%T %r"`'s answer: the state and the reason only.
pub fn parse_not_started(out: &str) -> Option<String> {
    let mut words = out.lines().next()?.split_whitespace();
    let state = words.next()?;
    if !matches!(state, "PENDING" | "CONFIGURING") {
        return None;
    }
    Some(match words.next() {
        Some(reason) if reason != "None" => format!("{state}, {reason}"),
        _ => state.to_string(),
    })
}

/// Whose a job is and when it started, as Slurm gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStart {
    /// The job's user id.
    pub uid: u32,
    /// When it started, Unix seconds.
    pub start: i64,
}

/// Variable `name` of the environment slurmctld gives EpilogSlurmctld (`get` reads one), taken
/// only when `SLURM_SCRIPT_CONTEXT` is `epilog_slurmctld` and `SLURM_JOB_ID` is `job_id`.
fn epilog_var(job_id: u32, get: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    if get("SLURM_SCRIPT_CONTEXT")?.as_str() != "epilog_slurmctld"
        || get("SLURM_JOB_ID")?.trim().parse() != Ok(job_id)
    {
        return None;
    }
    get(name).map(|v| v.trim().to_string())
}

/// The job's user id from EpilogSlurmctld's environment: `SLURM_JOB_UID` ([`epilog_var`]).
pub fn uid_from_env(job_id: u32, get: impl Fn(&str) -> Option<String>) -> Option<u32> {
    epilog_var(job_id, &get, "SLURM_JOB_UID")?.parse().ok()
}

/// The job's user and start time from EpilogSlurmctld's environment ([`epilog_var`]):
/// `SLURM_JOB_UID` and `SLURM_JOB_START_TIME` (Slurm 23.02 and later; 22.05 gives no start
/// time). `None` when either is missing.
pub fn start_from_env(job_id: u32, get: impl Fn(&str) -> Option<String>) -> Option<JobStart> {
    Some(JobStart {
        uid: epilog_var(job_id, &get, "SLURM_JOB_UID")?.parse().ok()?,
        start: epilog_var(job_id, &get, "SLURM_JOB_START_TIME")?
            .parse()
            .ok()
            .filter(|&t| t > 0)?,
    })
}

/// The job's time limit as `squeue -h -j <id> -o %l` prints it (`1-00:00:00`, `UNLIMITED`),
/// for at most `deadline`. Where the environment has no `PATH` (a prolog's), the system's
/// directories are searched. The plugin's prolog is its only caller.
#[cfg_attr(not(feature = "spank"), allow(dead_code))]
pub fn time_limit(job_id: u32, deadline: Duration) -> Result<String, String> {
    let mut cmd = Command::new("squeue");
    cmd.args(["-h", "-j", &job_id.to_string(), "-o", "%l"]);
    if std::env::var_os("PATH").is_none() {
        cmd.env("PATH", "/usr/bin:/bin:/usr/local/bin");
    }
    let out = command::run(&mut cmd, deadline)?;
    match out.lines().next().map(str::trim) {
        Some(first) if !first.is_empty() => Ok(first.to_string()),
        _ => Err("no answer".into()),
    }
}

/// `squeue`'s fields for [`job_start`]: the job's own id, user id, start time.
pub const START_FIELDS: &str = "%A|%U|%S";

/// The job's user and start time as the controller holds them (`squeue -t all`, in any state:
/// EpilogSlurmctld runs while the controller still holds the ended job). `Ok(None)` when it
/// does not show the job, or shows no start time.
pub fn job_start(job_id: u32) -> Result<Option<JobStart>, String> {
    let id = job_id.to_string();
    let out = command::run(
        Command::new("squeue")
            .args(["-h", "-t", "all", "-j", &id, "-o", START_FIELDS])
            .env("SLURM_TIME_FORMAT", "%s"),
        CONTROLLER_DEADLINE,
    )?;
    Ok(parse_job_start(job_id, &out))
}

/// [`job_start`] from `squeue -o` [`START_FIELDS`]'s answer, times as Unix seconds: the row of
/// `job_id` itself (an array's id lists every task, each under its own id). `None` without one
/// row of it (two would be an answer split in lines that cannot be trusted).
pub fn parse_job_start(job_id: u32, out: &str) -> Option<JobStart> {
    let mut rows = out.lines().filter_map(|l| {
        let mut f = l.split('|').map(str::trim);
        let (Some(id), Some(uid), Some(start), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            return None;
        };
        (id.parse() == Ok(job_id)).then_some((uid, start))
    });
    let (uid, start) = rows.next()?;
    if rows.next().is_some() {
        return None;
    }
    Some(JobStart {
        uid: uid.parse().ok()?,
        start: start.parse().ok().filter(|&t| t > 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pending_or_configuring_job_has_not_started() {
        assert_eq!(
            parse_not_started("PENDING Resources\n").as_deref(),
            Some("PENDING, Resources")
        );
        assert_eq!(
            parse_not_started("CONFIGURING None\n").as_deref(),
            Some("CONFIGURING")
        );
        assert_eq!(parse_not_started("RUNNING None\n"), None);
        assert_eq!(parse_not_started(""), None);
    }

    #[test]
    fn a_command_that_hangs_is_stopped_at_the_deadline() {
        // What `knows` and `not_started` run their commands through.
        let t = std::time::Instant::now();
        let r = command::run(Command::new("sleep").arg("10"), Duration::from_millis(300));
        assert!(r.unwrap_err().contains("did not answer"));
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_job_start_comes_from_epilog_slurmctld_s_environment_or_squeue() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let all = &[
            ("SLURM_SCRIPT_CONTEXT", "epilog_slurmctld"),
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_UID", "1001"),
            ("SLURM_JOB_START_TIME", "1790000000"),
        ];
        let want = JobStart {
            uid: 1001,
            start: 1_790_000_000,
        };
        assert_eq!(start_from_env(42, env(all)), Some(want));
        // Another job's variables, another context, or Slurm 22.05 (no start time): none.
        assert_eq!(start_from_env(43, env(all)), None);
        assert_eq!(start_from_env(42, env(&all[1..])), None);
        assert_eq!(start_from_env(42, env(&all[..3])), None);
        assert_eq!(uid_from_env(42, env(&all[..3])), Some(1001));
        assert_eq!(uid_from_env(43, env(&all[..3])), None);
        // squeue: the job's own row; an array's other tasks are not it.
        let out = "42|1001|1790000000\n43|1001|1790000005\n";
        assert_eq!(parse_job_start(42, out), Some(want));
        assert_eq!(parse_job_start(44, out), None);
        assert_eq!(parse_job_start(42, "42|1001|N/A\n"), None);
        assert_eq!(parse_job_start(42, "42|1001|1790000000\n42|0|1\n"), None);
        assert_eq!(parse_job_start(42, "42|1001|1790000000|x\n"), None);
        assert_eq!(parse_job_start(42, " 42 | 1001 |1790000000\n"), Some(want));
    }
}
