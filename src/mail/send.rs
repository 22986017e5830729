//! Hands the mail to the site's mailer, within a deadline.
//!
//! The mailer runs in a process group of its own: slurmctld's script runner kills MailProg's
//! whole process group once MailProg exits (`_kill_pg` after the wait in Slurm's
//! `src/common/run_command.c`, 22.05 to 26.05), which would take with it a delivery the mailer
//! left running in the background.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::message::Invocation;

/// Runs `mailer` with `inv`'s arguments and standard input; `Err` says why the mail may not
/// have gone (it could not start, exited non-zero, or ran past `deadline` and was stopped).
pub fn send(mailer: &str, inv: &Invocation, deadline: Duration) -> Result<(), String> {
    let mut child = Command::new(mailer)
        .args(&inv.args)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{mailer}: {e}"))?;
    let until = Instant::now() + deadline;
    // Written on a thread: a mailer that reads nothing must not hold us past the deadline.
    let stdin = child.stdin.take();
    let text = inv.stdin.clone();
    let writer = std::thread::spawn(move || {
        if let Some(mut p) = stdin {
            // A mailer that exits without reading all of it says so by its status.
            let _ = p.write_all(text.as_bytes());
        }
    });
    let stderr = child.stderr.take().map(|p| {
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = Vec::new();
            let _ = p.take(4096).read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{mailer} did not finish within {} s: stopped",
                    deadline.as_secs()
                ));
            }
            Err(e) => return Err(format!("{mailer}: {e}")),
        }
    };
    let _ = writer.join();
    if status.success() {
        return Ok(());
    }
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let said = crate::text::clean_text(said.trim(), 300);
    Err(format!("{mailer} failed ({status}): {said}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(stdin: &str) -> Invocation {
        Invocation {
            args: vec!["--".into(), "alice".into()],
            stdin: stdin.into(),
        }
    }

    #[test]
    fn a_mailer_that_fails_or_hangs_is_reported_within_its_deadline() {
        assert_eq!(send("/bin/true", &inv("x"), Duration::from_secs(5)), Ok(()));
        let e = send("/bin/false", &inv("x"), Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("failed"), "{e}");
        let e = send("/nonexistent/sendmail", &inv("x"), Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("/nonexistent/sendmail"), "{e}");
        // A mailer that reads nothing and never exits, with more than a pipe's worth to read.
        let t = Instant::now();
        let e = send(
            "/bin/sleep",
            &Invocation {
                args: vec!["30".into()],
                stdin: "x".repeat(1 << 20),
            },
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(e.contains("did not finish"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3));
    }
}
