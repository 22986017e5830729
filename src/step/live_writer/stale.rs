//! Removing the live files of this node left behind by a slurmstepd that was killed, once when
//! a step starts.
//!
//! The live directory is the admin's choice and may hold other files of root's (a `live_dir`
//! set to `/run` by mistake): only a file this plugin wrote is removed. That is a file named
//! `<cluster>.<job>.<step>.<node>.json` for this cluster and this node (the job and step as
//! Slurm writes them), a regular file of the writer's with one link, that holds a live state
//! whose own name is that name; or a temporary file named `.<that name>.<pid>.<tid>.tmp`, a
//! regular file of the writer's with one link. Both must be older than
//! [`STALE_REMOVAL_AGE`] (or three intervals), and a state must be stale by its own interval.
//! Everything is done relative to the open directory, without following a link.

use std::ffi::CString;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::super::live::{self, Identity, MAX_FILE_BYTES, Parsed, stale_after};
use super::super::own_dir::OwnDir;
use super::super::safe_read;
use super::{MAX_ENTRIES_CLEANED, STALE_REMOVAL_AGE};
use crate::sys;

/// A number as Slurm writes a job or step id: digits, no sign, no leading zero, within `u32`.
fn is_id(s: &str) -> bool {
    s.parse::<u32>().is_ok_and(|n| n.to_string() == s)
}

/// Whether `name` is the name of a live state file of cluster `cluster` and node `node` (both
/// as file names have them): `<cluster>.<job>.<step>.<node>.json`.
pub(super) fn is_state_name_of(name: &str, cluster: &str, node: &str) -> bool {
    let middle = name
        .strip_prefix(cluster)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_suffix(".json"))
        .and_then(|r| r.strip_suffix(node))
        .and_then(|r| r.strip_suffix('.'));
    let Some((job, step)) = middle.and_then(|m| m.split_once('.')) else {
        return false;
    };
    is_id(job) && (matches!(step, "batch" | "extern" | "interactive") || is_id(step))
}

/// Whether `name` is the name of a temporary file of such a state file:
/// `.<state name>.<pid>.<tid>.tmp`.
pub(super) fn is_temporary_name_of(name: &str, cluster: &str, node: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|r| r.strip_suffix(".tmp")) else {
        return false;
    };
    let mut parts = rest.rsplitn(3, '.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(tid), Some(pid), Some(state)) => {
            is_id(tid) && is_id(pid) && is_state_name_of(state, cluster, node)
        }
        _ => false,
    }
}

/// Removes the files of this node that a killed slurmstepd left in `d` (at `dir`), written by
/// `owner` (see the module's description).
pub(super) fn remove_stale(d: &OwnDir, dir: &Path, id: &Identity, owner: u32, interval: Duration) {
    let cluster = crate::config::slurmconf::cluster_dir_name(Some(&id.cluster));
    let node = super::super::record::file_safe(&id.node);
    let own = id.file_name();
    let age = STALE_REMOVAL_AGE.max(Duration::from_secs_f64(stale_after(interval.as_secs_f64())));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten().take(MAX_ENTRIES_CLEANED) {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let temporary = is_temporary_name_of(&name, &cluster, &node);
        if name == own || !(temporary || is_state_name_of(&name, &cluster, &node)) {
            continue;
        }
        let Ok(c) = CString::new(name.as_bytes()) else {
            continue;
        };
        let ours = if temporary {
            d.holds_own_file(&c) && old(d, &c, age)
        } else {
            stale_state(d, &name, owner, age)
        };
        if ours {
            let _ = sys::unlinkat(d.file(), &c);
        }
    }
}

/// Whether entry `c` was last changed more than `age` ago (through an `O_PATH` descriptor: the
/// entry itself, not opened).
fn old(d: &OwnDir, c: &CString, age: Duration) -> bool {
    sys::openat(
        d.file(),
        c,
        libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
    )
    .and_then(|f| f.metadata())
    .and_then(|m| m.modified())
    .ok()
    .and_then(|t| SystemTime::now().duration_since(t).ok())
    .is_some_and(|a| a > age)
}

/// Whether entry `name` is a live state this plugin wrote (a regular file of `owner`'s with one
/// link, holding the state of the step its name says), last changed more than `age` ago, and
/// stale by its own interval: a step sampled less often than the age (a user may ask for a
/// day) still runs.
fn stale_state(d: &OwnDir, name: &str, owner: u32, age: Duration) -> bool {
    let Some((f, len)) = open_own(d, name, owner) else {
        return false;
    };
    let changed_long_ago = f
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|a| a > age);
    if !changed_long_ago {
        return false;
    }
    let Ok(bytes) = safe_read::read_bounded(&f, len, MAX_FILE_BYTES) else {
        return false;
    };
    match live::parse(&bytes) {
        Parsed::State(s) => {
            s.file_name() == name
                && s.written_at + stale_after(s.interval_seconds) <= crate::clock::unix_now()
        }
        _ => false,
    }
}

/// Opens entry `name` for reading without following a link or blocking, and judges it on its
/// descriptor: a regular file of `owner`'s, one link, at most [`MAX_FILE_BYTES`].
fn open_own(d: &OwnDir, name: &str, owner: u32) -> Option<(std::fs::File, u64)> {
    let c = CString::new(name).ok()?;
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let f = sys::openat(d.file(), &c, flags).ok()?;
    let len = safe_read::check_open(&f, owner, MAX_FILE_BYTES).ok()?;
    Some((f, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_this_cluster_and_node_are_taken() {
        let ours = |n: &str| is_state_name_of(n, "c.1", "n1.x");
        assert!(ours("c.1.5.batch.n1.x.json") && ours("c.1.4294967295.0.n1.x.json"));
        for n in [
            "c.1.5.n1.x.json",
            "c.1.05.0.n1.x.json",
            "c.1.4294967296.0.n1.x.json",
            "c.1.5.-1.n1.x.json",
            "c.1.5.batch.extra.n1.x.json",
            "c.1.5.batch.n1.x.json.bak",
            "c.2.5.batch.n1.x.json",
            "c.1.5.batch.n2.x.json",
            "xc.1.5.batch.n1.x.json",
        ] {
            assert!(!ours(n), "{n}");
        }
        let tmp = |n: &str| is_temporary_name_of(n, "c.1", "n1.x");
        assert!(tmp(".c.1.5.batch.n1.x.json.77.78.tmp"));
        for n in [
            "c.1.5.batch.n1.x.json.77.78.tmp",
            ".c.1.5.batch.n1.x.json.77.tmp",
            ".c.1.5.batch.n1.x.json.77.78x.tmp",
            ".c.1.5.n1.x.json.77.78.tmp",
        ] {
            assert!(!tmp(n), "{n}");
        }
    }
}
