//! Faults of the node under a tracked job: the step's cgroup out of reach, a full or read-only
//! spool, a slurmstepd killed, slurmd restarted. Each time the job's own result is unchanged,
//! slurmstepd ends normally, slurmd's log says what happened in one line, and what could be
//! measured is kept. (NVML that fails: nvml.rs; settings missing or unreadable: settings.rs;
//! load: load.rs.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpu_tracker::step::record::StepRecord;

use crate::records::*;
use crate::support::*;

/// The directory of the step's memory cgroup, from its record.
fn step_cgroup_dir(r: &StepRecord) -> PathBuf {
    let cg = r.memory.cgroup.clone().expect("the step has a cgroup");
    let p = PathBuf::from(&cg);
    if p.is_absolute() && p.starts_with("/sys/fs/cgroup") {
        return p;
    }
    let base = if cgroup_version() == "v1" {
        "/sys/fs/cgroup/memory"
    } else {
        "/sys/fs/cgroup"
    };
    Path::new(base).join(cg.trim_start_matches('/'))
}

/// Unmounts `0` when dropped (lazily: a test that failed midway leaves no mount behind).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn bind(from: &Path, to: &Path) -> Mounted {
    let ok = Command::new("mount")
        .arg("--bind")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount --bind {} {}", from.display(), to.display());
    Mounted(to.to_path_buf())
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_step_cgroup_that_vanishes_or_cannot_be_read_keeps_the_figures_it_had() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let mark = log_mark();
    let name = "cgroup-gone";
    // The holder holds its 61 MB until the test is done with the step's cgroup (at most 120
    // s): on a busy guest a fixed hold could end before the faults were made.
    let release = Release::new(name);
    let wait = release.wait_then_kill_holder(120, "1");
    let id = submit(
        name,
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track=0.2\n\
             {h} --mb 61 --hold-ms 600000 &\n\
             holder=$!\n\
             {wait}\
             echo job-done\n"
        ),
    );
    wait_started(id);
    let mut rec = None;
    wait_until(
        "a checkpoint with the 61 MB",
        Duration::from_secs(60),
        || {
            rec = record_now(id, "batch").filter(|r| r.memory.peak_bytes >= 61_000_000);
            rec.is_some()
        },
    );
    let dir = step_cgroup_dir(rec.as_ref().unwrap());
    let usage = if cgroup_version() == "v1" {
        "memory.usage_in_bytes"
    } else {
        "memory.current"
    };
    assert!(dir.join(usage).exists(), "{}", dir.display());
    // 1. The cgroup's files vanish: an empty directory over the step's cgroup.
    {
        let empty = state_dir().join("empty-dir");
        std::fs::create_dir_all(&empty).unwrap();
        let _m = bind(&empty, &dir);
        std::thread::sleep(Duration::from_secs(3));
    }
    // 2. Its usage file cannot be read (a write-only file of the same cgroup over it: even root
    // gets an error).
    {
        let write_only = if cgroup_version() == "v1" {
            "memory.force_empty"
        } else {
            "cgroup.kill"
        };
        let _m = bind(&dir.join(write_only), &dir.join(usage));
        assert!(std::fs::read_to_string(dir.join(usage)).is_err());
        std::thread::sleep(Duration::from_secs(3));
    }
    release.release();
    let job = wait_job(USER, name, id);
    drop(release);
    assert_job_unharmed(&job, name, "job-done");
    let r = &final_records(id, &["batch"])["batch"];
    assert!(r.complete);
    assert!(
        r.memory.peak_bytes >= 61_000_000,
        "the peak read before is kept: {:?}",
        r.memory
    );
    let fault = r
        .sampler
        .faults
        .iter()
        .find(|f| f.contains("cgroup could not be read"))
        .unwrap_or_else(|| panic!("{:?}", r.sampler));
    let misses: u64 = fault
        .split("read at ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // Two stretches of 3 s out of reach: about 30 samples at 0.2 s. A busy guest's samples cost
    // over a tenth of that interval, and the sampler lengthens it (up to 1.6 s): at least one
    // sample a stretch less than fit at the longest interval it used.
    let longest = r.sampler.interval_max_seconds.unwrap_or(0.2).max(0.2);
    let at_least = 2 * ((3.0 / longest).floor() as u64).saturating_sub(1).max(1);
    assert!(
        misses >= at_least && misses < r.sampler.samples,
        "{fault} (at least {at_least} at intervals up to {longest} s)"
    );
    assert_fault_logged(mark, id, "batch", "cgroup could not be read");
}

/// A spool of its own for one test: a small tmpfs, named by the settings until drop.
struct SmallSpool {
    dir: PathBuf,
    _restore: Restore,
}

impl SmallSpool {
    fn new(tag: &str) -> SmallSpool {
        let dir = state_dir().join("spool").join(format!("small-{tag}"));
        // Left mounted by a test that was killed: not again.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status();
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m,mode=0755", "gt-small-spool"])
            .arg(&dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs on {}", dir.display());
        let conf = state_dir().join("gpu-tracker.toml");
        let good = std::fs::read_to_string(&conf).unwrap();
        let text: Vec<String> = good
            .lines()
            .map(|l| {
                if l.starts_with("spool_dir") {
                    format!("spool_dir = \"{}\"", dir.display())
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&conf, text.join("\n") + "\n").unwrap();
        SmallSpool {
            dir,
            _restore: Restore(conf, good),
        }
    }

    fn record(&self, id: u32, step: &str) -> Option<StepRecord> {
        let p = self
            .dir
            .join("gputrack")
            .join(id.to_string())
            .join(format!("{}.{step}.json", node()));
        StepRecord::from_json(&std::fs::read_to_string(p).ok()?).ok()
    }
}

impl Drop for SmallSpool {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_full_or_read_only_spool_keeps_the_last_checkpoint_and_the_job_runs() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    for how in ["full", "read-only"] {
        let spool = SmallSpool::new(how);
        let mark = log_mark();
        let name = format!("spool-{how}");
        // The cluster checkpoints every 5 s: the second checkpoint has the 45 MB.
        let id = submit(
            &name,
            &format!(
                "#!/bin/bash\n#SBATCH --gpu-track=0.2\n{h} --mb 45 --hold-ms 9000\necho job-done\n"
            ),
        );
        wait_until(
            "a checkpoint with the 45 MB",
            Duration::from_secs(60),
            || {
                spool.record(id, "batch").is_some_and(|r| {
                    r.tasks
                        .iter()
                        .any(|t| t.sampled_peak_rss_bytes >= 45_000_000)
                })
            },
        );
        if how == "full" {
            use std::io::Write;
            let mut f = std::fs::File::create(spool.dir.join("filler")).unwrap();
            let chunk = vec![0u8; 1 << 16];
            while f.write_all(&chunk).is_ok() {}
        } else {
            let ok = Command::new("mount")
                .args(["-o", "remount,ro"])
                .arg(&spool.dir)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
        let job = wait_job(USER, &name, id);
        assert_eq!(job.state, "COMPLETED", "{how}: {}", job.output);
        let out = output_with_summary(USER, &name, id);
        assert!(out.contains("job-done"), "{how}: {out}");
        assert_node_healthy();
        std::thread::sleep(Duration::from_secs(1));
        // The final record could not be written; the last checkpoint is whole and says it is
        // not final.
        let r = spool
            .record(id, "batch")
            .expect("the checkpoint is still there");
        assert!(!r.complete, "{how}");
        assert!(
            r.tasks
                .iter()
                .any(|t| t.sampled_peak_rss_bytes >= 45_000_000),
            "{how}: {r:?}"
        );
        let lines = plugin_lines_since(mark);
        let why = if how == "full" {
            "No space left on device"
        } else {
            "Read-only file system"
        };
        assert!(
            lines.iter().any(
                |l| l.contains(&format!("job {id} step batch: record not written"))
                    && l.contains(why)
            ),
            "{how}: {lines:#?}"
        );
        // The summary the job got, and the report later, say the record is not final.
        assert!(summary_of(&out).contains("incomplete"), "{how}: {out}");
        let (code, text, err) = report_as(USER, &[&id.to_string()]);
        assert_eq!(code, 5, "{how}: {text}{err}");
        assert!(
            err.contains("incomplete") || text.contains("incomplete"),
            "{text}{err}"
        );
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_slurmstepd_killed_mid_step_leaves_its_last_checkpoint_and_the_report_says_so() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let name = "stepd-killed";
    let id = submit(
        name,
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track=0.2\nsrun --gpu-track=0.2 {h} --mb 33 --hold-ms 20000\n\
             echo batch-goes-on\n"
        ),
    );
    wait_started(id);
    wait_until(
        "a checkpoint of step 0 with the 33 MB",
        Duration::from_secs(60),
        || record_now(id, "0").is_some_and(|r| r.memory.peak_bytes >= 33_000_000),
    );
    let slurmd = slurmd_pid();
    let pid = stepd_pid(id, "0").expect("the step's slurmstepd");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // Slurm may take a while to give up on the step: cancel the job once its step is gone.
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("scancel")
        .arg(id.to_string())
        .env("SLURM_CONF", slurm_conf())
        .status();
    let job = wait_job(USER, name, id);
    assert_ne!(job.state, "RUNNING");
    // slurmd is the same process, and the batch step's own slurmstepd ended normally: its
    // record is final.
    assert_eq!(slurmd_pid(), slurmd);
    assert!(Path::new(&format!("/proc/{slurmd}")).exists());
    let recs = final_records_or_checkpoints(id);
    let step0 = &recs["0"];
    assert!(
        !step0.complete,
        "the killed step's record is its last checkpoint"
    );
    assert!(step0.memory.peak_bytes >= 33_000_000, "{:?}", step0.memory);
    let (code, text, err) = report_as(USER, &[&id.to_string()]);
    assert_eq!(code, 5, "{text}{err}");
    let all = format!("{text}{err}");
    assert!(
        all.contains(&format!("{}.0.json: incomplete", node())),
        "the report names the step's record as incomplete: {all}"
    );
}

/// Every record of job `id` once the batch step's is final (the others as they are).
fn final_records_or_checkpoints(id: u32) -> BTreeMap<String, StepRecord> {
    wait_until(
        "the batch step's final record",
        Duration::from_secs(60),
        || record_now(id, "batch").is_some_and(|r| r.complete),
    );
    records(id)
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn slurmd_restarted_while_a_tracked_job_runs_changes_nothing() {
    // Written lock: slurmd is away for a moment, which other tests' jobs would notice.
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let name = "slurmd-restart";
    let id = submit(
        name,
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track=0.2\nsrun --gpu-track=0.2 {h} --mb 35 --hold-ms 8000\n\
             echo job-done\n"
        ),
    );
    wait_until("a checkpoint of step 0", Duration::from_secs(60), || {
        record_now(id, "0").is_some()
    });
    let before = slurmd_pid();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/local-cluster.sh");
    let out = Command::new(script)
        .args(["restart-slurmd", &node()])
        .env("GPU_TRACKER_CLUSTER_DIR", state_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(slurmd_pid(), before, "slurmd was restarted");
    let job = wait_job(USER, name, id);
    assert_job_unharmed(&job, name, "job-done");
    let recs = final_records(id, &["batch", "0"]);
    assert!(recs["batch"].complete && recs["0"].complete);
    assert!(
        recs["0"].memory.peak_bytes >= 35_000_000,
        "{:?}",
        recs["0"].memory
    );
    assert!(
        recs["0"].sampler.faults.is_empty(),
        "{:?}",
        recs["0"].sampler
    );
}
