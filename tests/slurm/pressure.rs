//! What held a job back, from the kernel's pressure stall figures of its step's cgroup: four
//! busy processes on one CPU are CPU-starved, a job that reads a file with direct I/O waits
//! for I/O, a job that sleeps waits for neither. On cgroup v2 (the test guests) the summary
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

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn four_threads_on_one_cpu_starve_direct_reads_wait_for_io_and_a_sleeper_waits_for_nothing() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let hog = hog();
    // Each runs 25 s or more: a bottleneck is named from 20 s of figures on. The hog and its
    // three copies each burn 6 s of CPU time on the one CPU the job has (ConstrainCores).
    let cpu = format!(
        "#!/bin/bash\n#SBATCH --gpu-track -c 1 -t 5\n\
         exec {hog} --spin-ms 6000 --children 3\n"
    );
    // 32 MiB written once, then read again and again with O_DIRECT (no page cache): each
    // read waits for the disk. On a disk, not a tmpfs (which has no direct I/O).
    let io = "#!/bin/bash\n#SBATCH --gpu-track -c 1 -t 5\n\
         f=\"$SLURM_SUBMIT_DIR/pressure-io-$SLURM_JOB_ID.dat\"\n\
         dd if=/dev/zero of=\"$f\" bs=1M count=32 oflag=direct status=none\n\
         end=$((SECONDS + 25))\n\
         while [ $SECONDS -lt $end ]; do\n\
           dd if=\"$f\" of=/dev/null bs=64k iflag=direct status=none\n\
         done\n\
         rm -f \"$f\"\n\
         echo io-done\n";
    let idle = "#!/bin/bash\n#SBATCH --gpu-track -c 1 -t 5\nsleep 25\necho idle-done\n";
    let ids = [
        submit("pressure-cpu", &cpu),
        submit("pressure-io", io),
        submit("pressure-idle", idle),
    ];
    let names = ["pressure-cpu", "pressure-io", "pressure-idle"];
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
