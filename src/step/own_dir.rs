//! Atomic writes into a directory of the writer's own: a spool's job directory, the live
//! directory.
//!
//! The directory is opened without following a link and judged on its descriptor (a
//! directory, the writer's, writable by no group and no other user), then every step is taken
//! relative to it: the new contents go to a temporary file made with `O_EXCL | O_NOFOLLOW`
//! (never through a link, never one that was there), which is renamed over the file.
//!
//! The temporary name is fixed per thread (`.<name>.<pid>.<tid>.tmp`). A write cut short whose
//! clean-up failed leaves that file behind: in slurmstepd the clean-up runs as the user when
//! slurmstepd took the user's id meanwhile (glibc's `seteuid` holds for every thread), and the
//! user cannot remove root's entries. The thread's next write finds it. Since only the writer
//! can make an entry in its directory, a regular file of the writer's with one link under that
//! name is one of its own cut-short writes: it is removed (relative to the open directory) and
//! made again. Anything else under the name stays, and the write fails.

use std::ffi::{CStr, CString};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::sys;

/// Why a directory is not written to.
#[derive(Debug)]
pub(super) enum DirError {
    /// The system refused to open it.
    Io(io::Error),
    /// It is not a directory of the writer's alone; why, in words.
    Unsafe(String),
}

impl fmt::Display for DirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirError::Io(e) => e.fmt(f),
            DirError::Unsafe(why) => f.write_str(why),
        }
    }
}

/// A directory of the writer's, open, that no one else can write to: every entry in it was
/// made by the writer.
#[derive(Debug)]
pub(super) struct OwnDir {
    dir: File,
    owner: u32,
}

/// A file name as the system takes it; `InvalidInput` for one with a NUL byte.
fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

impl OwnDir {
    /// Opens directory `path` (not through a symbolic link) and checks it on its descriptor:
    /// owned by `owner`, not writable by group or others.
    pub(super) fn open(path: &Path, owner: u32) -> Result<OwnDir, DirError> {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR | libc::ELOOP) => {
                    DirError::Unsafe("not a directory (a symbolic link?)".into())
                }
                _ => DirError::Io(e),
            })?;
        let m = dir.metadata().map_err(DirError::Io)?;
        if m.uid() != owner {
            return Err(DirError::Unsafe(format!(
                "owned by uid {}, not {owner}",
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(DirError::Unsafe(format!(
                "writable by group or others (mode {:o})",
                m.mode() & 0o7777
            )));
        }
        Ok(OwnDir { dir, owner })
    }

    /// The open directory.
    pub(super) fn file(&self) -> &File {
        &self.dir
    }

    /// Writes a new version of entry `name` atomically: `fill` writes the temporary file (and
    /// may change its group and mode), which is renamed over `name` once it is checked to be
    /// the writer's (a file made while the process had another user id is not published).
    /// On failure the temporary file is removed when it can be; the next write recovers it
    /// otherwise (see the module's description).
    pub(super) fn write_atomically(
        &self,
        name: &str,
        mode: libc::mode_t,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        let tmp = c_name(&temp_name(name))?;
        let to = c_name(name)?;
        let mut f = self.create_temp(&tmp, mode)?;
        let result = (|| {
            fill(&mut f)?;
            if f.metadata()?.uid() != self.owner || sys::euid() != self.owner {
                return Err(io::Error::other(
                    "written while the process had another user id; not published",
                ));
            }
            sys::rename_at(&self.dir, &tmp, &to)
        })();
        if result.is_err() {
            let _ = sys::unlinkat(&self.dir, &tmp);
        }
        result
    }

    /// Makes temporary file `tmp`, in place of a cut-short write's of the writer's.
    fn create_temp(&self, tmp: &CString, mode: libc::mode_t) -> io::Result<File> {
        match sys::create_at(&self.dir, tmp, mode) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.holds_own_file(tmp) => {
                sys::unlinkat(&self.dir, tmp)?;
                sys::create_at(&self.dir, tmp, mode)
            }
            r => r,
        }
    }

    /// Whether entry `name` is a regular file of the writer's with one link. Looked at through
    /// an `O_PATH` descriptor: the entry itself (a link is not followed), not opened (a FIFO
    /// does not block, a device is not touched).
    pub(super) fn holds_own_file(&self, name: &CStr) -> bool {
        sys::openat(
            &self.dir,
            name,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.file_type().is_file() && m.uid() == self.owner && m.nlink() == 1)
    }
}

/// The temporary name of this thread's writes of `name`: `.<name>.<pid>.<tid>.tmp` (a leading
/// `.`: no reader takes it).
pub(super) fn temp_name(name: &str) -> String {
    format!(".{name}.{}.{}.tmp", std::process::id(), sys::gettid())
}
