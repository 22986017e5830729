//! Whole-program tests of `gpu-tracker -e`'s hold on its command: the exit status is the
//! command's, signals reach it, and a reader that goes away ends the output and nothing else.

mod common;

use common::*;
use std::process::Command;

#[test]
fn exit_status_is_the_commands() {
    let out = run(&["-e", "exit 3", "--disable-logs"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("Process completed with status code: 3"));

    let out = run(&["-e", "kill -9 $$", "--disable-logs"]);
    assert_eq!(out.status.code(), Some(137));
    let e = stderr(&out);
    assert!(
        e.contains("status code: -9") && e.contains("killed by SIGKILL"),
        "{e}"
    );

    let out = run(&["-e", "no-such-program-xyz", "--disable-logs"]);
    assert_eq!(out.status.code(), Some(127));
    // The report is still printed.
    assert!(stdout(&out).starts_with("Max RAM:\n"));
}

/// Whether the tracker `pid`'s command (`sh -c 'exec sleep ...'`) runs `sleep` yet.
fn sleeping_child(pid: u32) -> bool {
    children_of(pid).into_iter().any(|c| runs(c, "sleep"))
}

#[test]
fn sigint_reaches_the_command_and_the_report_follows() {
    use std::os::unix::process::CommandExt;
    let child = Command::new(tracker())
        .args(["-e", "sleep 30", "--disable-logs", "-f", "json"])
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Ready once the command runs `sleep`: the tracker ignores SIGINT from before the spawn,
    // and the command has its default back (restored between fork and exec).
    assert!(
        wait_for(std::time::Duration::from_secs(20), || sleeping_child(
            child.id()
        )),
        "the command never started"
    );
    // As a terminal's Ctrl-C does: to the whole foreground process group.
    let rc = Command::new("kill")
        .args(["-s", "INT", "--", &format!("-{}", child.id())])
        .status()
        .unwrap();
    assert!(rc.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let v = json(&out);
    assert!(f(&v, "/compute_time/time") < 10.0 / 3600.0);
}

#[test]
fn sigterm_to_the_tracker_is_forwarded() {
    let child = Command::new(tracker())
        .args(["-e", "sleep 30", "--disable-logs"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Ready once the command runs `sleep` and the tracker relays SIGTERM (its handler is set
    // just after the spawn).
    assert!(
        wait_for(std::time::Duration::from_secs(20), || sleeping_child(
            child.id()
        ) && catches(
            child.id(),
            15
        )),
        "the command never started, or SIGTERM is not relayed"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143));
    assert!(stderr(&out).contains("killed by SIGTERM"));
    assert!(stdout(&out).contains("Compute time:"));
}

/// `gpu-tracker ... | head -1`: a reader that goes away before the report (or `mark`'s help)
/// is written ends the output, not the program: status 0 (the command's), no panic.
#[test]
fn a_reader_that_goes_away_ends_the_output_and_nothing_else() {
    let cases: [&[&str]; 3] = [
        &["-e", "true", "-f", "json", "--disable-logs"],
        &["-e", "true"],
        &["mark", "--help"],
    ];
    for args in cases {
        let mut child = Command::new(tracker())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before anything is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if args[0] == "-e" {
            assert!(err.contains("status code: 0"), "{args:?}: {err}");
        }
    }
}
