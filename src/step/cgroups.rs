//! Where a step's cgroups are: the step's own, from a task's `/proc/<pid>/cgroup`, and the
//! job's on this node above it.

use crate::cgroup::Cgroup;

/// The cgroup of a step, from one of its task's `/proc/<pid>/cgroup`: the path is cut after
/// its `step_*` component (Slurm's task cgroups sit below it). On v2 the step's `user` child
/// is taken when there is one: it holds the tasks but not slurmstepd itself.
pub fn step_cgroup_of(cgroup_root: &std::path::Path, proc_cgroup: &str) -> Option<Cgroup> {
    let cut: String = crate::cgroup::parse::parse_proc_cgroup(proc_cgroup)
        .into_iter()
        .map(|l| {
            let comps: Vec<&str> = l.path.split('/').collect();
            let path = match comps.iter().rposition(|c| c.starts_with("step_")) {
                Some(i) => comps[..=i].join("/"),
                None => l.path.clone(),
            };
            format!("{}:{}:{path}\n", l.hierarchy, l.controllers.join(","))
        })
        .collect();
    let mut cg = Cgroup::from_proc_cgroup(cgroup_root, &cut).ok()?;
    if cg.version == crate::cgroup::Version::V2 {
        let user = cg.memory_dir.join("user");
        if user.join("memory.current").exists() {
            cg.cpu_dir = Some(user.clone());
            cg.memory_dir = user;
        }
    }
    Some(cg)
}

/// The job's cgroup on this node: the parent of the step's `step_*` directory, memory counters
/// only. Never recognised by name: Slurm 26.05 names it by an opaque id (`SLURM_JOB_SLUID`),
/// not `job_<id>`.
pub(super) fn job_cgroup_of(step: &Cgroup) -> Option<Cgroup> {
    let step_dir = step.memory_dir.ancestors().find(|d| {
        d.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("step_"))
    })?;
    let dir = step_dir.parent()?;
    dir.join(match step.version {
        crate::cgroup::Version::V1 => "memory.usage_in_bytes",
        crate::cgroup::Version::V2 => "memory.current",
    })
    .exists()
    .then(|| Cgroup {
        version: step.version,
        memory_dir: dir.to_path_buf(),
        cpu_dir: None,
    })
}

/// Whether process `pid` (one on the step's GPU, outside the step's known processes) is in the
/// job's cgroup `job` on this node, that is in another step of the job, from its own
/// `/proc/<pid>/cgroup`. `None` when that cannot be read (it ended meanwhile), and when the
/// process is in the step's own cgroup `step`: a process of the step that reached the GPU
/// before the sampler counted it among the step's is neither another step's nor another job's.
pub(super) fn in_job(
    job: &Cgroup,
    step: Option<&Cgroup>,
    cgroup_root: &std::path::Path,
    procfs: &crate::proc::ProcFs,
    pid: u32,
) -> Option<bool> {
    let text = procfs.pid_cgroup(pid).ok()?;
    if step.is_some_and(|s| s.holds(cgroup_root, &text)) {
        return None;
    }
    Some(job.holds(cgroup_root, &text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;

    #[test]
    fn the_step_cgroup_is_found_above_a_task() {
        let t = TempTree::new("stepcg");
        let step = "memory/slurm_n1/uid_1000/job_7/step_3";
        t.write(&format!("{step}/memory.usage_in_bytes"), "1\n")
            .write(&format!("{step}/task_0/memory.usage_in_bytes"), "1\n");
        let proc = "11:memory:/slurm_n1/uid_1000/job_7/step_3/task_0\n0::/\n";
        let cg = step_cgroup_of(t.path(), proc).unwrap();
        assert_eq!(cg.memory_dir, t.path().join(step));
        let v2 = "system.slice/n1_slurmstepd.scope/job_7/step_3";
        t.write(&format!("{v2}/memory.current"), "1\n")
            .write(&format!("{v2}/user/memory.current"), "1\n")
            .write(&format!("{v2}/user/task_0/memory.current"), "1\n");
        let cg = step_cgroup_of(t.path(), &format!("0::/{v2}/user/task_0\n")).unwrap();
        assert_eq!(cg.memory_dir, t.path().join(v2).join("user"));
        t.write(
            "system.slice/n1_slurmstepd.scope/job_7/memory.current",
            "1\n",
        );
        let job = job_cgroup_of(&cg).unwrap();
        assert_eq!(
            job.memory_dir,
            t.path().join("system.slice/n1_slurmstepd.scope/job_7")
        );
        // Slurm 26.05: the job's directory has an opaque name, and `user/task_special` beside
        // the tasks.
        let v26 = "system.slice/n1_slurmstepd.scope/s1H9M83SWQ0100/step_batch";
        t.write(
            "system.slice/n1_slurmstepd.scope/s1H9M83SWQ0100/memory.current",
            "1\n",
        )
        .write(&format!("{v26}/memory.current"), "1\n")
        .write(&format!("{v26}/user/memory.current"), "1\n")
        .write(&format!("{v26}/user/task_special/memory.current"), "0\n")
        .write(&format!("{v26}/user/task_0/memory.current"), "1\n");
        let cg = step_cgroup_of(t.path(), &format!("0::/{v26}/user/task_0\n")).unwrap();
        assert_eq!(cg.memory_dir, t.path().join(v26).join("user"));
        let job = job_cgroup_of(&cg).unwrap();
        assert_eq!(
            job.memory_dir,
            t.path()
                .join("system.slice/n1_slurmstepd.scope/s1H9M83SWQ0100")
        );
        // No cgroup where none exists: a step directory at the top of the hierarchy.
        let top = Cgroup {
            version: crate::cgroup::Version::V2,
            memory_dir: t.path().join("nowhere/step_0"),
            cpu_dir: None,
        };
        assert!(job_cgroup_of(&top).is_none());
    }

    /// A process on the step's GPU: another step's of the same job is the job's own, another
    /// job's is not, one that ended is unknown; on v1, v2, and 26.05's opaque job directory.
    #[test]
    fn a_process_of_another_step_is_the_jobs_and_one_of_another_job_is_not() {
        let t = TempTree::new("injob");
        let procfs = crate::proc::ProcFs::new(t.path().join("proc"));
        let cgroot = t.path().join("cg");
        let cases = [
            (
                "memory/slurm_n1/uid_1000",
                "11:memory:/slurm_n1/uid_1000/{job}/{step}/task_0\n0::/\n",
                "memory.usage_in_bytes",
                "job_7",
                "job_8",
            ),
            (
                "system.slice/n1_slurmstepd.scope",
                "0::/system.slice/n1_slurmstepd.scope/{job}/{step}/user/task_0\n",
                "memory.current",
                "job_7",
                "job_8",
            ),
            (
                "system.slice/n1_slurmstepd.scope",
                "0::/system.slice/n1_slurmstepd.scope/{job}/{step}/user/task_0\n",
                "memory.current",
                "s1H9M83SWQ0100",
                "s1H9M83SWQ0200",
            ),
        ];
        for (k, (base, proc, usage, job, other_job)) in cases.into_iter().enumerate() {
            let text = |j: &str, step: &str| proc.replace("{job}", j).replace("{step}", step);
            let dir = |j: &str, step: &str| format!("cg/{base}/{j}/{step}");
            for (j, step) in [(job, "step_batch"), (job, "step_0"), (other_job, "step_0")] {
                t.write(&format!("cg/{base}/{j}/{usage}"), "1\n")
                    .write(&format!("{}/{usage}", dir(j, step)), "1\n")
                    .write(&format!("{}/user/{usage}", dir(j, step)), "1\n")
                    .write(&format!("{}/task_0/{usage}", dir(j, step)), "1\n");
            }
            // The batch step, found from its task's /proc/<pid>/cgroup as the plugin does.
            let (own, sibling, stranger, gone) = (
                100 * k as u32 + 1,
                100 * k as u32 + 2,
                100 * k as u32 + 3,
                100 * k as u32 + 4,
            );
            t.write(&format!("proc/{own}/cgroup"), &text(job, "step_batch"))
                .write(&format!("proc/{sibling}/cgroup"), &text(job, "step_0"))
                .write(
                    &format!("proc/{stranger}/cgroup"),
                    &text(other_job, "step_0"),
                );
            let step = step_cgroup_of(&cgroot, &text(job, "step_batch")).unwrap();
            let job_cg = job_cgroup_of(&step).unwrap();
            let own_step = Some(&step);
            assert_eq!(
                in_job(&job_cg, None, &cgroot, &procfs, own),
                Some(true),
                "case {k}"
            );
            // The step's own process, not yet among those the sampler knows, is no other
            // step's.
            assert_eq!(
                in_job(&job_cg, own_step, &cgroot, &procfs, own),
                None,
                "case {k}"
            );
            assert_eq!(
                in_job(&job_cg, own_step, &cgroot, &procfs, sibling),
                Some(true),
                "case {k}"
            );
            assert_eq!(
                in_job(&job_cg, own_step, &cgroot, &procfs, stranger),
                Some(false),
                "case {k}"
            );
            assert_eq!(
                in_job(&job_cg, own_step, &cgroot, &procfs, gone),
                None,
                "case {k}"
            );
        }
    }
}
