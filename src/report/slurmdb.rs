//! Slurm's database through Slurm's own commands: `sacctmgr` stores a job's summary in its
//! `AdminComment` (which only Slurm's operators and administrators may change), `sacct` reads
//! it back under Slurm's access rules. Each command runs with a deadline, so a slurmdbd that
//! does not answer never holds the caller.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `sacct` or `sacctmgr` may take.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `cmd` (stdin closed) for at most `deadline`; its stdout (its first MiB, line by line)
/// when it exits 0, else what it said on stderr (or that it timed out).
pub fn run(cmd: &mut Command, deadline: Duration) -> Result<String, String> {
    let mut out = String::new();
    each_line(cmd, deadline, |l| {
        if out.len() < 1 << 20 {
            out.push_str(l);
            out.push('\n');
        }
    })?;
    Ok(out)
}

/// One line for a command that exited with `status`: what it said on stderr, its lines joined.
fn failure(name: &str, status: std::process::ExitStatus, stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let said = lines.join("; ");
    format!(
        "{name} failed ({status}){}",
        if said.is_empty() {
            String::new()
        } else {
            format!(": {}", crate::step::record::clean_text(&said, 300))
        }
    )
}

/// The longest line [`each_line`] hands on; longer ones are cut there (a stored summary is at
/// most [`super::stored::MAX_STORED_BYTES`]; other tools' comments may be longer).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Runs `cmd` (stdin closed) for at most `deadline`, handing each line of its stdout to `line`
/// as it comes: nothing is kept whole, so a listing of 100,000 jobs streams through in little
/// memory. `Err` with what it said on stderr when it cannot start, exits non-zero or is stopped
/// at the deadline; the lines handed on before then stand, and the caller decides what they
/// are worth.
pub fn each_line(
    cmd: &mut Command,
    deadline: Duration,
    mut line: impl FnMut(&str),
) -> Result<(), String> {
    use std::io::BufRead;
    use std::sync::mpsc;
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    let until = Instant::now() + deadline;
    let stderr = child.stderr.take().map(|p| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.take(1 << 20).read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    });
    // Lines are read on a thread of their own and come here in batches, so that the deadline
    // holds even while the command prints nothing.
    let (tx, rx) = mpsc::sync_channel::<Vec<String>>(16);
    let reader = child.stdout.take().map(|p| {
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::with_capacity(1 << 16, p);
            let mut batch = Vec::with_capacity(256);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r
                    .by_ref()
                    .take(MAX_LINE_BYTES as u64)
                    .read_until(b'\n', &mut buf)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if buf.last() != Some(&b'\n') && buf.len() >= MAX_LINE_BYTES {
                    // Cut: skip the rest of this line, a bounded piece at a time.
                    let mut rest = Vec::new();
                    loop {
                        rest.clear();
                        match r
                            .by_ref()
                            .take(MAX_LINE_BYTES as u64)
                            .read_until(b'\n', &mut rest)
                        {
                            Ok(n) if n > 0 && rest.last() != Some(&b'\n') => {}
                            _ => break,
                        }
                    }
                }
                let text = String::from_utf8_lossy(&buf);
                batch.push(text.trim_end_matches(['\n', '\r']).to_string());
                // Handed on before a read that may wait: what came is never held back.
                let full = batch.len() == 256 || r.buffer().is_empty();
                if full && tx.send(std::mem::take(&mut batch)).is_err() {
                    return;
                }
            }
            let _ = tx.send(batch);
        })
    });
    let mut late = false;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(batch) => batch.iter().for_each(|l| line(l)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                late = true;
                break;
            }
        }
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) if !late => break st,
            Ok(None) if !late && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(_) => {
                let _ = child.kill();
                let _ = child.wait();
                drop(rx);
                return Err(format!(
                    "{name} did not answer within {} s",
                    deadline.as_secs()
                ));
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    };
    if let Some(r) = reader {
        let _ = r.join();
    }
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if status.success() {
        Ok(())
    } else {
        Err(failure(&name, status, &said))
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

/// How long [`store`] waits for slurmdbd to have the job: slurmctld sends it the job's records
/// through a queue, which can lag behind a job that ended in a second on a busy controller.
pub const STORE_DB_WAIT: Duration = Duration::from_secs(20);

/// Stores `text` as the job's `AdminComment` (`sacctmgr -i modify job`), asking again every
/// second for up to [`STORE_DB_WAIT`] while the database does not have the job yet.
pub fn store(job: &str, text: &str) -> Result<(), String> {
    let until = Instant::now() + STORE_DB_WAIT;
    loop {
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
        if !out.to_ascii_lowercase().contains("nothing modified") {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(format!(
                "Slurm's database has no job {job} (after {} s): sacctmgr modified nothing",
                STORE_DB_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
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

    #[test]
    fn each_line_streams_every_line_and_stops_a_command_past_its_deadline() {
        let mut seen = Vec::new();
        let r = each_line(
            Command::new("sh").args(["-c", "seq 1 100000; printf last"]),
            COMMAND_DEADLINE,
            |l| seen.push(l.len()),
        );
        assert_eq!(r, Ok(()));
        assert_eq!(seen.len(), 100_001);
        assert_eq!(seen[99_999], 6);
        assert_eq!(seen[100_000], 4, "a last line without its newline");
        // A line longer than the bound is cut, and the next one still comes.
        let mut lens = Vec::new();
        let long = format!(
            "head -c {} /dev/zero | tr '\\0' x; echo; echo ok",
            3 * MAX_LINE_BYTES
        );
        each_line(
            Command::new("sh").args(["-c", &long]),
            COMMAND_DEADLINE,
            |l| lens.push(l.len()),
        )
        .unwrap();
        assert_eq!(lens, vec![MAX_LINE_BYTES, 2]);
        let t = Instant::now();
        let mut n = 0;
        let r = each_line(
            Command::new("sh").args(["-c", "echo one; exec sleep 10"]),
            Duration::from_millis(500),
            |_| n += 1,
        );
        assert!(r.unwrap_err().contains("did not answer"));
        assert_eq!(n, 1);
        assert!(t.elapsed() < Duration::from_secs(5));
        let r = each_line(
            Command::new("sh").args(["-c", "echo part; echo too wide >&2; exit 1"]),
            COMMAND_DEADLINE,
            |_| {},
        );
        assert!(r.unwrap_err().ends_with(": too wide"));
    }
}
