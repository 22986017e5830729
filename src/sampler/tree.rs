//! Which processes are tracked at this instant.

use std::collections::{HashMap, HashSet};

use super::Target;
use crate::cgroup::{Cgroup, CgroupError};
use crate::proc::ProcFs;

/// The tracked pids now: the cgroup's processes when there is one, else the descendants of the
/// tree roots (and the main process itself), walking `children` files, or every process's parent
/// where the kernel has no `children` files; visiting at most `limit` processes of the tree; also says whether the walk
/// was complete (a cgroup's list always is).
#[cfg(test)]
pub fn members_limited(procfs: &ProcFs, target: &Target, limit: usize) -> (Vec<u32>, bool) {
    members_with(procfs, target, limit, &mut |c| c.procs(), &mut |p| {
        procfs.children(p)
    })
}

/// As [`members_limited`], with the cgroup's processes listed by `cgroup_procs` (the sampler
/// looks for nested cgroups once a second, not at every sample) and each process's children by
/// `children` (a [`crate::proc::watch::Watch`] keeps their files open).
pub fn members_with(
    procfs: &ProcFs,
    target: &Target,
    limit: usize,
    cgroup_procs: &mut dyn FnMut(&Cgroup) -> Result<Vec<u32>, CgroupError>,
    children: &mut dyn FnMut(u32) -> Result<Option<Vec<u32>>, crate::proc::ProcError>,
) -> (Vec<u32>, bool) {
    let exclude: HashSet<u32> = target.exclude.iter().copied().collect();
    if let Some(cg) = &target.cgroup {
        if let Ok(mut pids) = cgroup_procs(cg) {
            pids.retain(|p| !exclude.contains(p));
            if !pids.contains(&target.main) && procfs.pid_stat(target.main).is_ok() {
                pids.push(target.main);
            }
            return (pids, true);
        }
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<u32> = target.tree_roots.clone();
    stack.push(target.main);
    let mut parents: Option<HashMap<u32, Vec<u32>>> = None;
    while let Some(pid) = stack.pop() {
        if seen.len() >= limit {
            return (out, false);
        }
        if !seen.insert(pid) {
            continue;
        }
        if !exclude.contains(&pid) {
            out.push(pid);
        }
        let kids = match children(pid) {
            Ok(Some(k)) => k,
            Ok(None) => {
                let map = parents.get_or_insert_with(|| {
                    let mut m: HashMap<u32, Vec<u32>> = HashMap::new();
                    for (p, pp) in procfs.all_parents().unwrap_or_default() {
                        m.entry(pp).or_default().push(p);
                    }
                    m
                });
                map.get(&pid).cloned().unwrap_or_default()
            }
            Err(_) => Vec::new(),
        };
        stack.extend(kids);
    }
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn finds_a_grandchild_and_excludes_the_root() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 2 & sleep 2; wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let me = std::process::id();
        let t = Target {
            main: child.id(),
            tree_roots: vec![me],
            exclude: vec![me],
            cgroup: None,
            in_process: false,
        };
        let m = members_limited(&ProcFs::default(), &t, usize::MAX).0;
        // The command's own tree, walked whole and cut short.
        let own = Target {
            tree_roots: vec![],
            exclude: vec![],
            ..t.clone()
        };
        let (all, complete) = members_limited(&ProcFs::default(), &own, 10);
        let (two, cut_complete) = members_limited(&ProcFs::default(), &own, 2);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!m.contains(&me));
        assert!(m.contains(&child.id()));
        assert!(m.len() >= 3, "sh and two sleeps: {m:?}");
        assert!(complete && all.len() == 3, "{all:?}");
        assert!(!cut_complete);
        assert_eq!(two.len(), 2);
        assert_eq!(two[0], child.id(), "the root comes first");
    }
}
