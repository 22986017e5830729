//! The directories the plugin writes as root: the spool (records) and the live directory the
//! exporter reads, checked with the plugin's own rules and nothing made.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{Check, SlurmConfText};
use crate::config::Config;
use crate::config::slurmconf::cluster_dir_name;

/// The spool: `spool_dir` and this cluster's directory in it, as `Spool::open` and
/// `for_cluster` check them in slurmstepd (root's, a real directory, writable by no one else,
/// every directory above root's alone); a missing one is made at the first step, when the
/// directory above it is there.
pub fn check(cfg: &Config, conf: &SlurmConfText, out: &mut Vec<Check>) {
    out.push(spool_check(
        &cfg.spool_dir,
        &cluster_dir_name(conf.conf.cluster_name.as_deref()),
    ));
}

/// The spool check of `root` for cluster directory `cluster`.
pub fn spool_check(root: &Path, cluster: &str) -> Check {
    let name = "spool";
    let fix = "make it root's and writable by root alone (`chown root: DIR; chmod 0755 DIR`); \
               slurm/README.md, \"Where the records live\"";
    if let Err(why) = crate::trust::check_root_trusted_dir(root, "spool_dir") {
        return Check::fail(name, format!("{why}: no step is recorded"), fix);
    }
    let dir = root.join(cluster);
    for d in [root, dir.as_path()] {
        match std::fs::symlink_metadata(d) {
            Ok(_) => {
                if let Err(e) = crate::step::spool::check_dir(d, 0) {
                    return Check::fail(name, format!("{e}: no step is recorded"), fix);
                }
            }
            Err(_) if d.parent().is_some_and(Path::is_dir) => {
                return Check::ok(
                    name,
                    format!("{} is made at the first tracked step", d.display()),
                );
            }
            Err(e) => {
                return Check::fail(
                    name,
                    format!(
                        "{}: {e}, and the plugin makes only its last component",
                        d.display()
                    ),
                    "make the directory above it (and mount the shared spool, if it is one)",
                );
            }
        }
    }
    Check::ok(
        name,
        format!("{} is root's, writable by root alone", dir.display()),
    )
}

/// The live directory (`live_dir`, which the exporter reads): off, or usable by the plugin
/// and readable by `live_group`. Live state costs nothing of the records: a problem is a
/// warning.
pub fn live(cfg: &Config) -> Check {
    let name = "live";
    if cfg.live_dir.is_empty() {
        return Check::ok(name, "live_dir is \"\": no live state, no exporter");
    }
    let dir = Path::new(&cfg.live_dir);
    if let Some(why) = cfg.live_dir_conflict() {
        return Check::warn(
            name,
            why,
            "give live_dir a directory of its own (/run/gpu-tracker)",
        );
    }
    let gid = match cfg.live_group.as_str() {
        "" => None,
        g => match crate::sys::group_id(g) {
            Some(gid) => Some((gid, g)),
            None => {
                return Check::warn(
                    name,
                    format!("live_group {g:?}: no such group on this node"),
                    "make the group the exporter runs in, or correct live_group",
                );
            }
        },
    };
    if let Err(why) = crate::trust::check_root_trusted_dir(dir, "live_dir") {
        return Check::warn(
            name,
            format!("{why}: no live state"),
            "make it root's alone",
        );
    }
    let m = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(_) if dir.parent().is_some_and(Path::is_dir) => {
            return Check::ok(
                name,
                format!("{} is made at the first tracked step", dir.display()),
            );
        }
        Err(e) => {
            return Check::warn(
                name,
                format!(
                    "{}: {e}, and the plugin makes only its last component",
                    dir.display()
                ),
                "make the directory above it",
            );
        }
    };
    live_decision(dir, m.is_dir(), m.uid(), m.gid(), m.mode(), gid)
}

/// The live check of an existing directory: its kind, owner, group and mode against the
/// group the exporter reads it as.
pub fn live_decision(
    dir: &Path,
    is_dir: bool,
    uid: u32,
    gid: u32,
    mode: u32,
    group: Option<(u32, &str)>,
) -> Check {
    let name = "live";
    let shown = dir.display();
    if !is_dir || uid != 0 || mode & 0o022 != 0 {
        return Check::warn(
            name,
            format!(
                "{shown} is not a directory of root's that no one else can write to \
                 (uid {uid}, mode {:o}): no live state",
                mode & 0o7777
            ),
            "remove it (the plugin makes it) or make it root's, mode 0750",
        );
    }
    match group {
        Some((g, named)) if gid != g || mode & 0o050 != 0o050 => Check::warn(
            name,
            format!(
                "{shown} is group {gid}, mode {:o}: the exporter (live_group {named}) cannot \
                 read it",
                mode & 0o7777
            ),
            format!(
                "`chgrp {named} {shown}; chmod g+rx {shown}`, or remove it and let the plugin \
                 make it"
            ),
        ),
        Some((_, named)) => Check::ok(
            name,
            format!("{shown}: root's, readable by live_group {named} (the exporter's)"),
        ),
        None => Check::ok(
            name,
            format!(
                "{shown}: root's; no live_group, so only root (an exporter run as root) reads it"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use crate::check::Status;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_spool_writable_by_others_or_not_the_writers_fails() {
        let t = TempTree::new("check-spool");
        let root = t.path().join("spool");
        // Nothing there yet: made at the first step.
        let c = spool_check(&root, "c");
        if crate::sys::euid() != 0 {
            // Not root: the temporary directory is not root's, so nothing is trusted.
            assert_eq!(c.status, Status::Fail, "{c:?}");
            return;
        }
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.said.contains("made at the first tracked step"),
            "{}",
            c.said
        );
        std::fs::create_dir_all(root.join("c")).unwrap();
        let c = spool_check(&root, "c");
        assert_eq!(c.status, Status::Ok, "{c:?}");
        std::fs::set_permissions(root.join("c"), std::fs::Permissions::from_mode(0o775)).unwrap();
        let c = spool_check(&root, "c");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.said.contains("writable by group or others (mode 775)"),
            "{}",
            c.said
        );
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = spool_check(&root, "c");
        assert!(c.said.contains("not trusted"), "{}", c.said);
        let c = spool_check(&t.path().join("no/such/spool"), "c");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.said.contains("makes only its last component"),
            "{}",
            c.said
        );
    }

    #[test]
    fn the_live_directory_must_be_roots_and_readable_by_its_group() {
        let d = Path::new("/run/gpu-tracker");
        let ok = live_decision(d, true, 0, 50, 0o40750, Some((50, "gtlive")));
        assert_eq!(ok.status, Status::Ok);
        let c = live_decision(d, true, 0, 0, 0o40700, Some((50, "gtlive")));
        assert_eq!(c.status, Status::Warn);
        assert!(c.said.contains("cannot read it"), "{}", c.said);
        assert_eq!(
            live_decision(d, true, 1000, 50, 0o40750, Some((50, "gtlive"))).status,
            Status::Warn
        );
        assert_eq!(
            live_decision(d, true, 0, 50, 0o40770, Some((50, "gtlive"))).status,
            Status::Warn
        );
        assert_eq!(
            live_decision(d, false, 0, 50, 0o120777, Some((50, "gtlive"))).status,
            Status::Warn
        );
        assert_eq!(
            live_decision(d, true, 0, 0, 0o40700, None).status,
            Status::Ok
        );
    }

    #[test]
    fn live_state_off_or_meeting_the_spool_is_told() {
        let cfg = Config {
            live_dir: String::new(),
            ..Config::default()
        };
        assert_eq!(live(&cfg).status, Status::Ok);
        let cfg = Config {
            live_dir: "/var/spool/gt/live".into(),
            spool_dir: "/var/spool/gt".into(),
            ..Config::default()
        };
        let c = live(&cfg);
        assert_eq!(c.status, Status::Warn);
        assert!(c.said.contains("is inside spool_dir"), "{}", c.said);
    }
}
