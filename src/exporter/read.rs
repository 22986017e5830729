//! Reading the live directory without trusting what lies in it.
//!
//! The directory is opened without following a link and judged on its descriptor: a directory
//! of a trusted owner (root, or the exporter's own user) that no one else can write to. Its
//! entries are taken only when their names end in `.json` and do not begin with `.` (the
//! plugin's temporary files do), at most [`MAX_FILES`] of them; each is opened relative to the
//! open directory, never following a link, never blocking (`O_NOFOLLOW | O_NONBLOCK`), and
//! judged on its descriptor: a regular file of a trusted owner with one link and at most
//! [`MAX_FILE_BYTES`], of which no more is read. A state that is cut short, of another schema or
//! of a later version, or stale (not rewritten within 3 of its intervals and 30 s) is skipped.
//! Every skipped file is counted by [`Skip`] reason; nothing is ever written.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::step::live::{self, LiveState, MAX_FILE_BYTES, Parsed};

/// Most state files read in one scrape; the rest are counted ([`Skip::OverLimit`]).
pub const MAX_FILES: usize = 4096;

/// Why a state file was not exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    /// The system refused to open or read it (permission, I/O).
    Unreadable,
    /// A symbolic link, directory, FIFO, socket or device, or a file with more than one link.
    NotRegular,
    /// Owned by another user than root (or the exporter's own).
    NotRoot,
    /// Larger than [`MAX_FILE_BYTES`].
    TooLarge,
    /// Not a live state: cut short, not JSON, or another schema.
    BadJson,
    /// A live state of a later version than this exporter reads.
    NewerSchema,
    /// Not rewritten within 3 of its intervals and 30 s: its slurmstepd is gone or stuck.
    Stale,
    /// Beyond the first [`MAX_FILES`] of the scrape.
    OverLimit,
    /// Another file holds the same step (job, step, node); the newest is exported.
    Duplicate,
}

impl Skip {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [Skip; 9] = [
        Skip::Unreadable,
        Skip::NotRegular,
        Skip::NotRoot,
        Skip::TooLarge,
        Skip::BadJson,
        Skip::NewerSchema,
        Skip::Stale,
        Skip::OverLimit,
        Skip::Duplicate,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Skip::Unreadable => "unreadable",
            Skip::NotRegular => "not_regular",
            Skip::NotRoot => "not_root",
            Skip::TooLarge => "too_large",
            Skip::BadJson => "bad_json",
            Skip::NewerSchema => "newer_schema",
            Skip::Stale => "stale",
            Skip::OverLimit => "over_limit",
            Skip::Duplicate => "duplicate",
        }
    }

    /// Its position in [`Skip::ALL`].
    pub fn index(self) -> usize {
        Skip::ALL.iter().position(|s| *s == self).unwrap_or(0)
    }
}

/// The directory as a whole.
#[derive(Debug, Clone, PartialEq)]
pub enum DirState {
    /// Read.
    Read,
    /// Not there (no step tracked on the node since it booted, or live state is off).
    Missing,
    /// Not read, and why: a link, not a directory, another owner, writable by others, no
    /// permission.
    Refused(String),
}

/// What one scrape found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The running steps' states, sorted by job, step and node.
    pub states: Vec<LiveState>,
    /// Files skipped, by [`Skip::index`].
    pub skipped: [u64; Skip::ALL.len()],
    /// `None` when the directory was read.
    pub dir_problem: Option<DirState>,
}

impl Scan {
    fn skip(&mut self, why: Skip) {
        self.skipped[why.index()] += 1;
    }
}

/// Whether a directory entry's name is a state file's: `*.json`, not `.*`.
pub fn is_state_name(name: &[u8]) -> bool {
    name.ends_with(b".json") && !name.starts_with(b".") && name.len() > ".json".len()
}

/// Opens `dir` and judges it: a directory (not a link) owned by one of `trusted`, writable by
/// no one else.
fn open_dir(dir: &Path, trusted: &[u32]) -> Result<File, DirState> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match (e.kind(), e.raw_os_error()) {
            (io::ErrorKind::NotFound, _) => DirState::Missing,
            (_, Some(libc::ENOTDIR | libc::ELOOP)) => {
                DirState::Refused("not a directory (a symbolic link is not followed)".into())
            }
            _ => DirState::Refused(e.to_string()),
        })?;
    let m = f.metadata().map_err(|e| DirState::Refused(e.to_string()))?;
    if !trusted.contains(&m.uid()) {
        return Err(DirState::Refused(format!(
            "owned by uid {}, not root",
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(DirState::Refused(format!(
            "writable by group or others (mode {:o})",
            m.mode() & 0o7777
        )));
    }
    Ok(f)
}

/// Opens state file `name` of the open directory and reads it, judged as the module says.
fn read_one(dir: &File, name: &[u8], trusted: &[u32]) -> Result<Option<Vec<u8>>, Skip> {
    let c = CString::new(name).map_err(|_| Skip::Unreadable)?;
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let f = match crate::sys::openat(dir, &c, flags) {
        Ok(f) => f,
        // Removed since the listing: its step ended.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) => {
            return Err(Skip::NotRegular);
        }
        Err(_) => return Err(Skip::Unreadable),
    };
    let m = f.metadata().map_err(|_| Skip::Unreadable)?;
    if !m.file_type().is_file() || m.nlink() != 1 {
        return Err(Skip::NotRegular);
    }
    if !trusted.contains(&m.uid()) {
        return Err(Skip::NotRoot);
    }
    if m.len() > MAX_FILE_BYTES {
        return Err(Skip::TooLarge);
    }
    let mut buf = Vec::with_capacity(m.len() as usize);
    (&f).take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|_| Skip::Unreadable)?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Err(Skip::TooLarge);
    }
    Ok(Some(buf))
}

/// Reads the running steps' states from `dir` at Unix time `now`. Files must be owned by one of
/// `trusted` (root, and the exporter's own user: see docs/EXPORTER.md).
pub fn scan(dir: &Path, trusted: &[u32], now: f64) -> Scan {
    let mut scan = Scan::default();
    let d = match open_dir(dir, trusted) {
        Ok(d) => d,
        Err(why) => {
            scan.dir_problem = Some(why);
            return scan;
        }
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            scan.dir_problem = Some(DirState::Refused(e.to_string()));
            return scan;
        }
    };
    let mut taken = 0;
    // The newest state of each step (job, step, node), by its position in `states`.
    let mut seen: HashMap<(u32, String, String), usize> = HashMap::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.as_bytes();
        if !is_state_name(name) {
            continue;
        }
        taken += 1;
        if taken > MAX_FILES {
            scan.skip(Skip::OverLimit);
            continue;
        }
        // The type the directory gives (a link not followed): no FIFO or device is opened.
        if e.file_type().is_ok_and(|t| !t.is_file()) {
            scan.skip(Skip::NotRegular);
            continue;
        }
        let bytes = match read_one(&d, name, trusted) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(why) => {
                scan.skip(why);
                continue;
            }
        };
        let state = match live::parse(&bytes) {
            Parsed::State(s) => *s,
            Parsed::Newer(_) => {
                scan.skip(Skip::NewerSchema);
                continue;
            }
            Parsed::Bad(_) => {
                scan.skip(Skip::BadJson);
                continue;
            }
        };
        if now > state.written_at + live::stale_after(state.interval_seconds) {
            scan.skip(Skip::Stale);
            continue;
        }
        let key = (state.job_id, state.step.clone(), state.node.clone());
        match seen.get(&key) {
            Some(&i) => {
                scan.skip(Skip::Duplicate);
                if scan.states[i].written_at < state.written_at {
                    scan.states[i] = state;
                }
            }
            None => {
                seen.insert(key, scan.states.len());
                scan.states.push(state);
            }
        }
    }
    scan.states
        .sort_by(|a, b| (a.job_id, &a.step, &a.node).cmp(&(b.job_id, &b.step, &b.node)));
    scan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use crate::exporter::testing::state;

    fn me() -> Vec<u32> {
        vec![0, crate::sys::euid()]
    }

    #[test]
    fn states_are_read_and_every_bad_file_is_counted_by_why() {
        let t = TempTree::new("exporter-read");
        let d = t.path().join("live");
        std::fs::create_dir(&d).unwrap();
        let now = 1_000_000.0;
        let put = |name: &str, s: &LiveState| {
            std::fs::write(d.join(name), serde_json::to_vec(s).unwrap()).unwrap();
        };
        put("c1.2.0.n1.json", &state(2, "0", now - 1.0));
        put("c1.1.batch.n1.json", &state(1, "batch", now - 2.0));
        // Half written (a writer that skipped the rename): bad_json.
        let whole = serde_json::to_vec(&state(3, "0", now)).unwrap();
        std::fs::write(d.join("c1.3.0.n1.json"), &whole[..whole.len() / 2]).unwrap();
        // Stale: 3 intervals of 5 s and 30 s ago, and a bit.
        put("c1.4.0.n1.json", &state(4, "0", now - 46.0));
        // A later version.
        let mut v = serde_json::to_value(state(5, "0", now)).unwrap();
        v["schema_version"] = 9.into();
        std::fs::write(d.join("c1.5.0.n1.json"), v.to_string()).unwrap();
        // Too large (sparse: nothing is read).
        let big = File::create(d.join("c1.6.0.n1.json")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        // A link to a good state, a FIFO, a directory.
        std::os::unix::fs::symlink(d.join("c1.2.0.n1.json"), d.join("c1.7.0.n1.json")).unwrap();
        let fifo = d.join("c1.8.0.n1.json");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        std::fs::create_dir(d.join("c1.9.0.n1.json")).unwrap();
        // The same step twice (a cluster renamed): the newest is exported.
        put("c2.1.batch.n1.json", &state(1, "batch", now - 0.5));
        // Not state files: ignored, not counted.
        put(".c1.10.0.n1.json.1.2.tmp", &state(10, "0", now));
        std::fs::write(d.join("README"), "x").unwrap();
        let started = std::time::Instant::now();
        let s = scan(&d, &me(), now);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "waited"
        );
        assert_eq!(s.dir_problem, None);
        let got: Vec<(u32, &str, f64)> = s
            .states
            .iter()
            .map(|s| (s.job_id, s.step.as_str(), s.written_at))
            .collect();
        assert_eq!(got, [(1, "batch", now - 0.5), (2, "0", now - 1.0)]);
        let count = |k: Skip| s.skipped[k.index()];
        assert_eq!(count(Skip::BadJson), 1);
        assert_eq!(count(Skip::Stale), 1);
        assert_eq!(count(Skip::NewerSchema), 1);
        assert_eq!(count(Skip::TooLarge), 1);
        assert_eq!(count(Skip::NotRegular), 3);
        assert_eq!(count(Skip::Duplicate), 1);
        assert_eq!(count(Skip::NotRoot) + count(Skip::Unreadable), 0);
        // Another user's file: only root can make one to test.
        if crate::sys::euid() == 0 {
            let p = d.join("c1.2.0.n1.json");
            std::os::unix::fs::chown(&p, Some(4242), None).unwrap();
            let s = scan(&d, &[0], now);
            assert_eq!(s.skipped[Skip::NotRoot.index()], 1);
            assert!(s.states.iter().all(|s| s.job_id != 2));
        }
    }

    #[test]
    fn at_most_max_files_are_read() {
        let t = TempTree::new("exporter-many");
        let d = t.path().join("live");
        std::fs::create_dir(&d).unwrap();
        for i in 0..MAX_FILES + 3 {
            std::fs::write(d.join(format!("c.{i}.0.n1.json")), "{").unwrap();
        }
        let s = scan(&d, &me(), 0.0);
        assert_eq!(s.skipped[Skip::OverLimit.index()], 3);
        assert_eq!(s.skipped[Skip::BadJson.index()], MAX_FILES as u64);
    }

    #[test]
    fn a_directory_others_could_fill_is_not_read() {
        use std::os::unix::fs::PermissionsExt;
        let t = TempTree::new("exporter-dir");
        let d = t.path().join("live");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("c.1.0.n1.json"),
            serde_json::to_vec(&state(1, "0", 0.0)).unwrap(),
        )
        .unwrap();
        assert_eq!(scan(&d, &me(), 1.0).states.len(), 1);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let s = scan(&d, &me(), 1.0);
        assert!(s.states.is_empty());
        assert!(
            matches!(&s.dir_problem, Some(DirState::Refused(w)) if w.contains("writable")),
            "{:?}",
            s.dir_problem
        );
        let link = t.path().join("link");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(matches!(
            scan(&link, &me(), 1.0).dir_problem,
            Some(DirState::Refused(_))
        ));
        assert_eq!(
            scan(&t.path().join("none"), &me(), 1.0).dir_problem,
            Some(DirState::Missing)
        );
        assert!(is_state_name(b"a.json") && !is_state_name(b".a.json"));
        assert!(!is_state_name(b".json") && !is_state_name(b"a.json.tmp"));
    }
}
