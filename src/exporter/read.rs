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
//! Every skipped file is counted by [`Skip`] reason; nothing is ever written. The directory is
//! listed through the descriptor it was judged on, never again by its path; a listing that
//! fails is said ([`DirState::ListFailed`], counted by [`DirError`]).

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::step::live::{self, LiveState, MAX_FILE_BYTES, Parsed};
use crate::sys::EntryType;

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
    /// Another file holds the same step (cluster, job, step, node); the newest is exported.
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
    /// Opened and judged, but its listing failed (at once or part-way: what was listed before
    /// is read), and why: an I/O error, or the directory removed since it was opened.
    ListFailed(String),
}

impl DirState {
    /// The fault it counts as, if any (a missing directory is none: no step ran yet).
    pub fn error(&self) -> Option<DirError> {
        match self {
            DirState::Read | DirState::Missing => None,
            DirState::Refused(_) => Some(DirError::Refused),
            DirState::ListFailed(_) => Some(DirError::ListFailed),
        }
    }
}

impl std::fmt::Display for DirState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirState::Read => f.write_str("read"),
            DirState::Missing => f.write_str("missing"),
            DirState::Refused(why) => write!(f, "not read: {why}"),
            DirState::ListFailed(why) => write!(f, "listing failed: {why}"),
        }
    }
}

/// Why the directory was not read whole at a scrape, as the metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirError {
    /// Not opened, or refused once opened ([`DirState::Refused`]).
    Refused,
    /// Its listing failed ([`DirState::ListFailed`]).
    ListFailed,
}

impl DirError {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [DirError; 2] = [DirError::Refused, DirError::ListFailed];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            DirError::Refused => "refused",
            DirError::ListFailed => "list_failed",
        }
    }

    /// Its position in [`DirError::ALL`].
    pub fn index(self) -> usize {
        DirError::ALL.iter().position(|s| *s == self).unwrap_or(0)
    }
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
    match open_dir(dir, trusted) {
        Ok(d) => scan_open(&d, trusted, now),
        Err(why) => Scan {
            dir_problem: Some(why),
            ..Scan::default()
        },
    }
}

/// [`scan`] of a directory opened and judged by [`open_dir`]: listed through that descriptor,
/// so that the directory judged is the one read, whatever its path names by now.
fn scan_open(d: &File, trusted: &[u32], now: f64) -> Scan {
    let mut scan = Scan::default();
    let entries = match crate::sys::list_dir(d) {
        Ok(e) => e,
        Err(e) => {
            scan.dir_problem = Some(DirState::ListFailed(e.to_string()));
            return scan;
        }
    };
    let mut taken = 0;
    // The newest state of each step (cluster, job, step, node), by its position in `states`.
    let mut seen: HashMap<(String, u32, String, String), usize> = HashMap::new();
    for e in entries {
        let e = match e {
            Ok(e) => e,
            // The listing stopped: what was listed before is exported, the fault counted.
            Err(why) => {
                scan.dir_problem = Some(DirState::ListFailed(why.to_string()));
                break;
            }
        };
        if !is_state_name(&e.name) {
            continue;
        }
        taken += 1;
        if taken > MAX_FILES {
            scan.skip(Skip::OverLimit);
            continue;
        }
        // The type the directory gives (a link not followed): no FIFO or device is opened. An
        // unknown type is judged on the descriptor, opened without blocking.
        if !matches!(e.kind, EntryType::File | EntryType::Unknown) {
            scan.skip(Skip::NotRegular);
            continue;
        }
        let bytes = match read_one(d, &e.name, trusted) {
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
        let key = (
            state.cluster.clone(),
            state.job_id,
            state.step.clone(),
            state.node.clone(),
        );
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
    scan.states.sort_by(|a, b| {
        (a.job_id, &a.step, &a.node, &a.cluster).cmp(&(b.job_id, &b.step, &b.node, &b.cluster))
    });
    scan
}

#[cfg(test)]
mod tests;
