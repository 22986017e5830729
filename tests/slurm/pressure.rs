//! What held a job back, from the kernel's pressure stall figures of its step's cgroup: four
//! busy processes on one CPU are CPU-starved, a job that writes and reads a file with direct,
//! synchronous I/O waits for I/O, a job that sleeps waits for neither. On cgroup v2 (the test guests) the summary
//! names each so; on cgroup v1 (22.05 here) it says pressure is not available, and the jobs
//! are tracked as ever.

use crate::support::*;

/// The job's summary in the report's JSON.
fn pressure_json(id: u32) -> serde_json::Value {
    let (code, text, err) = report_as(USER, &[&id.to_string(), "-f", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v["summary"].clone()
}

/// The `Pressure:` line of a summary.
fn pressure_line(summary: &str) -> &str {
    summary
        .lines()
        .find_map(|l| l.strip_prefix("Pressure:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no Pressure line:\n{summary}"))
}

/// Limits the reads of job `id` (the pressure-io job) to 1 MiB/s on the disk of the job
/// directory, once the job has written where its cgroup is, then tells it to go. On cgroup
/// v2: the `io` controller is turned on below the node's slurmstepd scope (Slurm turns on
/// `cpuset cpu memory` there), and the job's cgroup gets an `io.max`. On v1 it only says go.
fn throttle(id: u32) {
    let dir = state_dir().join("jobs").join(USER);
    let base = dir.join(format!("pressure-io-{id}"));
    let where_ = base.with_extension("cgroup");
    wait_until(
        "the io job's cgroup file",
        std::time::Duration::from_secs(300),
        || where_.exists(),
    );
    if cgroup_version() == "v2" {
        let text = std::fs::read_to_string(&where_).unwrap();
        let rel = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_else(|| panic!("no cgroup v2 line: {text}"));
        let path = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
        // The job's cgroup: the parent of its step's (step_batch/user/task_0 below it).
        let job = path
            .ancestors()
            .find(|d| d.join("step_batch").is_dir())
            .unwrap_or_else(|| panic!("no job cgroup above {}", path.display()));
        let scope = job.parent().unwrap();
        std::fs::write(scope.join("cgroup.subtree_control"), "+io")
            .unwrap_or_else(|e| panic!("{}: {e}", scope.display()));
        // The whole disk under the job directory's filesystem (io.max takes no partition).
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(&dir).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let sys = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
        let disk = if sys.join("partition").exists() {
            std::fs::read_to_string(sys.join("../dev")).unwrap()
        } else {
            format!("{major}:{minor}")
        };
        let limit = format!("{} rbps=1048576 wbps=1048576", disk.trim());
        std::fs::write(job.join("io.max"), &limit)
            .unwrap_or_else(|e| panic!("{limit} to {}: {e}", job.display()));
        println!("throttled job {id}: {limit} in {}", job.display());
    }
    std::fs::write(base.with_extension("go"), "").unwrap();
    let _ = std::fs::remove_file(&where_);
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn four_threads_on_one_cpu_starve_direct_reads_wait_for_io_and_a_sleeper_waits_for_nothing() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let hog = hog();
    // Each runs 25 s or more: a bottleneck is named from 20 s of figures on. Each has a core
    // of its own (ConstrainCores). The hog and its three copies each burn 6 s of CPU time on
    // the one CPU the job has.
    let cpu = format!(
        "#!/bin/bash\n#SBATCH --gpu-track -c 1 -t 5\n\
         exec {hog} --spin-ms 6000 --children 3\n"
    );
    // A file of 8 MiB, written before the go, then read with O_DIRECT (no page cache) for
    // 25 s through a throttled device: the test limits the job's reads to 1 MiB/s
    // ([`throttle`]) before it says go. (Unthrottled, the guests' disk answers so fast that
    // the emulated CPU, not the disk, sets the pace.)
    let io = "#!/bin/bash\n#SBATCH --gpu-track -c 1 -t 5\n\
         f=\"$SLURM_SUBMIT_DIR/pressure-io-$SLURM_JOB_ID\"\n\
         dd if=/dev/zero of=\"$f.dat\" bs=1M count=8 status=none\n\
         cat /proc/self/cgroup >\"$f.tmp\" && mv \"$f.tmp\" \"$f.cgroup\"\n\
         while [ ! -e \"$f.go\" ]; do sleep 0.2; done\n\
         end=$((SECONDS + 25))\n\
         while [ $SECONDS -lt $end ]; do\n\
           dd if=\"$f.dat\" of=/dev/null bs=256k iflag=direct status=none\n\
         done\n\
         rm -f \"$f.dat\"\n\
         echo io-done\n";
    let idle = "#!/bin/bash\n#SBATCH --gpu-track -c 1 -t 5\nsleep 25\necho idle-done\n";
    let ids = [
        submit("pressure-cpu", &cpu),
        submit("pressure-io", io),
        submit("pressure-idle", idle),
    ];
    throttle(ids[1]);
    let names = ["pressure-cpu", "pressure-io", "pressure-idle"];
    let go = state_dir()
        .join("jobs")
        .join(USER)
        .join(format!("pressure-io-{}.go", ids[1]));
    let mut seen = Vec::new();
    for (name, id) in names.iter().zip(ids) {
        let job = wait_job(USER, name, id);
        assert_eq!(job.state, "COMPLETED", "{name}: {}", job.output);
        let out = output_with_summary(USER, name, id);
        let summary = summary_of(&out).to_string();
        let v = pressure_json(id);
        println!("{name} (job {id}):\n{summary}\npressure: {}", v["pressure"]);
        seen.push((summary, v));
    }
    let _ = std::fs::remove_file(go);
    if cgroup_version() == "v1" {
        for (summary, v) in &seen {
            let line = pressure_line(summary);
            assert!(
                line.starts_with("not available: cgroup v1 keeps no pressure stall figures"),
                "{line}"
            );
            let p = &v["pressure"];
            assert_eq!(p["available"], false, "{p}");
            for k in ["seconds", "cpu", "memory", "io", "bottleneck"] {
                assert!(p[k].is_null(), "{k}: {p}");
            }
            // Tracked as ever: memory and CPU are there.
            assert!(v["per_node"][0]["peak_bytes"].as_u64().unwrap() > 0, "{v}");
            assert!(v["steps"][0]["pressure"]["why"].as_str().is_some(), "{v}");
        }
        return;
    }
    let (cpu_sum, cpu_v) = &seen[0];
    let line = pressure_line(cpu_sum);
    assert!(line.starts_with("the tasks waited for a core"), "{line}");
    assert!(
        line.contains("4 threads on 1 CPU(s); ask for -c 4"),
        "{line}"
    );
    let share = cpu_v["pressure"]["cpu"]["some_percent"].as_f64().unwrap();
    assert!(share >= 40.0, "{share}: {}", cpu_v["pressure"]);
    assert_eq!(cpu_v["pressure"]["bottleneck"], "cpu-starved");
    assert!(cpu_sum.contains("cpu-starved"), "{cpu_sum}");
    // The step's own figures: seconds the counters cover, about the step's time.
    let step = &cpu_v["steps"][0]["pressure"];
    let secs = step["seconds"].as_f64().unwrap();
    let elapsed = cpu_v["steps"][0]["elapsed_seconds"].as_f64().unwrap();
    assert!(secs > 20.0 && secs <= elapsed + 1.0, "{secs} of {elapsed}");

    let (io_sum, io_v) = &seen[1];
    let line = pressure_line(io_sum);
    assert!(line.starts_with("the tasks waited for I/O"), "{line}");
    assert_eq!(
        io_v["pressure"]["bottleneck"], "io-bound",
        "{}",
        io_v["pressure"]
    );
    assert!(io_sum.contains("io-bound"), "{io_sum}");

    let (idle_sum, idle_v) = &seen[2];
    let line = pressure_line(idle_sum);
    assert!(line.starts_with("nothing held the job back"), "{line}");
    assert_eq!(idle_v["pressure"]["bottleneck"], "none");
    for tag in ["cpu-starved", "io-bound", "memory-throttled"] {
        assert!(!idle_sum.contains(tag), "{idle_sum}");
    }
}
