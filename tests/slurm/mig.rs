//! MIG instances and shared GPUs on a real cluster: the MIG node of the test cluster (partition
//! `mig`, slurm/cluster/setup.sh) has a SIMULATED MIG GPU with two 1g.10gb instances (Slurm's
//! GPUs 1 and 2 there) and a plain GPU cut in 4 shards (Slurm's GPU 0). Two jobs at once on the
//! two instances each record their own instance, its parent and only their own memory; a job
//! on a shard records its GPU as shared.

use std::sync::Mutex;
use std::time::Duration;

use gpu_tracker::gpu::figures::figure;
use gpu_tracker::step::record::StepRecord;

use crate::records::*;
use crate::support::*;

/// The MIG node has 2 CPUs: the two instances' jobs must not wait behind a shard's job.
static MIG_NODE: Mutex<()> = Mutex::new(());

/// The simulated MIG GPU (NVML index 2, minor 9; slurm/cluster/plugin.sh).
const PARENT_UUID: &str = "GPU-22222222-5151-4d55-8000-222222222222";
/// The size of a 1g.10gb instance, bytes.
const INSTANCE_MEMORY: u64 = 10_468_982_784;
const GIB: u64 = 1 << 30;

/// The batch record of job `id` as JSON, for the fields this test reads by name.
fn batch_json(id: u32, r: &StepRecord) -> serde_json::Value {
    let path = job_spool_dir(id).join(format!("{}.batch.json", r.step.node));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The value of `NAME=value` on a line of the job's own output.
fn echoed<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in:\n{output}"))
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --nodes 3) and root: tests/run-all.sh"]
fn two_jobs_on_two_mig_instances_each_record_their_own_instance() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let _node = MIG_NODE.lock().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    // SIMULATED: a holder with SIMMIG_HOLD on its command line uses 1 GiB on the instance of
    // the job whose SLURM_JOB_GPUS is 1, 2 GiB on the other's; each instance's SMs are 40 %
    // active while a holder of its own computes (SIMGPU_COMPUTE). It starts after the step's
    // first GPU readings, and holds until both jobs' checkpoints show its SM activity: on a
    // busy guest the sampler lengthens its interval (up to 4 s here), and a fixed hold could
    // end before two GPM samples had been taken during it.
    let release = Release::new("mig-pair");
    let wait = release.wait_then_kill_holder(120, "1");
    let script = format!(
        "#!/bin/bash\n#SBATCH -p mig --gres=gpu:1g.10gb:1 --gpu-track=0.5\n\
         echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS\n\
         sleep 1\n\
         {h} --hold-ms 600000 --marker SIMMIG_HOLD_SIMGPU_COMPUTE &\n\
         holder=$!\n\
         {wait}\
         echo done\n"
    );
    let ids = [submit("mig-pair", &script), submit("mig-pair", &script)];
    for id in ids {
        wait_started(id);
    }
    // The MIG node's records (`all_records`: `record_now` reads the first node's).
    let busy = |id: u32| {
        all_records(id).iter().any(|r| {
            r.step.id == "batch"
                && r.gpus
                    .iter()
                    .any(|g| g.depth.sm_active_percent.is_some_and(|s| s.max >= 20.0))
        })
    };
    wait_until(
        "both jobs' checkpoints with their instance's SM activity",
        Duration::from_secs(90),
        || ids.iter().all(|&id| busy(id)),
    );
    release.release();
    let jobs = ids.map(|id| wait_job(USER, "mig-pair", id));
    drop(release);
    let mut seen = Vec::new();
    for job in &jobs {
        assert_eq!(job.state, "COMPLETED", "{}", job.output);
        let out = output_with_summary(USER, "mig-pair", job.id);
        let r = final_records(job.id, &["batch"]).remove("batch").unwrap();
        assert_eq!(r.gpus.len(), 1, "job {}: {:?}", job.id, r.gpus);
        let g = &r.gpus[0];
        let v = batch_json(job.id, &r);
        let mig = &v["gpus"][0]["mig"];
        let gi = mig["gpu_instance_id"].as_u64().expect("a MIG instance");
        // Slurm's GPU 1 is GPU instance 1 (minors 12 and 13), GPU 2 is instance 2 (21, 22).
        let slurm: u32 = echoed(&out, "SLURM_JOB_GPUS").parse().unwrap();
        assert_eq!(g.slurm_index, Some(slurm), "{g:?}");
        assert_eq!(u64::from(slurm), gi, "{mig}");
        let (uuid, used) = match gi {
            1 => ("MIG-a1a1a1a1-5151-4d55-8000-a1a1a1a1a1a1", GIB),
            2 => ("MIG-b2b2b2b2-5151-4d55-8000-b2b2b2b2b2b2", 2 * GIB),
            _ => panic!("job {}: GPU instance {gi}: {mig}", job.id),
        };
        assert_eq!(g.uuid, uuid, "job {}", job.id);
        assert_eq!(mig["parent_uuid"], PARENT_UUID, "{mig}");
        assert_eq!(mig["profile"], "1g.10gb", "{mig}");
        assert_eq!(mig["compute_instance_id"], 0, "{mig}");
        assert_eq!(g.memory_total_bytes, INSTANCE_MEMORY, "{g:?}");
        // Only its own holder's memory, though the other job's holds the same parent GPU.
        assert_eq!(g.peak_step_memory_bytes, used, "{g:?}");
        assert!(v["gpus"][0]["shared"].is_null(), "{v}");
        // A MIG instance has no utilization: null, with why, never 0.
        assert_eq!(g.mean_utilization_percent, None, "{g:?}");
        assert_eq!(g.max_utilization_percent, None, "{g:?}");
        let why = &g.depth.no_data[figure::UTILIZATION];
        assert_eq!(why.kind, "not_supported", "{why:?}");
        assert!(why.why.contains("MIG instance"), "{why:?}");
        // SM activity from the instance's own GPM: 40 % while its holder runs. A reading that
        // straddles the holder's start reads half (see gpu_depth).
        let sm = g
            .depth
            .sm_active_percent
            .expect("the instance measured SM activity");
        assert!(sm.max >= 20.0 && sm.max <= 40.0 + 1e-9, "{sm:?}");
        // The summary names the instance.
        let summary = summary_of(&out);
        for want in ["MIG 1g.10gb", uuid, "in use on the instance"] {
            assert!(summary.contains(want), "{want:?} not in:\n{summary}");
        }
        // What an instance does not have is said once, as "n/a", and is no tracking fault.
        assert!(!summary.contains("not read"), "{summary}");
        seen.push((gi, r.step.start.clone(), r.step.end.clone().unwrap()));
    }
    // One job on each instance, at the same time (the times are RFC 3339 in UTC with
    // milliseconds, all of one width: they compare as text).
    seen.sort();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [1, 2],
        "{seen:?}"
    );
    let (a, b) = (&seen[0], &seen[1]);
    assert!(
        a.1 < b.2 && b.1 < a.2,
        "the two jobs did not overlap: {seen:?}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --nodes 3) and root: tests/run-all.sh"]
fn a_sharded_gpu_job_is_labelled_shared() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let _node = MIG_NODE.lock().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    // SIMULATED: one shard of the MIG node's plain GPU (Slurm's GPU 0 there, minor 4), whose
    // holder marker is SIMGPU0_HOLD (1 GiB); this holder computes (SIMGPU_COMPUTE). It holds
    // until a checkpoint shows its memory and its share of the GPU: a fixed 2 s hold could end
    // before a busy guest's sampler, its interval lengthened, had read the GPU during it.
    let release = Release::new("shard");
    let wait = release.wait_then_kill_holder(120, "1");
    let script = format!(
        "#!/bin/bash\n#SBATCH -p mig --gres=shard:1 --gpu-track=0.5\n\
         echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS\n\
         echo SLURM_SHARDS_ON_NODE=$SLURM_SHARDS_ON_NODE\n\
         sleep 1\n\
         {h} --hold-ms 600000 --marker SIMGPU0_HOLD_SIMGPU_COMPUTE &\n\
         holder=$!\n\
         {wait}\
         echo done\n"
    );
    let id = submit("shard", &script);
    wait_started(id);
    wait_until(
        "a checkpoint with the shard's memory and the job's share of the GPU",
        Duration::from_secs(90),
        || {
            all_records(id).iter().any(|r| {
                r.step.id == "batch"
                    && r.gpus.iter().any(|g| {
                        g.peak_step_memory_bytes == GIB
                            && g.depth.process_utilization_percent.is_some()
                    })
            })
        },
    );
    release.release();
    let job = wait_job(USER, "shard", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let out = output_with_summary(USER, "shard", job.id);
    assert_eq!(echoed(&out, "SLURM_JOB_GPUS"), "0");
    assert_eq!(echoed(&out, "SLURM_SHARDS_ON_NODE"), "1");
    let r = final_records(job.id, &["batch"]).remove("batch").unwrap();
    assert_eq!(r.gpus.len(), 1, "{:?}", r.gpus);
    let g = &r.gpus[0];
    assert_eq!(g.slurm_index, Some(0), "{g:?}");
    assert_eq!(g.uuid, "GPU-00000000-5151-4d55-8000-000000000000", "{g:?}");
    assert_eq!(g.peak_step_memory_bytes, GIB, "{g:?}");
    let v = batch_json(job.id, &r);
    let shared = &v["gpus"][0]["shared"];
    assert_eq!(shared["by"], "shard", "{shared}");
    assert_eq!(shared["shards"], 1, "{shared}");
    assert!(v["gpus"][0]["mig"].is_null(), "{v}");
    // The record's own types say the same.
    let sh = g.shared.as_ref().expect("shared");
    assert_eq!((sh.by.as_str(), sh.shards), ("shard", Some(1)), "{sh:?}");
    // The job's own share of the GPU: its holder's per-process samples (the test NVML gives
    // each of the device's computing processes the device's 37 %).
    let own = g
        .depth
        .process_utilization_percent
        .expect("the job's processes' utilization");
    assert!(own.max > 36.0 && own.max < 38.0, "{own:?}");
    let summary = summary_of(&out);
    for want in [
        "shared through Slurm's shards (1 held by the job)",
        "(the whole device's); the job's processes: mean",
    ] {
        assert!(summary.contains(want), "{want:?} not in:\n{summary}");
    }
}

/// A file replaced for a test; the original is put back (the replacement removed first, since
/// it may be a FIFO that writing would wait on).
struct Replaced(std::path::PathBuf, String);

impl Drop for Replaced {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        std::fs::write(&self.0, &self.1).unwrap();
    }
}

fn mkfifo(p: &std::path::Path) {
    let _ = std::fs::remove_file(p);
    let made = std::process::Command::new("mkfifo").arg(p).status();
    assert!(made.unwrap().success(), "mkfifo {}", p.display());
}

/// A FIFO (with no writer) in place of the driver's MIG table, then in place of gres.conf (named
/// by the settings): the job runs and ends at once, tracked. The plugin opened the table with a
/// blocking open, so slurmstepd waited for a writer for ever and the job never started its
/// script. The record says why its GPU could not be told.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --nodes 3) and root: tests/run-all.sh"]
fn a_fifo_in_place_of_the_mig_table_or_gres_conf_holds_no_job() {
    use std::time::{Duration, Instant};
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    let _node = MIG_NODE.lock().unwrap_or_else(|p| p.into_inner());
    cluster();
    // Long enough for the step's first GPU reading (NVML opens after the last fork; an
    // emulated guest is slow), which is when the GPU order is decided and recorded.
    let script =
        "#!/bin/bash\n#SBATCH -p mig --gres=gpu:1g.10gb:1 --gpu-track=0.5\necho ran\nsleep 4\n";
    let run = |name: &str| {
        let id = submit(name, script);
        wait_started(id);
        let started = Instant::now();
        let job = wait_job(USER, name, id);
        let took = started.elapsed();
        assert_eq!(job.state, "COMPLETED", "{name}: {}", job.output);
        assert!(job.output.contains("ran"), "{name}: {}", job.output);
        assert!(took < Duration::from_secs(60), "{name}: {took:?}");
        let r = final_records(id, &["batch"]).remove("batch").unwrap();
        (r.sampler.gpu_mapping.clone(), r.sampler.notes.join("\n"))
    };
    // 1. The MIG table: the instance cannot be told, and is never taken for the parent GPU.
    {
        let table = state_dir().join("nvidia-caps/mig-minors");
        let _back = Replaced(table.clone(), std::fs::read_to_string(&table).unwrap());
        mkfifo(&table);
        let (mapping, notes) = run("mig-table-fifo");
        assert_eq!(mapping.as_deref(), Some("gres_conf_files"), "{notes}");
        assert!(notes.contains("mig-minors does not name"), "{notes}");
    }
    // 2. gres.conf, named by the settings: GPU indices are taken as minors, and the notes say
    //    why.
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let _restore = Restore(conf.clone(), good.clone());
    let fifo = state_dir().join("gres-fifo.conf");
    mkfifo(&fifo);
    std::fs::write(
        &conf,
        format!("{good}\ngres_conf = \"{}\"\n", fifo.display()),
    )
    .unwrap();
    let (mapping, notes) = run("gres-conf-fifo");
    let _ = std::fs::remove_file(&fifo);
    assert_eq!(mapping.as_deref(), Some("index_is_minor"), "{notes}");
    assert!(
        notes.contains("gres.conf not readable") && notes.contains("not a regular file"),
        "{notes}"
    );
}
