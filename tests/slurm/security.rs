//! Nothing a job controls may steer what root records, shows or waits for: who may read a
//! record, an output that is a symlink to a root file, a job id that comes round again over
//! another user's records, a forged environment, an output file that stops answering.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_tracker::step::record::StepRecord;

use crate::records::*;
use crate::support::*;

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn records_are_readable_by_their_user_only_and_writable_by_no_user() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let job = run_job("private", "#!/bin/bash\n#SBATCH --gpu-track\necho hi\n");
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(job.id, &["batch"]);
    // Nothing went wrong (notes may still say a slow guest's sample lengthened the interval).
    assert!(
        recs["batch"].sampler.faults.is_empty(),
        "{:?}",
        recs["batch"].sampler.notes
    );
    let dir = job_spool_dir(job.id);
    let file = dir.join(format!("{}.batch.json", node()));
    let f = file.display();
    let d = dir.display();
    assert!(
        as_user_ok(USER, &format!("grep -q gpu-tracker/step {f}")),
        "the job's user reads it"
    );
    assert!(
        as_user_ok(USER, &format!("ls {d} >/dev/null")),
        "and lists the job's directory"
    );
    assert!(
        !as_user_ok(USER, &format!("echo x >> {f}")),
        "but cannot change it"
    );
    assert!(
        !as_user_ok(USER, &format!("touch {d}/extra.json")),
        "or add files"
    );
    assert!(!as_user_ok(USER, &format!("rm -f {f}")) || file.exists());
    assert!(file.exists());
    assert!(
        !as_user_ok("gtuser2", &format!("cat {f}")),
        "another user cannot read it"
    );
    assert!(
        !as_user_ok("gtuser2", &format!("ls {d}")),
        "or list the job's directory"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_job_whose_output_is_a_symlink_to_a_root_file_leaves_that_file_untouched() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let victim = state_dir().join("root-owned-victim");
    std::fs::write(&victim, "root's data\n").unwrap();
    let before = std::fs::metadata(&victim).unwrap();
    let dir = state_dir().join("jobs").join(USER);
    let link = dir.join("victim-link.out");
    let _ = std::fs::remove_file(&link);
    assert!(as_user_ok(
        USER,
        &format!("ln -s {} {}", victim.display(), link.display())
    ));
    let link_arg = link.display().to_string();
    let id = submit_as(
        USER,
        "symlinked",
        "#!/bin/bash\n#SBATCH --gpu-track\necho job-ran\n",
        &["-o", &link_arg],
    );
    wait_job(USER, "symlinked", id);
    std::thread::sleep(Duration::from_secs(2));
    let after = std::fs::metadata(&victim).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's data\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (after.uid(), after.mode(), after.mtime()),
        (before.uid(), before.mode(), before.mtime())
    );
}

/// The line of job `id` in root's listing of the last hour.
fn root_listing_line(id: u32) -> String {
    let (_, list, _) = report_as("root", &["--all", "--since", "1h"]);
    list.lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("job {id} not in root's listing:\n{list}"))
}

/// Copies directory `from` to `to` as root (modes and ACLs kept), then rewrites the job id in
/// every record and instance file there: what the spool holds when a job id comes round again.
fn plant_as_job(from: &Path, to: &Path, id: u32) {
    if to.exists() {
        return;
    }
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
    for e in std::fs::read_dir(to).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if let Some(j) = v.pointer_mut("/job/id") {
            *j = id.into();
        }
        if let Some(j) = v.pointer_mut("/job_id") {
            *j = id.into();
        }
        // Written in place: the file keeps its owner, mode and ACL.
        std::fs::write(e.path(), serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_reused_job_id_never_shows_the_earlier_jobs_records() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // gtuser2's job: a step whose command line holds a password.
    let secret = "password=hunter2-for-gtuser2";
    let a_script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\nsrun --gpu-track sh -c 'sleep 1' {secret}\n"
    );
    let a = submit_as("gtuser2", "reuse-a", &a_script, &[]);
    assert_eq!(wait_job("gtuser2", "reuse-a", a).state, "COMPLETED");
    let a_recs = final_records(a, &["batch", "0"]);
    assert!(
        a_recs["0"]
            .step
            .command
            .as_deref()
            .unwrap_or("")
            .contains(secret)
    );
    let a_dir = job_spool_dir(a);
    // gtuser's job gets an id; before it runs, the spool is made to hold gtuser2's records
    // under that id, as after MaxJobId wraps or slurmctld's state is reset: in this cluster's
    // directory, and where a plugin of another cluster sharing the spool put them.
    let b = submit_as(
        USER,
        "reuse-b",
        "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\nsleep 1\n",
        &["--hold"],
    );
    let spool = state_dir().join("spool/gpu-tracker");
    plant_as_job(&a_dir, &job_spool_dir(b), b);
    plant_as_job(&a_dir, &spool.join(b.to_string()), b);
    let other = spool.join("othercluster").join(b.to_string());
    plant_as_job(&a_dir, &other, b);
    // Another cluster's record of ITS job b, by the same user.
    let mut theirs = final_records(b, &[])
        .into_values()
        .next()
        .unwrap_or_else(|| {
            StepRecord::from_json(
                &std::fs::read_to_string(other.join(format!("{}.batch.json", node()))).unwrap(),
            )
            .unwrap()
        });
    theirs.step.node = "othernode".into();
    theirs.job.uid = Command::new("id")
        .args(["-u", USER])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().parse().unwrap())
        .unwrap();
    std::fs::write(
        spool.join(b.to_string()).join("othernode.batch.json"),
        theirs.to_json(),
    )
    .unwrap();
    std::fs::write(other.join("othernode.batch.json"), theirs.to_json()).unwrap();
    scontrol(&["release", &b.to_string()]);
    let job = wait_job(USER, "reuse-b", b);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(b, &["batch"]);
    let out = output_with_summary(USER, "reuse-b", b);
    let summary = summary_of(&out);
    assert!(!summary.contains("hunter2"), "{summary}");
    assert!(!summary.contains("othernode"), "{summary}");
    // Only gtuser's own batch step is this job's.
    assert_eq!(recs.keys().collect::<Vec<_>>(), ["batch"], "{recs:?}");
    assert_eq!(recs["batch"].job.user, USER);
    for who in [USER, "root"] {
        let (code, text, err) = report_as(who, &[&b.to_string()]);
        assert_eq!(code, 0, "{who}: {text}{err}");
        assert!(
            !text.contains("hunter2") && !text.contains("othernode"),
            "{who}: {text}"
        );
        let (_, json, _) = report_as(who, &[&b.to_string(), "--format", "json"]);
        assert!(
            !json.contains("hunter2") && !json.contains("gtuser2"),
            "{who}: {json}"
        );
    }
    let line = root_listing_line(b);
    assert!(
        line.contains(" gtuser ") && !line.contains("gtuser2"),
        "{line}"
    );
    // The earlier records were moved aside for the admin: root only.
    let stale = cluster_spool().join(".stale");
    let moved: Vec<PathBuf> = std::fs::read_dir(&stale)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{b}-"))
        })
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    let kept = std::fs::read_dir(&moved[0]).unwrap().count();
    assert!(
        kept >= 3,
        "the earlier job's records are kept for the admin"
    );
    for user in [USER, "gtuser2"] {
        assert!(
            !as_user_ok(user, &format!("ls {}", moved[0].display())),
            "{user}"
        );
    }
    // The other cluster's directory is left as it was.
    assert!(other.join("othernode.batch.json").exists());
    assert!(other.join(format!("{}.0.json", node())).exists());
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_jobs_environment_cannot_choose_its_node_user_or_gpus() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let long_list = (0..700)
        .map(|i| format!("{i}-{}", i + 900))
        .collect::<Vec<_>>()
        .join(",");
    assert!(long_list.len() >= 4096);
    let script = "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\n\
                  export SLURM_JOB_GPUS=1 SLURM_STEP_GPUS=0,1\n\
                  srun --gpu-track sh -c 'sleep 1'\n";
    let id = submit_with_env(
        USER,
        "forged",
        script,
        &["-J", "forged\u{202e}gnp.exe"],
        &[
            ("SLURMD_NODENAME", "evil\u{1b}]2;owned\u{7}\u{1b}[31m"),
            ("SLURM_JOB_USER", "gtuser2"),
            ("USER", "gtuser2"),
            ("SLURM_JOB_GPUS", "1"),
            ("SLURM_STEP_GPUS", &long_list),
        ],
    );
    let job = wait_job(USER, "forged", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(id, &["batch", "0"]);
    let mut names: Vec<String> = std::fs::read_dir(job_spool_dir(id))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let n = node();
    let mut expected = [
        "instance.json".to_string(),
        format!("{n}.0.json"),
        format!("{n}.batch.json"),
    ];
    expected.sort();
    assert_eq!(names, expected);
    for (step, r) in &recs {
        assert_eq!(r.step.node, n, "{step}");
        assert_eq!(r.job.user, USER, "{step}");
        assert!(
            r.step.alloc_gpus.is_empty(),
            "{step}: {:?}",
            r.step.alloc_gpus
        );
        assert!(
            r.gpus.is_empty(),
            "{step}: tracked a GPU the job was never given"
        );
    }
    let out = output_with_summary(USER, "forged", id);
    let summary = summary_of(&out);
    for (who, text) in [
        ("summary", summary.to_string()),
        ("root's report", report_as("root", &[&id.to_string()]).1),
        (
            "root's listing",
            report_as("root", &["--all", "--since", "1h"]).1,
        ),
        (
            "root's json",
            report_as("root", &[&id.to_string(), "-f", "json"]).1,
        ),
    ] {
        assert!(
            !text
                .chars()
                .any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{202e}'),
            "{who} prints a terminal control: {text:?}"
        );
    }
    let line = root_listing_line(id);
    assert!(
        line.contains(" gtuser ") && !line.contains("gtuser2"),
        "{line}"
    );
}

/// A mounted `tests/hangfs.py` (a FUSE passthrough whose writes hang or take 0 bytes on
/// demand); unmounted, with any held write released, on drop.
struct HangFs {
    mnt: PathBuf,
    control: PathBuf,
    child: std::process::Child,
}

impl HangFs {
    fn mount() -> HangFs {
        use std::os::unix::fs::PermissionsExt;
        let base = state_dir().join(format!("hangfs-{}", std::process::id()));
        let (backing, mnt, control) =
            (base.join("backing"), base.join("mnt"), base.join("control"));
        for d in [&backing, &mnt, &control] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::set_permissions(&backing, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hangfs.py");
        let log = base.join("hangfs.log");
        let mut child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg("--control")
            .args([&control, &backing, &mnt])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("/usr/bin/python3 tests/hangfs.py (tests/run-all.sh installs python3)");
        let started = Instant::now();
        while !std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .contains(&mnt.display().to_string())
        {
            // A script that cannot start (no pyfuse3, no /dev/fuse) says why at once.
            if let Some(rc) = child.try_wait().unwrap() {
                let why = std::fs::read_to_string(&log).unwrap_or_default();
                panic!(
                    "tests/hangfs.py exited ({rc}) before mounting; tests/run-all.sh installs \
                     fuse3 and python3-pyfuse3 and skips this test where /dev/fuse is missing:\n{why}"
                );
            }
            assert!(
                // Python and trio start slowly in an emulated guest under load.
                started.elapsed() < Duration::from_secs(120),
                "hangfs did not mount"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        HangFs {
            mnt,
            control,
            child,
        }
    }
}

impl Drop for HangFs {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.control.join("hang"));
        let _ = std::fs::remove_file(self.control.join("zero"));
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        // Quiet: the test's last mode has unmounted it already.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .stderr(std::process::Stdio::null())
            .status();
        // Its directory stays, with the script's log, only where the test failed.
        if !std::thread::panicking()
            && let Some(base) = self.mnt.parent()
        {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn an_output_file_that_stops_answering_does_not_hold_the_job() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    let fs = HangFs::mount();
    // "lazy" (last: it takes the mount away): the filesystem is lazily unmounted while the job
    // runs (`fusermount3 -u -z`), then stops answering; slurmstepd's descriptor is then on a
    // mount no table names.
    for mode in ["hang", "zero", "lazy"] {
        let out = fs.mnt.join(format!("{mode}-%j.out"));
        let id = submit_as(
            USER,
            &format!("stuck-{mode}"),
            "#!/bin/bash\n#SBATCH --gpu-track\necho started\nsleep 3\n",
            &["-o", &out.display().to_string()],
        );
        let file = fs.mnt.join(format!("{mode}-{id}.out"));
        wait_started(id);
        let started = Instant::now();
        while !std::fs::read_to_string(&file)
            .unwrap_or_default()
            .contains("started")
        {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "job {id} never wrote"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The job's own output is written; from now on the file stops answering.
        let control = fs.control.join(if mode == "lazy" { "hang" } else { mode });
        if mode == "lazy" {
            let status = Command::new("umount")
                .arg("-l")
                .arg(&fs.mnt)
                .status()
                .unwrap();
            assert!(status.success(), "umount -l {}", fs.mnt.display());
        }
        std::fs::write(&control, "").unwrap();
        let ended = Instant::now();
        let state = loop {
            let polled = Instant::now();
            let st = job_field(id, "JobState").unwrap_or_default();
            if !matches!(st.as_str(), "PENDING" | "RUNNING" | "COMPLETING" | "") {
                break st;
            }
            assert!(
                ended.elapsed() < Duration::from_secs(60),
                "{mode}: job {id} still {st} a minute after its output stopped answering"
            );
            poll_pause(Duration::from_millis(200), polled.elapsed());
        };
        assert_eq!(state, "COMPLETED", "{mode}");
        let recs = final_records(id, &["batch"]);
        assert!(
            recs["batch"].complete,
            "{mode}: the record is written all the same"
        );
        let notes = &recs["batch"].sampler.notes;
        let why = if mode == "lazy" {
            "cannot be told"
        } else {
            "fuse"
        };
        assert!(
            notes
                .iter()
                .any(|n| n.contains(why) && n.contains("no summary")),
            "{mode}: the record says why there is no summary: {notes:?}"
        );
        std::fs::remove_file(&control).unwrap();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn warning_lines_to_an_output_that_stops_answering_do_not_hold_the_job() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    // An alert the job below sets off, and its warning line meant for the job's output.
    let _restore = settings_with("alert_memory_percent = 50\nwarn_user = true\n");
    let fs = HangFs::mount();
    let out = fs.mnt.join("warn-%j.out");
    let h = hog();
    let id = submit_as(
        USER,
        "stuck-warn",
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track=0.5 --mem=200M\necho started\nsleep 3\n\
             {h} --mb 130 --hold-ms 3000 >/dev/null 2>&1\n"
        ),
        &["-o", &out.display().to_string()],
    );
    let file = fs.mnt.join(format!("warn-{id}.out"));
    wait_started(id);
    let started = Instant::now();
    while !std::fs::read_to_string(&file)
        .unwrap_or_default()
        .contains("started")
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "job {id} never wrote"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The job's output stops answering before the alert: the plugin, which checked the
    // output when the step started (slurmd's /dev/null then), must not write the line to it.
    std::fs::write(fs.control.join("hang"), "").unwrap();
    let ended = Instant::now();
    let state = loop {
        let polled = Instant::now();
        let st = job_field(id, "JobState").unwrap_or_default();
        if !matches!(st.as_str(), "PENDING" | "RUNNING" | "COMPLETING" | "") {
            break st;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(60),
            "job {id} still {st} a minute after its output stopped answering"
        );
        poll_pause(Duration::from_millis(200), polled.elapsed());
    };
    assert_eq!(state, "COMPLETED");
    let recs = final_records(id, &["batch"]);
    let batch = &recs["batch"];
    assert!(
        batch.events.iter().any(|e| e.kind == "alert_memory"),
        "the alert fired: {:?}",
        batch.events
    );
    let notes = &batch.sampler.notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("no more warning lines") && n.contains("fuse")),
        "the record says why no warning line was written: {notes:?}"
    );
    std::fs::remove_file(fs.control.join("hang")).unwrap();
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap_or_default()
            .contains("gpu-tracker: warning"),
        "no warning line went to the FUSE file"
    );
}
