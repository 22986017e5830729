//! Runs Slurm's client commands (`sacct`, `sacctmgr`, `scontrol`, `squeue`) for the rest of
//! [`crate::slurm`]: each with a deadline, stdin closed and stdout streamed line by line, so a
//! controller or slurmdbd that does not answer never holds the caller, and a failure is one line
//! saying what the command printed on stderr.

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

/// Whether what a failed command printed on stderr goes to the system log instead of into the
/// error ([`send_child_stderr_to_syslog`]).
static STDERR_TO_SYSLOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, what a failed Slurm command said on stderr goes to the system log only, never
/// into an error the caller prints: for a run as root on another user's behalf (through sudo),
/// where a command's complaint may quote a file the caller could not read (Slurm's parser
/// prints the lines of a configuration it rejects).
pub fn send_child_stderr_to_syslog() {
    STDERR_TO_SYSLOG.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// One line for a command that exited with `status`: what it said on stderr, its lines joined
/// (or, after [`send_child_stderr_to_syslog`], where it went).
fn failure(name: &str, status: std::process::ExitStatus, stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let said = crate::step::record::clean_text(&lines.join("; "), 300);
    if said.is_empty() {
        format!("{name} failed ({status})")
    } else if STDERR_TO_SYSLOG.load(std::sync::atomic::Ordering::Relaxed) {
        crate::sys::syslog_line(
            "gpu-tracker-report",
            &format!("{name} failed ({status}): {said}"),
        );
        format!("{name} failed ({status}); what it printed is in the system log")
    } else {
        format!("{name} failed ({status}): {said}")
    }
}

/// The longest line [`each_line`] hands on; longer ones are cut there (a stored summary is at
/// most [`crate::report::jobstats::MAX_JS1_BYTES`], under slurmdbd's 65,535; other tools'
/// comments may be longer).
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

/// The waits between attempts: `first`, doubling up to `cap`, the last one cut so that they
/// add up to `total`. Every job's EpilogSlurmctld asks while slurmdbd lags, so asking at a
/// steady pace would multiply slurmdbd's load when it is slowest: 0.5 s, 1, 2, then every 4 s
/// asks 9 times in 20 s, where once a second asked 21 times.
pub fn retry_waits(first: Duration, cap: Duration, total: Duration) -> Vec<Duration> {
    let mut waits = Vec::new();
    let mut sum = Duration::ZERO;
    let mut next = first.min(cap);
    while sum < total && !next.is_zero() {
        let w = next.min(total - sum);
        waits.push(w);
        sum += w;
        next = (next * 2).min(cap);
    }
    waits
}

#[cfg(test)]
mod tests {
    use super::*;

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
