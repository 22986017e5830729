//! The plugin's settings file when it cannot be used: invalid, writable by a user (or naming
//! what a user could change), missing, a FIFO or a directory. The job runs untracked, nothing
//! waits, and slurmd's log says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;

use crate::records::*;
use crate::support::*;

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_broken_settings_file_leaves_jobs_running_untracked_and_says_why() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let _restore = Restore(conf.clone(), good.clone());
    std::fs::write(&conf, format!("{good}\nspool_dri = \"/tmp\"\n")).unwrap();
    let log = state_dir().join("log/slurmd.log");
    let before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let job = run_job(
        "broken-settings",
        "#!/bin/bash\n#SBATCH --gpu-track\nsrun echo step-ran\necho batch-ran\n",
    );
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    assert!(
        job.output.contains("step-ran") && job.output.contains("batch-ran"),
        "{}",
        job.output
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(records(job.id).is_empty());
    let text = std::fs::read(&log).unwrap();
    let new = String::from_utf8_lossy(&text[before as usize..]);
    let lines: Vec<&str> = new.lines().filter(|l| l.contains("gpu-tracker:")).collect();
    // By its line: a settings error shows no text of the file.
    let at = format!(
        "line {}: an unknown key",
        format!("{good}\n").lines().count() + 1
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("settings not usable") && l.contains(&at)),
        "slurmd's log says why ({at}): {lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("spool_dri")), "{lines:?}");
}

/// Runs a tracked job while `change` holds (undone by the returned guard's drop) and returns
/// it with the slurmd log lines of the plugin written meanwhile.
fn job_with_untrusted(name: &str, change: impl FnOnce()) -> (Job, Vec<String>) {
    let log = state_dir().join("log/slurmd.log");
    let before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    change();
    let job = run_job(
        name,
        "#!/bin/bash\n#SBATCH --gpu-track\nsrun echo step-ran\necho batch-ran\n",
    );
    std::thread::sleep(Duration::from_secs(1));
    let text = std::fs::read(&log).unwrap();
    let lines = String::from_utf8_lossy(&text[before as usize..])
        .lines()
        .filter(|l| l.contains("gpu-tracker:"))
        .map(str::to_string)
        .collect();
    (job, lines)
}

struct Mode(PathBuf, u32);

impl Drop for Mode {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(self.1)).unwrap();
    }
}

fn mode_of(p: &Path) -> Mode {
    use std::os::unix::fs::PermissionsExt;
    Mode(
        p.to_path_buf(),
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777,
    )
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn settings_a_user_could_write_are_refused_and_the_job_runs_untracked() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let _restore = Restore(conf.clone(), good.clone());
    let check = |what: &str, job: &Job, lines: &[String]| {
        assert_eq!(job.state, "COMPLETED", "{what}: {}", job.output);
        assert!(
            job.output.contains("step-ran") && job.output.contains("batch-ran"),
            "{what}: {}",
            job.output
        );
        assert!(records(job.id).is_empty(), "{what}: tracked anyway");
        assert!(
            lines.iter().any(|l| l.contains("not trusted")),
            "{what}: slurmd's log says why: {lines:?}"
        );
    };
    // 1. The settings file is group-writable.
    {
        let _m = mode_of(&conf);
        let (job, lines) = job_with_untrusted("untrusted-conf", || chmod(&conf, 0o664));
        check("group-writable settings", &job, &lines);
    }
    // 2. The NVIDIA library it names is the user's file.
    let lib = state_dir()
        .join("jobs")
        .join(USER)
        .join("libnvidia-ml.so.1");
    std::fs::copy(common::fake_nvml(), &lib).unwrap();
    let uid: u32 = String::from_utf8_lossy(
        &Command::new("id")
            .args(["-u", USER])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .parse()
    .unwrap();
    std::os::unix::fs::chown(&lib, Some(uid), None).unwrap();
    std::fs::write(
        &conf,
        good.lines()
            .map(|l| {
                if l.starts_with("nvml_library") {
                    format!("nvml_library = \"{}\"", lib.display())
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let (job, lines) = job_with_untrusted("untrusted-nvml", || {});
    check("a user's NVIDIA library", &job, &lines);
    std::fs::write(&conf, &good).unwrap();
    // 3. A directory above the spool is world-writable (without the sticky bit).
    let spool_parent = state_dir().join("spool");
    {
        let _m = mode_of(&spool_parent);
        let (job, lines) = job_with_untrusted("untrusted-spool", || chmod(&spool_parent, 0o777));
        check("a world-writable directory above the spool", &job, &lines);
    }
    // Put right, jobs are tracked again.
    let job = run_job("trusted-again", "#!/bin/bash\n#SBATCH --gpu-track\ntrue\n");
    assert!(!final_records(job.id, &["batch"]).is_empty());
}

/// Puts the settings file back when dropped, whatever stands in its place.
struct SettingsBack {
    path: PathBuf,
    saved: PathBuf,
}

impl Drop for SettingsBack {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.path);
        std::fs::rename(&self.saved, &self.path).unwrap();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn settings_missing_or_unreadable_leave_jobs_running_untracked_and_say_why() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let conf = state_dir().join("gpu-tracker.toml");
    type Make = fn(&Path);
    let cases: [(&str, Make, &str); 3] = [
        ("missing", |_| {}, "is missing; tracking off"),
        (
            // A reader that opened it would wait for a writer for ever.
            "fifo",
            |p| {
                assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
            },
            "is not a regular file",
        ),
        (
            "directory",
            |p| std::fs::create_dir(p).unwrap(),
            "is not a regular file",
        ),
    ];
    for (tag, make, why) in cases {
        let back = SettingsBack {
            path: conf.clone(),
            saved: conf.with_extension("saved"),
        };
        std::fs::rename(&back.path, &back.saved).unwrap();
        make(&conf);
        let mark = log_mark();
        let name = format!("settings-{tag}");
        let started = Instant::now();
        let job = run_job(
            &name,
            "#!/bin/bash\n#SBATCH --gpu-track\nsrun echo step-ran\necho batch-ran\n",
        );
        assert_eq!(job.state, "COMPLETED", "{tag}: {}", job.output);
        assert!(
            job.output.contains("step-ran") && job.output.contains("batch-ran"),
            "{tag}: {}",
            job.output
        );
        assert!(started.elapsed() < Duration::from_secs(60), "{tag}");
        assert_node_healthy();
        std::thread::sleep(Duration::from_secs(1));
        assert!(records(job.id).is_empty(), "{tag}: untracked");
        let lines = plugin_lines_since(mark);
        assert!(
            lines.iter().any(|l| l.contains(why)),
            "{tag}: slurmd's log says why: {lines:#?}"
        );
        drop(back);
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_live_dir_that_holds_the_spool_turns_live_state_off_and_the_job_is_tracked() {
    use std::os::unix::fs::MetadataExt;
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let _restore = Restore(conf.clone(), good.clone());
    // A typo: the directory above spool_dir (as `/run` would be above mark_dir).
    let above = state_dir().join("spool");
    let looks = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.mode() & 0o7777, m.gid())
    };
    let before = (looks(&above), looks(&above.join("gpu-tracker")));
    let changed: String = good
        .lines()
        .map(|l| {
            if l.starts_with("live_dir") {
                format!("live_dir = \"{}\"\n", above.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&conf, changed).unwrap();
    let mark = log_mark();
    let job = run_job(
        "live-dir-typo",
        "#!/bin/bash\n#SBATCH --gpu-track\nsrun echo step-ran\nsleep 2\necho batch-ran\n",
    );
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    assert!(job.output.contains("step-ran") && job.output.contains("batch-ran"));
    // Tracked all the same; each record says live state was off, and why.
    let recs = final_records(job.id, &["batch", "0"]);
    for step in ["batch", "0"] {
        let faults = &recs[step].sampler.faults;
        assert!(
            faults
                .iter()
                .any(|f| f.contains("live state off") && f.contains("holds spool_dir")),
            "{step}: {faults:?}"
        );
    }
    // Nothing was written there, and its group and mode are the admin's still.
    assert_eq!((looks(&above), looks(&above.join("gpu-tracker"))), before);
    let live_files: Vec<_> = std::fs::read_dir(&above)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .collect();
    assert!(live_files.is_empty(), "{live_files:?}");
    let lines = plugin_lines_since(mark);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("live state off") && l.contains("live_dir")),
        "slurmd's log says why: {lines:#?}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn steps_past_max_step_records_are_not_recorded_and_the_summary_says_what_it_left_out() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let _restore = settings_with("max_step_records = 2\nmax_summary_records = 2\n");
    let name = "many-steps";
    let job = run_job(
        name,
        "#!/bin/bash\n#SBATCH --gpu-track\nfor i in 1 2 3 4; do srun true; done\necho all-ran\n",
    );
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    // Steps 0 and 1 and the batch step are recorded; steps 2 and 3 are not, and the job's
    // directory says so once.
    let recs = final_records(job.id, &["batch", "0", "1"]);
    let steps: Vec<&str> = recs.keys().map(String::as_str).collect();
    assert_eq!(steps, ["0", "1", "batch"], "{recs:?}");
    let note = std::fs::read_to_string(job_spool_dir(job.id).join("steps-left-out")).unwrap();
    assert_eq!(note, "{\"max_step_records\":2}\n");
    // The summary read two of the three records, and says what it left out.
    let output = output_with_summary(USER, name, job.id);
    assert!(output.contains("all-ran"), "{output}");
    let sum = summary_of(&output);
    for line in [
        "Records:       2 of 3 step records read, all final; the rest left out (max_summary_records)",
        "               steps numbered 2 and above were not recorded (max_step_records)",
    ] {
        assert!(sum.contains(&format!("{line}\n")), "{sum}");
    }
    // The report reads the same settings and says the same.
    let (code, out, err) = report_as(USER, &[&job.id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("2 of 3 step records read"), "{out}");
    assert!(
        out.contains("steps numbered 2 and above were not recorded"),
        "{out}"
    );
}
