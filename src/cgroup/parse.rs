//! Pure parsers of cgroup files (v1 and v2), tested on literal contents.

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroupLine {
    /// Hierarchy id; 0 is the unified (v2) hierarchy.
    pub hierarchy: u32,
    /// Controllers bound to the hierarchy (empty for v2).
    pub controllers: Vec<String>,
    /// Path of the cgroup below the hierarchy's mount point, starting with `/`.
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup`. Lines that do not fit are skipped.
pub fn parse_proc_cgroup(contents: &str) -> Vec<ProcCgroupLine> {
    contents
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let hierarchy = it.next()?.parse().ok()?;
            let controllers = it
                .next()?
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            let path = it.next()?.to_string();
            Some(ProcCgroupLine {
                hierarchy,
                controllers,
                path,
            })
        })
        .collect()
}

/// A single-number file (`memory.current`, `memory.max_usage_in_bytes`, `cpuacct.usage`).
/// `max` (no limit) gives `None`.
pub fn parse_single(contents: &str) -> Option<u64> {
    let t = contents.trim();
    if t == "max" { None } else { t.parse().ok() }
}

/// A v1 memory limit: the kernel writes "no limit" as a huge page-aligned number.
pub fn v1_limit(value: u64) -> Option<u64> {
    if value >= (i64::MAX as u64) - 4096 * 2 {
        None
    } else {
        Some(value)
    }
}

/// The value of `key` in a flat keyed file (`memory.stat`, `memory.events`, `cpu.stat`,
/// v1 `memory.oom_control`): lines of `key value`.
pub fn keyed(contents: &str, key: &str) -> Option<u64> {
    contents.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        if it.next()? == key {
            it.next()?.parse().ok()
        } else {
            None
        }
    })
}

/// Pids listed in `cgroup.procs` (one per line).
pub fn parse_procs(contents: &str) -> Vec<u32> {
    contents
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_cgroup_v1_and_v2_lines() {
        let s = "12:memory:/slurm_n1/uid_1000/job_7/step_0/task_1\n\
                 4:cpu,cpuacct:/slurm_n1/uid_1000/job_7/step_0\n\
                 1:name=systemd:/system.slice/slurmd.service\n\
                 0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_1\n";
        let l = parse_proc_cgroup(s);
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].hierarchy, 12);
        assert_eq!(l[0].controllers, vec!["memory"]);
        assert_eq!(l[0].path, "/slurm_n1/uid_1000/job_7/step_0/task_1");
        assert_eq!(l[1].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(l[3].hierarchy, 0);
        assert!(l[3].controllers.is_empty());
        assert_eq!(
            l[3].path,
            "/system.slice/slurmstepd.scope/job_7/step_0/user/task_1"
        );
    }

    #[test]
    fn paths_with_colons_survive() {
        let l = parse_proc_cgroup("0::/a:b/c\n");
        assert_eq!(l[0].path, "/a:b/c");
    }

    #[test]
    fn single_values_and_limits() {
        assert_eq!(parse_single("268435456\n"), Some(268_435_456));
        assert_eq!(parse_single("max\n"), None);
        assert_eq!(parse_single(""), None);
        assert_eq!(v1_limit(9_223_372_036_854_771_712), None);
        assert_eq!(v1_limit(1 << 30), Some(1 << 30));
    }

    #[test]
    fn keyed_files() {
        let v1_stat = "cache 4096\nrss 1048576\ntotal_cache 8192\ntotal_rss 2097152\n";
        assert_eq!(keyed(v1_stat, "total_rss"), Some(2_097_152));
        assert_eq!(keyed(v1_stat, "rss"), Some(1_048_576));
        assert_eq!(keyed(v1_stat, "total_swap"), None);
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(keyed(oom, "oom_kill"), Some(2));
        let events = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        let cpu = "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n";
        assert_eq!(keyed(cpu, "usage_usec"), Some(1_500_000));
    }

    #[test]
    fn procs_list() {
        assert_eq!(parse_procs("10\n11\n\n"), vec![10, 11]);
    }
}
