//! Writing a running step's live state file ([`super::live`]) from the sampler thread.
//!
//! `<live_dir>/<cluster>.<jobid>.<step>.<node>.json`, rewritten after a sample at most once per
//! `live_interval_seconds`, removed when the step ends. Root writes it inside slurmstepd, so:
//! - the directory is made when missing (only its last component: `/run` must be there), first
//!   private, marked as the plugin's ([`MADE_MARK`], a file of root's inside), then given to
//!   `live_group` (mode 0750; 0700 without a group); an existing one is used only when it is a
//!   real directory (not a link) of the writer's that no one else can write to, and, for root,
//!   when every directory above it is root's alone ([`crate::trust`]). Only a directory that
//!   bears the mark gets its group set to `live_group` (with read and search for the group):
//!   one the admin made, or named by mistake (`/run`), keeps its group and mode;
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
//! hour, and stale by their own interval) are removed, once; only files this plugin wrote
//! (`stale.rs`).

use std::ffi::CString;
use std::fs::{self, DirBuilder, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::live::{self, Identity, LiveState, MAX_FILE_BYTES};
use super::own_dir::OwnDir;
use super::setup::LiveSetup;
use super::state::Acc;
use crate::sys;

/// A file of this node older than this (and stale by its own interval) is removed when a step
/// starts: its slurmstepd was killed before it could remove it.
pub const STALE_REMOVAL_AGE: Duration = Duration::from_secs(3600);

/// The file that marks a live directory as made by the plugin: only such a directory is given
/// to `live_group`.
pub(super) const MADE_MARK: &str = ".gpu-tracker-live";

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
        let d = prepare_dir(dir, self.setup.gid, self.owner)?;
        if !self.cleaned {
            self.cleaned = true;
            stale::remove_stale(&d, dir, &self.id, self.owner, self.setup.interval);
        }
        let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "{} bytes, more than a reader takes ({MAX_FILE_BYTES})",
                bytes.len()
            ));
        }
        let gid = self.setup.gid;
        d.write_atomically(&self.name, 0o600, |f| {
            f.write_all(&bytes)?;
            if let Some(g) = gid {
                std::os::unix::fs::fchown(&*f, None, Some(g))?;
                f.set_permissions(Permissions::from_mode(0o640))?;
            }
            Ok(())
        })
        .map_err(|e| format!("{}: {e}", dir.join(&self.name).display()))
    }

    /// The step ended: removes its file; nothing is written from now on.
    pub(super) fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) || sys::euid() != self.owner {
            return;
        }
        // Only what this writer can have written: a regular file of its own under the step's
        // name, removed relative to the checked directory.
        let Ok(d) = OwnDir::open(&self.setup.dir, self.owner) else {
            return;
        };
        if let Ok(name) = CString::new(self.name.as_str())
            && d.holds_own_file(&name)
        {
            let _ = sys::unlinkat(d.file(), &name);
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

/// Makes `dir` when missing, opens and checks it, and gives it to the group when the plugin
/// made it (see the module's description).
fn prepare_dir(dir: &Path, gid: Option<u32>, owner: u32) -> Result<OwnDir, String> {
    let shown = dir.display();
    if owner == 0 {
        // Before anything is made in it: every directory above must be root's alone.
        crate::trust::check_root_trusted_dir(dir, "live_dir")?;
    }
    let mut made = false;
    if fs::symlink_metadata(dir).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => made = true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot make {shown}: {e}")),
        }
    }
    let d = OwnDir::open(dir, owner).map_err(|e| format!("{shown}: {e}"))?;
    let mark = CString::new(MADE_MARK).unwrap_or_default();
    if made {
        // Private still, so no one else has made anything in it.
        let _ = sys::create_at(d.file(), &mark, 0o600);
    }
    // Only a directory the plugin made is the plugin's to give to the group: never one the
    // admin made (or named by mistake, `/run`). The mark can only have been made by the
    // directory's owner, who alone can write there.
    if let Some(g) = gid
        && (made || d.holds_own_file(&mark))
    {
        let m = d.file().metadata().map_err(|e| format!("{shown}: {e}"))?;
        if m.gid() != g {
            std::os::unix::fs::fchown(d.file(), None, Some(g))
                .map_err(|e| format!("{shown}: cannot give it to group {g}: {e}"))?;
        }
        if m.mode() & 0o050 != 0o050 {
            d.file()
                .set_permissions(Permissions::from_mode((m.mode() | 0o050) & 0o7777))
                .map_err(|e| format!("{shown}: {e}"))?;
        }
    }
    Ok(d)
}

mod stale;
#[cfg(test)]
mod tests;
