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
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use std::path::PathBuf;

    fn setup(dir: PathBuf, gid: Option<u32>, interval: Duration) -> LiveSetup {
        LiveSetup {
            dir,
            gid,
            interval,
            problem: None,
        }
    }

    fn id(node: &str, job: u32) -> Identity {
        Identity {
            cluster: "c1".into(),
            job_id: job,
            step: "0".into(),
            user: "alice".into(),
            uid: 1001,
            node: node.into(),
            stepd_pid: std::process::id(),
            started_at: 1.0,
            alloc_cpus: Some(2),
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn acc(cpu: f64) -> Acc {
        let mut a = Acc::new(Duration::from_secs(1));
        a.latest.cpu_seconds = Some(cpu);
        a
    }

    fn read(p: &Path) -> LiveState {
        match live::parse(&fs::read(p).unwrap()) {
            Parsed::State(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn writes_atomically_at_most_once_an_interval_and_removes_at_the_end() {
        let t = TempTree::new("live-write");
        let dir = t.path().join("live");
        let root = sys::euid() == 0;
        // As root the directory and file go to a group; a user can give them only to its own.
        let gid = root.then_some(4242);
        let mut w = LiveWriter::new(setup(dir.clone(), gid, Duration::from_secs(5)), id("n1", 7));
        let t0 = Instant::now();
        assert_eq!(w.after_sample(&acc(1.0), t0), None);
        let file = dir.join("c1.7.0.n1.json");
        assert_eq!(read(&file).cpu.seconds, Some(1.0));
        let (dm, fm) = (fs::metadata(&dir).unwrap(), fs::metadata(&file).unwrap());
        if root {
            assert_eq!((dm.mode() & 0o7777, dm.gid()), (0o750, 4242));
            assert_eq!((fm.mode() & 0o7777, fm.gid(), fm.uid()), (0o640, 4242, 0));
        } else {
            assert_eq!((dm.mode() & 0o7777, fm.mode() & 0o7777), (0o700, 0o600));
        }
        // Not due yet: unchanged; due: rewritten. No temporary file is left.
        assert_eq!(w.after_sample(&acc(2.0), t0 + Duration::from_secs(1)), None);
        assert_eq!(read(&file).cpu.seconds, Some(1.0));
        assert_eq!(w.after_sample(&acc(3.0), t0 + Duration::from_secs(5)), None);
        assert_eq!(read(&file).cpu.seconds, Some(3.0));
        assert_eq!(names(&dir), ["c1.7.0.n1.json"]);
        w.close();
        assert!(names(&dir).is_empty());
        // Closed: a sampler that comes back late writes nothing.
        assert_eq!(
            w.after_sample(&acc(4.0), t0 + Duration::from_secs(60)),
            None
        );
        assert!(names(&dir).is_empty());
    }

    #[test]
    fn an_untrusted_directory_is_refused_with_one_fault() {
        let t = TempTree::new("live-refuse");
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, Permissions::from_mode(0o777)).unwrap();
        let mut w = LiveWriter::new(setup(open.clone(), None, Duration::ZERO), id("n1", 8));
        let now = Instant::now();
        let f = w.after_sample(&acc(1.0), now).expect("a fault");
        assert!(f.contains("writable by group"), "{f}");
        assert!(!f.contains('\n'), "{f}");
        // Said once; nothing written, ever.
        assert_eq!(w.after_sample(&acc(1.0), now), None);
        assert!(names(&open).is_empty());
        // A link to a good directory is not followed.
        let good = t.path().join("good");
        fs::create_dir(&good).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let mut w = LiveWriter::new(setup(link, None, Duration::ZERO), id("n1", 8));
        let f = w.after_sample(&acc(1.0), now).expect("a fault");
        assert!(f.contains("not a directory"), "{f}");
        assert!(names(&good).is_empty());
        // Another user's directory (only root can make one to test).
        if sys::euid() == 0 {
            std::os::unix::fs::chown(&good, Some(4242), None).unwrap();
            let mut w = LiveWriter::new(setup(good.clone(), None, Duration::ZERO), id("n1", 8));
            let f = w.after_sample(&acc(1.0), now).expect("a fault");
            assert!(f.contains("owned by uid 4242"), "{f}");
            assert!(names(&good).is_empty());
        }
        // A problem found at the start (an unknown group): one fault, nothing written.
        let mut s = setup(t.path().join("new"), None, Duration::ZERO);
        s.problem = Some("live_group \"nope\": no such group".into());
        let mut w = LiveWriter::new(s, id("n1", 8));
        let f = w.after_sample(&acc(1.0), now).expect("a fault");
        assert!(f.contains("no such group"), "{f}");
        assert_eq!(w.after_sample(&acc(1.0), now), None);
        assert!(!t.path().join("new").exists());
    }

    #[test]
    fn a_temporary_file_left_by_an_interrupted_write_is_replaced_at_the_next_write() {
        // A write interrupted after its temporary file was made (slurmstepd took the user's id
        // meanwhile, so the clean-up failed) leaves the file behind; the same thread's next
        // write uses the same name.
        let t = TempTree::new("live-left");
        let dir = t.path().join("live");
        fs::create_dir(&dir).unwrap();
        let tmp = dir.join(format!(
            ".c1.7.0.n1.json.{}.{}.tmp",
            std::process::id(),
            sys::gettid()
        ));
        fs::write(&tmp, b"{\"half").unwrap();
        let mut w = LiveWriter::new(
            setup(dir.clone(), None, Duration::from_secs(5)),
            id("n1", 7),
        );
        let t0 = Instant::now();
        assert_eq!(w.after_sample(&acc(1.0), t0), None);
        assert_eq!(read(&dir.join("c1.7.0.n1.json")).cpu.seconds, Some(1.0));
        assert_eq!(names(&dir), ["c1.7.0.n1.json"]);
        // Something other than a regular file of the writer's is not removed, nor written
        // through: the write fails (one fault) and what is there stays.
        let outside = t.path().join("outside");
        fs::write(&outside, b"keep").unwrap();
        std::os::unix::fs::symlink(&outside, &tmp).unwrap();
        let f = w
            .after_sample(&acc(2.0), t0 + Duration::from_secs(5))
            .expect("a fault");
        assert!(f.contains("exists"), "{f}");
        assert_eq!(fs::read(&outside).unwrap(), b"keep");
        assert!(fs::symlink_metadata(&tmp).unwrap().file_type().is_symlink());
        assert_eq!(read(&dir.join("c1.7.0.n1.json")).cpu.seconds, Some(1.0));
    }

    #[test]
    fn files_of_killed_steps_of_this_node_are_removed_once_old() {
        let t = TempTree::new("live-stale");
        let dir = t.path().join("live");
        fs::create_dir(&dir).unwrap();
        let long_ago = SystemTime::now() - Duration::from_secs(7200);
        let now = crate::clock::unix_now();
        let state = |job: u32, written_at: f64, interval: f64| {
            let mut s = live::state_of(&id("n1", job), &acc(1.0), interval, written_at);
            s.interval_seconds = interval;
            serde_json::to_vec(&s).unwrap()
        };
        let put = |name: &str, bytes: &[u8], old: bool| {
            let p = dir.join(name);
            fs::write(&p, bytes).unwrap();
            if old {
                let f = fs::File::options().write(true).open(&p).unwrap();
                f.set_modified(long_ago).unwrap();
            }
        };
        put("c1.1.0.n1.json", &state(1, now - 7200.0, 5.0), true); // killed: removed
        put(".c1.2.0.n1.json.77.78.tmp", b"{", true); // half written, killed: removed
        put("c1.3.0.n1.json", &state(3, now - 7200.0, 5.0), false); // changed lately: kept
        put("c1.4.0.n2.json", &state(4, now - 7200.0, 5.0), true); // another node's: kept
        put("c1.5.0.n1.json", &state(5, now - 100.0, 86400.0), true); // sampled daily: kept
        put("c1.6.0.n1.json", b"not a state", true); // no state: removed
        put("notes.txt", b"", true); // not a live file: kept
        let mut w = LiveWriter::new(
            setup(dir.clone(), None, Duration::from_secs(5)),
            id("n1", 9),
        );
        assert_eq!(w.after_sample(&acc(1.0), Instant::now()), None);
        assert_eq!(
            names(&dir),
            [
                "c1.3.0.n1.json",
                "c1.4.0.n2.json",
                "c1.5.0.n1.json",
                "c1.9.0.n1.json",
                "notes.txt"
            ]
        );
    }
}
