//! The cgroups the plugin reads a step's memory and CPU from: the node's cgroup version
//! against Slurm's cgroup plugin, Slurm's process tracking, and where the job cgroups are.

use std::path::{Path, PathBuf};

use super::slurmd::Slurmd;
use super::{Check, Places, SlurmConfText, conf_value};

/// The cgroup interface of a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mounted {
    /// The unified hierarchy at the root.
    V2,
    /// Separate controllers (`memory/`, `cpuacct/`), v1 or hybrid.
    V1,
    /// Neither.
    None,
}

/// The interface mounted at `root`.
pub fn mounted(root: &Path) -> Mounted {
    if root.join("memory").is_dir() {
        Mounted::V1
    } else if root.join("cgroup.controllers").exists() {
        Mounted::V2
    } else {
        Mounted::None
    }
}

/// The check: `cgroup.conf`'s `CgroupPlugin` (beside slurm.conf; `autodetect` when not set)
/// and slurm.conf's `ProctrackType` against what the node has.
pub fn check(conf: &SlurmConfText, daemons: &[Slurmd], places: &Places) -> Check {
    let cgroup_conf = conf
        .path
        .parent()
        .unwrap_or(Path::new("/"))
        .join("cgroup.conf");
    let plugin = std::fs::read_to_string(&cgroup_conf)
        .ok()
        .and_then(|t| conf_value(&t, "CgroupPlugin"))
        .unwrap_or_else(|| "autodetect".into());
    let proctrack = conf.value("ProctrackType").unwrap_or_default();
    let have = mounted(&places.cgroup_root);
    let controllers =
        std::fs::read_to_string(places.cgroup_root.join("cgroup.controllers")).unwrap_or_default();
    let slurmd_cgroup = daemons.first().and_then(|d| {
        std::fs::read_to_string(places.proc_root.join(d.pid.to_string()).join("cgroup")).ok()
    });
    let nodes: Vec<&str> = daemons.iter().filter_map(|d| d.node.as_deref()).collect();
    let whence = job_cgroups(&places.cgroup_root, have, slurmd_cgroup.as_deref(), &nodes);
    decide(have, &plugin, &proctrack, &controllers, &whence)
}

/// Where the job cgroups of this node are (or will be made), for people.
pub fn job_cgroups(
    root: &Path,
    have: Mounted,
    slurmd_cgroup: Option<&str>,
    nodes: &[&str],
) -> String {
    // Several slurmd on one machine name their trees by node (`slurm_<node>`,
    // `<node>_slurmstepd.scope`).
    match have {
        Mounted::V1 => {
            let names: Vec<String> = if nodes.len() > 1 {
                nodes.iter().map(|n| format!("slurm_{n}")).collect()
            } else {
                vec!["slurm".into()]
            };
            let dirs: Vec<String> = names
                .iter()
                .map(|n| format!("{}/uid_*/job_*", root.join("memory").join(n).display()))
                .collect();
            dirs.join(", ")
        }
        Mounted::V2 => {
            // Slurm's cgroup/v2 puts slurmstepd's scope beside slurmd's own cgroup.
            let slurmd_dir = slurmd_cgroup
                .and_then(|c| c.lines().find_map(|l| l.strip_prefix("0::")))
                .map(|p| PathBuf::from(p.trim().trim_start_matches('/')));
            let slice = slurmd_dir
                .as_deref()
                .and_then(Path::parent)
                .map(|p| root.join(p))
                .unwrap_or_else(|| root.join("system.slice"));
            let scopes: Vec<String> = if nodes.len() > 1 {
                nodes
                    .iter()
                    .map(|n| format!("{n}_slurmstepd.scope"))
                    .collect()
            } else {
                vec!["slurmstepd.scope".into()]
            };
            scopes
                .iter()
                .map(|s| format!("{}/job_*", slice.join(s).display()))
                .collect::<Vec<_>>()
                .join(", ")
        }
        Mounted::None => String::new(),
    }
}

/// The decision, from what the node has (`have`, the root's `controllers` on v2), Slurm's
/// `CgroupPlugin` and `ProctrackType`, and where the job cgroups are (`whence`).
pub fn decide(
    have: Mounted,
    plugin: &str,
    proctrack: &str,
    controllers: &str,
    whence: &str,
) -> Check {
    let name = "cgroups";
    let wants = match plugin {
        "cgroup/v1" => Some(Mounted::V1),
        "cgroup/v2" => Some(Mounted::V2),
        _ => None,
    };
    if have == Mounted::None {
        return Check::fail(
            name,
            "no cgroup filesystem is mounted: steps have no memory counters",
            "mount the cgroup filesystem (systemd does at boot)",
        );
    }
    let v = if have == Mounted::V2 { "v2" } else { "v1" };
    if wants.is_some_and(|w| w != have) {
        return Check::fail(
            name,
            format!("this node has cgroup {v}, but cgroup.conf says CgroupPlugin={plugin}"),
            format!("set CgroupPlugin=cgroup/{v} (or autodetect) in cgroup.conf"),
        );
    }
    if have == Mounted::V2 && !controllers.split_whitespace().any(|c| c == "memory") {
        return Check::warn(
            name,
            "cgroup v2 without the memory controller at the root: no memory figures",
            "enable the memory controller (systemd: it is on by default)",
        );
    }
    if proctrack != "proctrack/cgroup" {
        let said = if proctrack.is_empty() {
            "slurm.conf sets no ProctrackType".to_string()
        } else {
            format!("ProctrackType={proctrack}")
        };
        return Check::warn(
            name,
            format!(
                "cgroup {v}, but {said}: steps get no cgroup of their own, and their memory is summed from /proc"
            ),
            "set ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup,task/affinity",
        );
    }
    Check::ok(
        name,
        format!("cgroup {v} (CgroupPlugin={plugin}); job cgroups at {whence}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use crate::check::Status;

    #[test]
    fn the_mounted_interface_is_told_by_its_files() {
        let t = TempTree::new("check-cg");
        assert_eq!(mounted(t.path()), Mounted::None);
        t.write("cgroup.controllers", "cpu memory\n");
        assert_eq!(mounted(t.path()), Mounted::V2);
        // Hybrid: v1 controllers beside a unified tree; Slurm uses v1 there.
        std::fs::create_dir_all(t.path().join("memory")).unwrap();
        assert_eq!(mounted(t.path()), Mounted::V1);
    }

    #[test]
    fn job_cgroups_are_placed_as_slurm_places_them() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            job_cgroups(root, Mounted::V1, None, &["vm"]),
            "/sys/fs/cgroup/memory/slurm/uid_*/job_*"
        );
        assert_eq!(
            job_cgroups(root, Mounted::V1, None, &["a", "b"]),
            "/sys/fs/cgroup/memory/slurm_a/uid_*/job_*, /sys/fs/cgroup/memory/slurm_b/uid_*/job_*"
        );
        assert_eq!(
            job_cgroups(
                root,
                Mounted::V2,
                Some("0::/system.slice/slurmd.service\n"),
                &[]
            ),
            "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_*"
        );
    }

    #[test]
    fn a_cgroup_plugin_of_the_other_version_fails() {
        let ok = decide(
            Mounted::V2,
            "autodetect",
            "proctrack/cgroup",
            "cpu memory",
            "X",
        );
        assert_eq!(ok.status, Status::Ok);
        assert_eq!(
            ok.said,
            "cgroup v2 (CgroupPlugin=autodetect); job cgroups at X"
        );
        let c = decide(Mounted::V2, "cgroup/v1", "proctrack/cgroup", "memory", "X");
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.said.contains("this node has cgroup v2, but"),
            "{}",
            c.said
        );
        assert_eq!(
            decide(Mounted::V1, "cgroup/v1", "proctrack/cgroup", "", "X").status,
            Status::Ok
        );
        assert_eq!(
            decide(Mounted::V2, "cgroup/v2", "proctrack/cgroup", "cpu", "X").status,
            Status::Warn
        );
        let c = decide(Mounted::V1, "autodetect", "proctrack/linuxproc", "", "X");
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.said.contains("ProctrackType=proctrack/linuxproc"),
            "{}",
            c.said
        );
        assert_eq!(
            decide(Mounted::None, "autodetect", "", "", "").status,
            Status::Fail
        );
    }
}
