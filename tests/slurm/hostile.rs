//! What a job chooses and the plugin reads or shows: its name, its commands, its environment,
//! its paths. None of it may disturb tracking, reach a terminal raw, or fail the job.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::records::*;
use crate::support::*;

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn control_characters_a_huge_environment_and_non_utf8_paths_are_tracked_and_shown_safely() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let home = state_dir().join("jobs").join(USER);
    // A working directory, an output file and a program whose names are not UTF-8.
    let odd = OsStr::from_bytes(b"odd-\xff\xfe-\x1b[31m");
    let dir = home.join(odd);
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join(OsStr::from_bytes(b"hog-\xc3\x28"));
    std::fs::copy(&h, &prog).unwrap();
    let chown = |p: &Path| {
        assert!(
            Command::new("chown")
                .arg(format!("{USER}:"))
                .arg(p)
                .status()
                .unwrap()
                .success()
        );
    };
    chown(&dir);
    chown(&prog);
    let output = dir.join(OsStr::from_bytes(b"out-\xff-%j.txt"));
    let script = home.join("hostile.sh");
    // The step's command line holds terminal escapes (the program's own name, as `ps` shows
    // it), as does a task's process name.
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH --gpu-track=0.2\n\
         srun --gpu-track=0.2 bash -c 'exec -a \"$(printf \"evil\\033]0;t\\007\\033[2J\")\" \"$0\" --mb 22 --hold-ms 1500' \"$PROG\"\n\
         echo job-done\n",
    )
    .unwrap();
    // A huge environment: 600 variables of 1000 bytes (600 kB, within what exec allows).
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", USER, "--", "env"]);
    for i in 0..600 {
        cmd.arg(format!("GT_BIG_{i}={}", "x".repeat(1000)));
    }
    cmd.arg(OsStr::from_bytes(
        &[b"PROG=".as_slice(), prog.as_os_str().as_bytes()].concat(),
    ));
    cmd.args(["sbatch", "--parsable", "-J"])
        .arg("name\u{1b}[31m\u{7}\u{8}\r\nFAKE LINE\u{202e}")
        .arg("-D")
        .arg(&dir)
        .arg("-o")
        .arg(&output)
        .arg(&script)
        .env("SLURM_CONF", slurm_conf())
        .current_dir(&home);
    let mark = log_mark();
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let out_path = dir.join(OsStr::from_bytes(
        &[b"out-\xff-".as_slice(), format!("{id}.txt").as_bytes()].concat(),
    ));
    let started = Instant::now();
    while !matches!(
        job_field(id, "JobState").as_deref(),
        Some("COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY")
    ) {
        assert!(started.elapsed() < Duration::from_secs(300), "job {id}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(job_field(id, "JobState").as_deref(), Some("COMPLETED"));
    let recs = final_records(id, &["batch", "0"]);
    assert!(
        recs["0"].memory.peak_bytes >= 22_000_000,
        "{:?}",
        recs["0"].memory
    );
    assert_eq!(recs["0"].tasks[0].exit_code, Some(0));
    // The job's output, at its non-UTF-8 path, has the job's line and then the summary.
    let started = Instant::now();
    let text = loop {
        let t = String::from_utf8_lossy(&std::fs::read(&out_path).unwrap_or_default()).into_owned();
        if t.contains("gpu-tracker summary") || started.elapsed() > Duration::from_secs(15) {
            break t;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains("job-done"), "{text}");
    let summary = summary_of(&text);
    let raw = |c: char| c.is_control() && c != '\n' || c == '\u{202e}';
    for (who, t) in [
        ("summary", summary.to_string()),
        ("report", report_as(USER, &[&id.to_string(), "--tasks"]).1),
        ("json", report_as(USER, &[&id.to_string(), "-f", "json"]).1),
        (
            "events",
            report_as(USER, &[&id.to_string(), "--events", "csv"]).1,
        ),
        ("listing", report_as(USER, &["--since", "1h"]).1),
    ] {
        assert!(
            !t.chars().any(raw),
            "{who} holds a control character: {t:?}"
        );
        assert!(
            !t.contains("\nFAKE LINE"),
            "{who} starts a line the job chose: {t}"
        );
    }
    // Nothing in slurmd's log from the plugin about this job: nothing failed.
    let lines: Vec<String> = plugin_lines_since(mark)
        .into_iter()
        .filter(|l| l.contains(&format!("job {id}")))
        .collect();
    assert!(lines.is_empty(), "{lines:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
