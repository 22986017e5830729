//! Whether a job's GPU on a node was shared, from what each of the job's steps on it saw.
//!
//! A step's record calls its GPU shared when processes outside the step were on it; those may
//! be the job's own (another step's: a batch script holding the GPU while its `srun` step does)
//! or another job's. The sampler tells them apart by the job's cgroup and records both
//! (`other_step_processes`, `outside_job_processes`); the job's GPU is shared with others only
//! where a step saw a process outside the job. Records that could not tell (no job cgroup, or
//! written by earlier builds) keep the old rule: a process outside the job is seen by every
//! step on the GPU, the job's own steps are not.

use crate::gpu::Shared;

/// The job's sharing of one GPU on one node, from the `shared` of each of its steps' records
/// of that GPU (in the records' order): Slurm's shards or MPS as the first step that had them
/// says, else shared with others as described above, else `None`.
pub fn job_shared(steps: &[Option<&Shared>]) -> Option<Shared> {
    let seen: Vec<&Shared> = steps.iter().flatten().copied().collect();
    if let Some(slurm) = seen.iter().find(|s| s.by == "shard" || s.by == "mps") {
        return Some((*slurm).clone());
    }
    let others = seen.iter().map(|s| s.other_processes).max()?;
    let told = seen.iter().filter_map(|s| s.outside_job_processes).max();
    let shared = match told {
        // Some step could tell: a process outside the job, seen by any step.
        Some(outside) => outside > 0,
        // None could: every step saw processes outside itself.
        None => steps
            .iter()
            .all(|s| s.is_some_and(|s| s.other_processes > 0)),
    };
    shared.then(|| Shared {
        other_processes: others,
        other_step_processes: seen.iter().filter_map(|s| s.other_step_processes).max(),
        outside_job_processes: told,
        ..seen[0].clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saw(others: u32, job: Option<u32>) -> Option<Shared> {
        Shared::decide(None, false, others).map(|s| Shared {
            other_step_processes: job,
            outside_job_processes: job.map(|j| others - j),
            ..s
        })
    }

    fn by(steps: &[Option<Shared>]) -> Option<(String, u32)> {
        let refs: Vec<Option<&Shared>> = steps.iter().map(Option::as_ref).collect();
        job_shared(&refs).map(|s| {
            (
                s.by.clone(),
                s.outside_job_processes.unwrap_or(s.other_processes),
            )
        })
    }

    #[test]
    fn a_gpu_held_by_the_batch_script_and_its_srun_step_is_not_shared_with_others() {
        // Each step saw the other's holder, and knew it for the job's own.
        let both = [saw(1, Some(1)), saw(1, Some(1))];
        assert_eq!(by(&both), None);
        // A process outside the job, seen by one step only (it came and went): shared.
        let stranger = [saw(2, Some(1)), saw(1, Some(1))];
        assert_eq!(by(&stranger), Some(("other_processes".into(), 1)));
        // A step alone with another job's two processes.
        assert_eq!(by(&[saw(2, Some(0))]), Some(("other_processes".into(), 2)));
        // A step that knew the job's processes and saw no stranger outweighs one that could
        // not tell.
        assert_eq!(by(&[saw(1, Some(1)), saw(1, None)]), None);
    }

    #[test]
    fn records_that_cannot_tell_keep_the_old_rule_every_step_saw_others() {
        // The batch step sees the holder of its srun step as another's process; the srun step
        // sees its own holder only: not shared.
        assert_eq!(by(&[saw(1, None), None]), None);
        // A process outside the job is seen by every step on the GPU.
        assert_eq!(
            by(&[saw(1, None), saw(3, None)]),
            Some(("other_processes".into(), 3))
        );
        assert_eq!(by(&[]), None);
    }

    #[test]
    fn slurms_shards_and_mps_are_the_jobs_own_word_whatever_the_steps_saw() {
        let shard = Shared::decide(Some(1), false, 0);
        assert_eq!(by(&[None, shard.clone()]), Some(("shard".into(), 0)));
        let mps = Shared::decide(None, true, 0);
        assert_eq!(by(&[saw(1, Some(1)), mps]), Some(("mps".into(), 0)));
    }
}
