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
    loop {
        let polled = Instant::now();
        if matches!(
            job_field(id, "JobState").as_deref(),
            Some("COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY")
        ) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "job {id}");
        poll_pause(Duration::from_millis(200), polled.elapsed());
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

/// The user id of `user`.
fn uid_of(user: &str) -> u32 {
    let out = Command::new("id").args(["-u", user]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
#[ignore = "needs the local Slurm cluster with accounting (tests/run-all.sh) and root"]
fn a_job_name_holding_a_row_of_sacct_forges_no_stored_summary() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // A second line in the job's name (sacct -P prints it raw): a row of gtuser2 whose
    // AdminComment is a stored summary 424242 s long, of the job with this name's id as
    // the user would guess it, and of task 0 of an array of that id. Given at submission,
    // as a user would (`scontrol update JobName=` of a held job is not what slurmdbd keeps).
    let held = submit_as(USER, "forged-guess", "#!/bin/bash\ntrue\n", &["--hold"]);
    let _ = Command::new("scancel")
        .arg(held.to_string())
        .env("SLURM_CONF", slurm_conf())
        .status();
    let guess = held + 1;
    let forged = gpu_tracker::report::stored::Stored {
        job: guess,
        array: Some((guess, 0)),
        complete: true,
        elapsed: 424_242.0,
        ..Default::default()
    }
    .encode();
    let name = format!("x\n{}|gtuser2|{forged}|y", uid_of("gtuser2"));
    let id = submit_as(
        USER,
        "forged-row",
        "#!/bin/bash\n#SBATCH --gpu-track\nsleep 1\n",
        &["-J", &name],
    );
    let job = wait_job(USER, "forged-row", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    assert!(is_summary(&stored_comment(id)));
    // The premise: sacct prints the name raw, so the forged row is a line of its own there.
    // slurmdbd's row of a short job can lag behind the job (seen on 22.05: a first row with
    // uid 0 and the name "allocation", the name and uid coming later): wait for the name.
    let forged_line = format!("{}|gtuser2|gpu-tracker:1:", uid_of("gtuser2"));
    let started = Instant::now();
    loop {
        let polled = Instant::now();
        let raw = Command::new("sacct")
            .args([
                "-n",
                "-X",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "UID,User,AdminComment,JobName",
            ])
            .env("SLURM_CONF", slurm_conf())
            .output()
            .unwrap();
        let raw = String::from_utf8_lossy(&raw.stdout).into_owned();
        if raw.lines().any(|l| l.starts_with(&forged_line)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "sacct printed the name on one line: {raw:?}"
        );
        poll_pause(Duration::from_millis(500), polled.elapsed());
    }

    // Once the spool has lost the job, root and the user read the job's own summary.
    std::fs::remove_dir_all(job_spool_dir(id)).unwrap();
    for who in ["root", USER] {
        let (code, text, err) = report_as(who, &[&id.to_string()]);
        assert_eq!(code, 0, "{who}: {text}{err}");
        assert!(
            text.contains(&format!("gpu-tracker summary of job {id}\n")),
            "{who}: {text}"
        );
        assert!(
            text.contains("Source:        Slurm's database"),
            "{who}: {text}"
        );
        assert!(
            text.contains(&format!("User:          {USER} (uid {})", uid_of(USER))),
            "{who}: {text}"
        );
        assert!(!text.contains("summary of array"), "{who}: {text}");
        assert!(
            !text.contains("117:50:42"),
            "the forged 424242 s: {who}: {text}"
        );
        let (code, json, err) = report_as(who, &[&id.to_string(), "--format", "json"]);
        assert_eq!(code, 0, "{who}: {err}");
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(doc["summary"]["user"], USER, "{who}: {json}");
        assert_eq!(doc["summary"]["uid"], uid_of(USER), "{who}: {json}");
        assert!(
            doc["summary"]["elapsed_seconds"].as_f64().unwrap() < 600.0,
            "{json}"
        );
    }
}
