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

/// Memory a v2 `memory.stat` shows the kernel can take back from the cgroup without killing
/// anything: file pages on the file LRU lists (`active_file`, `inactive_file`; dirty ones once
/// written back) and reclaimable slab (`slab_reclaimable`: dentries and inodes). Shmem and
/// tmpfs pages (`/dev/shm`, shared anonymous mappings) sit on the anon lists, so they are not
/// in it: without swap they stay. `None` when the file LRU counters are missing.
pub fn reclaimable_v2(stat: &str) -> Option<u64> {
    let file = keyed(stat, "active_file")?.saturating_add(keyed(stat, "inactive_file")?);
    Some(file.saturating_add(keyed(stat, "slab_reclaimable").unwrap_or(0)))
}

/// The same from a v1 `memory.stat`, whose hierarchical `total_*` counters match
/// `memory.usage_in_bytes` (a step's memory is charged in its task cgroups below it). v1
/// lists no slab figures, so kernel memory all counts as needed.
pub fn reclaimable_v1(stat: &str) -> Option<u64> {
    Some(keyed(stat, "total_active_file")?.saturating_add(keyed(stat, "total_inactive_file")?))
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

    /// A v2 step that wrote a 1.2 GB file and read it back: the file's pages are on the file
    /// lists, the job's own memory is a few MiB of anon and kernel memory.
    const V2_FILE_READER: &str = "anon 3145728\nfile 1287651328\nkernel 2621440\n\
        kernel_stack 98304\npagetables 225280\nsock 0\nshmem 0\nfile_mapped 2281472\n\
        file_dirty 0\nfile_writeback 0\nanon_thp 0\ninactive_anon 3100672\n\
        active_anon 45056\ninactive_file 1073741824\nactive_file 213909504\n\
        unevictable 0\nslab_reclaimable 1572864\nslab_unreclaimable 573440\nslab 2146304\n\
        workingset_refault_anon 0\npgfault 5000\n";
    /// A v2 step holding 300 MB in /dev/shm: counted in `file` and `shmem`, but on the anon
    /// lists.
    const V2_SHM: &str = "anon 1048576\nfile 315621376\nkernel 1048576\nshmem 314572800\n\
        inactive_anon 315359232\nactive_anon 262144\ninactive_file 786432\n\
        active_file 262144\nunevictable 0\nslab_reclaimable 131072\n\
        slab_unreclaimable 262144\n";

    #[test]
    fn v2_reclaimable_is_the_file_lists_and_reclaimable_slab() {
        // 1 GiB + 204 MiB of file pages and 1.5 MiB of dentries and inodes.
        assert_eq!(
            reclaimable_v2(V2_FILE_READER),
            Some(1_073_741_824 + 213_909_504 + 1_572_864)
        );
        // The /dev/shm pages are not on the file lists: only 1 MiB + 128 KiB reclaimable of
        // a `file` figure of 301 MiB.
        assert_eq!(reclaimable_v2(V2_SHM), Some(786_432 + 262_144 + 131_072));
        // No slab line (an older kernel): the file lists alone. No file lists: unknown.
        assert_eq!(
            reclaimable_v2("active_file 4096\ninactive_file 8192\n"),
            Some(12_288)
        );
        assert_eq!(reclaimable_v2("anon 4096\nfile 8192\n"), None);
    }

    #[test]
    fn v1_reclaimable_is_the_hierarchical_file_lists() {
        // The step's own counters are 0: its pages are charged in its task cgroups.
        let file_reader = "cache 0\nrss 0\nshmem 0\nactive_file 0\ninactive_file 0\n\
            total_cache 1288699904\ntotal_rss 4194304\ntotal_shmem 0\n\
            total_inactive_anon 4194304\ntotal_active_anon 0\n\
            total_inactive_file 1181745152\ntotal_active_file 106954752\n\
            total_unevictable 0\n";
        assert_eq!(
            reclaimable_v1(file_reader),
            Some(1_181_745_152 + 106_954_752)
        );
        // 300 MB in /dev/shm: in total_cache and total_shmem, on the anon lists.
        let shm = "total_cache 315621376\ntotal_rss 1048576\ntotal_shmem 314572800\n\
            total_inactive_anon 314572800\ntotal_active_anon 1048576\n\
            total_inactive_file 786432\ntotal_active_file 262144\n";
        assert_eq!(reclaimable_v1(shm), Some(1_048_576));
        // A v2 file is no v1 file.
        assert_eq!(reclaimable_v1(V2_FILE_READER), None);
    }

    #[test]
    fn procs_list() {
        assert_eq!(parse_procs("10\n11\n\n"), vec![10, 11]);
    }
}
