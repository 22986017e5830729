//! Writing a running step's live state file ([`super::live`]) from the sampler thread.
//!
//! `<live_dir>/<cluster>.<jobid>.<step>.<node>.json`, rewritten after a sample at most once per
//! `live_interval_seconds`, removed when the step ends. Root writes it inside slurmstepd, so:
//! - the directory is made when missing (only its last component: `/run` must be there), first
//!   private, then given to `live_group` (mode 0750; 0700 without a group); an existing one is
//!   used only when it is a real directory (not a link) of the writer's that no one else can
//!   write to, and, for root, when every directory above it is root's alone
//!   ([`crate::trust`]); its group is set to `live_group` (with read and search for the group);
//! - a file is written under a temporary name beginning with `.` (no reader takes it), mode
//!   0600, given to the group (0640), checked to be the writer's, then renamed into place: a
//!   reader sees the old state or the new one, never half; a temporary file left by a write
//!   cut short (its clean-up failed as the user) is replaced by the next write (`own_dir.rs`);
//! - no fsync: the directory is a tmpfs, and a state lost in a crash is stale anyway;
//! - glibc's `seteuid` holds for every thread, and slurmstepd takes the user's id while it runs
//!   `user_init`: a write due then is put off to the next sample, not made as the user;
//! - a failure is one fault in the record (the first), never the step's failure.
//!
//! When a step starts, files of this node left by a slurmstepd that was killed (older than an
//! hour, and stale by their own interval) are removed, once.

use std::fs::{self, DirBuilder, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::live::{self, Identity, LiveState, MAX_FILE_BYTES, Parsed, stale_after};
use super::own_dir::{DirError, OwnDir};
use super::setup::LiveSetup;
use super::state::Acc;
use crate::sys;

/// A file of this node older than this (and stale by its own interval) is removed when a step
/// starts: its slurmstepd was killed before it could remove it.
pub const STALE_REMOVAL_AGE: Duration = Duration::from_secs(3600);

/// Most directory entries looked at for stale files.
const MAX_ENTRIES_CLEANED: usize = 4096;

/// The step's live state file.
pub(super) struct LiveWriter {
    setup: LiveSetup,
    id: Identity,
    name: String,
    /// Who writes: root in slurmstepd (the test's user in tests).
    owner: u32,
    next: Option<Instant>,
    cleaned: bool,
    closed: bool,
    fault_said: bool,
}

impl LiveWriter {
    /// The live file of step `id`, written as this process's user.
    pub(super) fn new(setup: LiveSetup, id: Identity) -> LiveWriter {
        LiveWriter {
            name: id.file_name(),
            setup,
            id,
            owner: sys::euid(),
            next: None,
            cleaned: false,
            closed: false,
            fault_said: false,
        }
    }

    /// After a sample: writes the state when due. Returns a fault for the record, once.
    pub(super) fn after_sample(&mut self, acc: &Acc, now: Instant) -> Option<String> {
        if self.closed || self.next.is_some_and(|n| now < n) {
            return None;
        }
        if let Some(p) = &self.setup.problem {
            self.closed = true;
            return Some(format!("live state off for this step: {p}"));
        }
        if sys::euid() != self.owner {
            return None;
        }
        self.next = Some(now + self.setup.interval);
        let state = live::state_of(
            &self.id,
            acc,
            self.setup.interval.as_secs_f64(),
            crate::clock::unix_now(),
        );
        match self.write(&state) {
            Ok(()) => None,
            Err(e) if !self.fault_said => {
                self.fault_said = true;
                Some(format!(
                    "live state not written (Prometheus does not see the step): {e}"
                ))
            }
            Err(_) => None,
        }
    }

    fn write(&mut self, state: &LiveState) -> Result<(), String> {
        let dir = &self.setup.dir;
        prepare_dir(dir, self.setup.gid, self.owner)?;
        if !self.cleaned {
            self.cleaned = true;
            remove_stale(dir, &self.id, &self.name, self.owner, self.setup.interval);
        }
        let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "{} bytes, more than a reader takes ({MAX_FILE_BYTES})",
                bytes.len()
            ));
        }
        write_atomically(dir, &self.name, &bytes, self.setup.gid, self.owner)
            .map_err(|e| format!("{}: {e}", dir.join(&self.name).display()))
    }

    /// The step ended: removes its file; nothing is written from now on.
    pub(super) fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) || sys::euid() != self.owner {
            return;
        }
        let dir = &self.setup.dir;
        if fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            let _ = fs::remove_file(dir.join(&self.name));
        }
    }
}

/// The step's live file, shared by the sampler thread (which writes it) and the tracker (which
/// removes it when the step ends); `None` when live state is off.
pub(super) type SharedLive = Option<Arc<Mutex<LiveWriter>>>;

/// After a sample: the step's live state, when due; a failure becomes the record's fault.
pub(super) fn after_sample(live: &SharedLive, acc: &mut Acc) {
    let Some(w) = live else { return };
    let fault = w
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .after_sample(acc, Instant::now());
    if let Some(f) = fault {
        acc.fault(f);
    }
}

/// The step ended: its live state goes (a sampler thread that comes back late writes none).
pub(super) fn close(live: &SharedLive) {
    if let Some(w) = live {
        w.lock().unwrap_or_else(|p| p.into_inner()).close();
    }
}

/// Makes `dir` when missing and checks it (see the module's description).
fn prepare_dir(dir: &Path, gid: Option<u32>, owner: u32) -> Result<(), String> {
    let shown = dir.display();
    if owner == 0 {
        // Before anything is made in it: every directory above must be root's alone.
        crate::trust::check_root_trusted_dir(dir, "live_dir")?;
    }
    if fs::symlink_metadata(dir).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {
                if let Some(g) = gid {
                    std::os::unix::fs::lchown(dir, None, Some(g))
                        .and_then(|()| fs::set_permissions(dir, Permissions::from_mode(0o750)))
                        .map_err(|e| format!("{shown}: cannot give it to group {g}: {e}"))?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot make {shown}: {e}")),
        }
    }
    let m = fs::symlink_metadata(dir).map_err(|e| format!("{shown}: {e}"))?;
    if !m.file_type().is_dir() {
        return Err(format!("{shown}: not a directory (a symbolic link?)"));
    }
    if m.uid() != owner {
        return Err(format!("{shown}: owned by uid {}, not {owner}", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown}: writable by group or others (mode {:o})",
            m.mode() & 0o7777
        ));
    }
    if let Some(g) = gid {
        if m.gid() != g {
            std::os::unix::fs::lchown(dir, None, Some(g))
                .map_err(|e| format!("{shown}: cannot give it to group {g}: {e}"))?;
        }
        if m.mode() & 0o050 != 0o050 {
            fs::set_permissions(dir, Permissions::from_mode((m.mode() | 0o050) & 0o7777))
                .map_err(|e| format!("{shown}: {e}"))?;
        }
    }
    Ok(())
}

/// Writes `bytes` to `dir/name` through a temporary file and a rename, relative to the open
/// directory ([`OwnDir`]: a temporary file left by a write cut short is replaced).
fn write_atomically(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    gid: Option<u32>,
    owner: u32,
) -> io::Result<()> {
    let d = OwnDir::open(dir, owner).map_err(|e| match e {
        DirError::Io(e) => e,
        DirError::Unsafe(why) => io::Error::other(why),
    })?;
    d.write_atomically(name, 0o600, |f| {
        f.write_all(bytes)?;
        if let Some(g) = gid {
            std::os::unix::fs::fchown(&*f, None, Some(g))?;
            f.set_permissions(Permissions::from_mode(0o640))?;
        }
        Ok(())
    })
}

/// Removes files of this node left behind by a slurmstepd that was killed: the writer's own
/// regular files (temporary ones too) changed more than [`STALE_REMOVAL_AGE`] ago (or three
/// intervals, when longer), whose state is stale by its own interval, or is no state at all.
fn remove_stale(dir: &Path, id: &Identity, own: &str, owner: u32, interval: Duration) {
    let node = format!(".{}.json", super::record::file_safe(&id.node));
    let age = STALE_REMOVAL_AGE.max(Duration::from_secs_f64(stale_after(interval.as_secs_f64())));
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten().take(MAX_ENTRIES_CLEANED) {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let temporary = name.starts_with('.') && name.ends_with(".tmp");
        let ours = if temporary {
            name.contains(&format!("{node}."))
        } else {
            name.ends_with(&node) && !name.starts_with('.')
        };
        if !ours || name == own {
            continue;
        }
        let path = e.path();
        let Ok(m) = fs::symlink_metadata(&path) else {
            continue;
        };
        let old = m
            .modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|a| a > age);
        if !m.file_type().is_file() || m.uid() != owner || !old {
            continue;
        }
        // A step sampled less often than the age (a user may ask for a day) still runs.
        let running = !temporary
            && crate::config::read_small_file(&path, MAX_FILE_BYTES, "a live state file")
                .ok()
                .map(|t| live::parse(t.as_bytes()))
                .is_some_and(|p| match p {
                    Parsed::State(s) => {
                        s.written_at + stale_after(s.interval_seconds) > crate::clock::unix_now()
                    }
                    _ => false,
                });
        if !running {
            let _ = fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests;
