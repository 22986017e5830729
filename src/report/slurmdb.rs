//! Slurm's database through Slurm's own commands: `sacctmgr` stores a job's summary in its
//! `AdminComment` (which only Slurm's operators and administrators may change), `sacct` reads
//! it back under Slurm's access rules. Each command runs with a deadline, so a slurmdbd that
//! does not answer never holds the caller.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `sacct` or `sacctmgr` may take.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `cmd` (stdin closed) for at most `deadline`; its stdout when it exits 0, else what it
/// said on stderr (or that it timed out).
pub fn run(cmd: &mut Command, deadline: Duration) -> Result<String, String> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    // Drain both pipes on threads of their own, so a chatty command never blocks on a full pipe.
    let drain = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = p {
                let _ = p.take(1 << 20).read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let until = Instant::now() + deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{name} did not answer within {} s",
                    deadline.as_secs()
                ));
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        // One line: the command's lines joined.
        let lines: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let said = lines.join("; ");
        Err(format!(
            "{name} failed ({status}){}",
            if said.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::step::record::clean_text(&said, 300))
            }
        ))
    }
}

/// Slurm's id of a job for `sacct -j` and `sacctmgr ... jobid=`: `A_T` for an array task (the
/// raw id of an array's first task is the array's, which would name every task), else the id.
pub fn job_ref(job_id: u32, array: Option<(u32, u32)>) -> String {
    match array {
        Some((a, t)) => format!("{a}_{t}"),
        None => job_id.to_string(),
    }
}

/// Stores `text` as the job's `AdminComment` (`sacctmgr -i modify job`).
pub fn store(job: &str, text: &str) -> Result<(), String> {
    let out = run(
        Command::new("sacctmgr").args([
            "-i",
            "modify",
            "job",
            "where",
            &format!("jobid={job}"),
            "set",
            &format!("AdminComment={text}"),
        ]),
        COMMAND_DEADLINE,
    )?;
    // sacctmgr exits 0 with "Nothing modified" for a job the database does not have (yet).
    if out.to_ascii_lowercase().contains("nothing modified") {
        return Err(format!(
            "Slurm's database has no job {job} (yet): sacctmgr modified nothing"
        ));
    }
    Ok(())
}

/// A job as `sacct` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbJob {
    /// User id.
    pub uid: u32,
    /// User name.
    pub user: String,
    /// Job name.
    pub name: String,
    /// The `AdminComment`.
    pub admin_comment: String,
}

/// Parses one line of `sacct -n -X -P -o UID,User,AdminComment,JobName` (the job name last: it
/// may hold the delimiter).
pub fn parse_sacct_line(line: &str) -> Option<DbJob> {
    let mut f = line.splitn(4, '|');
    Some(DbJob {
        uid: f.next()?.trim().parse().ok()?,
        user: f.next()?.to_string(),
        admin_comment: f.next()?.to_string(),
        name: f.next().unwrap_or_default().to_string(),
    })
}

/// The job as Slurm's database has it; `None` when `sacct` shows no such job (or not to this
/// user: Slurm's `PrivateData` decides).
pub fn fetch(job: &str) -> Result<Option<DbJob>, String> {
    Ok(fetch_all(job)?.into_iter().next())
}

/// Every job `sacct -j job` shows: one for a job or an array task, every task for an array's
/// own id.
pub fn fetch_all(job: &str) -> Result<Vec<DbJob>, String> {
    let out = run(
        Command::new("sacct").args([
            "-n",
            "-X",
            "-P",
            "-j",
            job,
            "-o",
            "UID,User,AdminComment,JobName",
        ]),
        COMMAND_DEADLINE,
    )?;
    Ok(out.lines().filter_map(parse_sacct_line).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_lines_keep_a_job_name_with_the_delimiter() {
        assert_eq!(
            parse_sacct_line("1001|alice|gpu-tracker:1:{`job`:5}|a|b"),
            Some(DbJob {
                uid: 1001,
                user: "alice".into(),
                name: "a|b".into(),
                admin_comment: "gpu-tracker:1:{`job`:5}".into(),
            })
        );
        assert_eq!(parse_sacct_line("garbage"), None);
        assert_eq!(job_ref(7, Some((5, 2))), "5_2");
        assert_eq!(job_ref(7, None), "7");
    }

    #[test]
    fn a_command_past_its_deadline_is_stopped() {
        let t = Instant::now();
        let r = run(Command::new("sleep").arg("10"), Duration::from_millis(300));
        assert!(r.unwrap_err().contains("did not answer"));
        assert!(t.elapsed() < Duration::from_secs(5));
        let r = run(
            Command::new("sh").args(["-c", "echo no >&2; exit 3"]),
            COMMAND_DEADLINE,
        );
        assert!(r.unwrap_err().ends_with(": no"));
        let r = run(
            Command::new("sh").args(["-c", "printf 'a: error: x\\n\\nb: fatal: y\\n' >&2; exit 1"]),
            COMMAND_DEADLINE,
        );
        assert!(r.unwrap_err().ends_with(": a: error: x; b: fatal: y"));
        assert_eq!(
            run(&mut Command::new("true"), COMMAND_DEADLINE),
            Ok(String::new())
        );
    }
}
