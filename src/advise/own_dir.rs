//! A directory of the caller's own, and its files, opened so that no other user can choose,
//! replace or block what the advice reads and writes there.
//!
//! The advice runs as the submitting user at every `sbatch`, `srun` and `salloc`, with a
//! directory that comes from the environment (`XDG_CACHE_HOME`, `XDG_CONFIG_HOME`), which may
//! lie in a place other users write to (`/tmp`, a scratch filesystem). So:
//!
//! - The path is walked from `/` one name at a time, each opened relative to the directory
//!   before (`O_PATH | O_NOFOLLOW`) and looked at on the descriptor: what is checked is what is
//!   used. Every directory on the way belongs to root or the caller; none can be written by its
//!   group or others, except a sticky one (`/tmp`): there only an entry's owner (or the
//!   directory's, root or the caller here) may rename or remove it, and the next entry on the
//!   way must be root's or the caller's too. A symbolic link on the way is followed only where
//!   root or the caller made it. The directory itself belongs to the caller and is writable by
//!   no one else. Missing directories are made (0700) and then looked at like the others, so
//!   one another user made first is refused.
//! - Files are opened by name relative to that directory's descriptor, never through a link
//!   (`O_NOFOLLOW`) and never waiting (`O_NONBLOCK`: a FIFO does not hold the open), and used
//!   only when `fstat` says they are the caller's own regular files that nobody else may
//!   write. A file is written whole to a new temporary file (`O_EXCL`) renamed over the old.
//! - Nothing is kept for root ([`OwnDir::for_caller`]): root submitting from a shell that
//!   carries a user's environment (`su` without `-`, `sudo -E`) would otherwise work in the
//!   user's directories.

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// Most symbolic links followed on the way (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// An open directory of one user's own ([`OwnDir::open`]).
#[derive(Debug)]
pub struct OwnDir {
    /// The directory (`O_PATH`).
    dir: File,
    /// Its path, for messages.
    path: PathBuf,
    /// Whose files are used in it.
    owner: u32,
}

/// The error of a name that cannot be one entry of a directory.
fn bad_name(name: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{name:?} is not a file name"),
    )
}

/// `name` as one entry's name for an `*at` call: no `/`, no NUL, not `.` or `..`.
fn entry(name: &str) -> std::io::Result<CString> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(bad_name(name));
    }
    CString::new(name).map_err(|_| bad_name(name))
}

/// Opens `name` in `dir` as a path only (`O_PATH | O_NOFOLLOW`): a link is opened as itself.
fn open_path(dir: &File, name: &CString) -> std::io::Result<File> {
    crate::sys::openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
}

/// Why the directory `m` says may not be on the way to a directory of `owner`; `None`: it
/// may. `own`: it is that directory itself, which must be the owner's (not root's) and may
/// not be written by others even where sticky.
fn refused_dir(m: &Metadata, owner: u32, own: bool) -> Option<String> {
    let mode = m.mode();
    if own && m.uid() != owner {
        return Some(format!("belongs to uid {}, not to you", m.uid()));
    }
    if m.uid() != owner && m.uid() != 0 {
        return Some(format!("belongs to uid {}, neither you nor root", m.uid()));
    }
    let others_write = mode & 0o022 != 0;
    let sticky = mode & libc::S_ISVTX != 0;
    if others_write && (own || !sticky) {
        return Some(format!(
            "can be written by others (mode {:o})",
            mode & 0o7777
        ));
    }
    None
}

impl OwnDir {
    /// The directory at `path` (absolute) as `owner`'s own ([module docs](self)), made where
    /// it (or a directory above it) is missing. The error says which directory on the way was
    /// refused and why.
    pub fn open(path: &Path, owner: u32) -> Result<OwnDir, String> {
        if !path.is_absolute() {
            return Err(format!("{}: not an absolute path", path.display()));
        }
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open("/")
            .map_err(|e| format!("/: {e}"))?;
        let mut at = PathBuf::from("/");
        let say = |at: &Path, why: &dyn std::fmt::Display| format!("{}: {why}", at.display());
        let m = root.metadata().map_err(|e| say(&at, &e))?;
        if let Some(why) = refused_dir(&m, owner, false) {
            return Err(say(&at, &why));
        }
        // The directories open so far, `/` first: `..` goes back to the one before.
        let mut way: Vec<(File, PathBuf)> = vec![(root, at.clone())];
        let mut names: VecDeque<OsString> = names_of(path);
        let mut links = 0;
        while let Some(name) = names.pop_front() {
            if name == ".." {
                if way.len() > 1 {
                    way.pop();
                }
                continue;
            }
            let (dir, dir_path) = way.last().expect("the root stays on the way");
            at = dir_path.join(&name);
            let c = CString::new(name.as_bytes()).map_err(|_| say(&at, &"a NUL in the name"))?;
            let f = match open_path(dir, &c) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Made here, then looked at like any other: one that another user made in
                    // between is refused below.
                    match crate::sys::mkdirat(dir, &c, 0o700) {
                        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                            return Err(say(&at, &e));
                        }
                        _ => open_path(dir, &c),
                    }
                }
                other => other,
            }
            .map_err(|e| say(&at, &e))?;
            let m = f.metadata().map_err(|e| say(&at, &e))?;
            if m.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(say(&at, &"too many symbolic links"));
                }
                if m.uid() != owner && m.uid() != 0 {
                    return Err(say(
                        &at,
                        &format!("a symbolic link of uid {}, neither you nor root", m.uid()),
                    ));
                }
                let target = crate::sys::readlink_fd(&f).map_err(|e| say(&at, &e))?;
                let target = PathBuf::from(target);
                if target.is_absolute() {
                    way.truncate(1);
                }
                let mut spliced = names_of(&target);
                spliced.extend(names);
                names = spliced;
                continue;
            }
            if !m.is_dir() {
                return Err(say(&at, &"not a directory"));
            }
            if let Some(why) = refused_dir(&m, owner, names.is_empty()) {
                return Err(say(&at, &why));
            }
            way.push((f, at.clone()));
        }
        // Looked at again as the directory itself: a path may end in `..`.
        let (dir, at) = way.pop().expect("the root stays on the way");
        let m = dir.metadata().map_err(|e| say(&at, &e))?;
        if let Some(why) = refused_dir(&m, owner, true) {
            return Err(say(&at, &why));
        }
        Ok(OwnDir {
            dir,
            path: path.to_path_buf(),
            owner,
        })
    }

    /// The directory at `path` as the calling user's own ([`OwnDir::open`] with the effective
    /// uid, whose files this process makes); refused for root, and for a process whose real
    /// and effective users differ.
    pub fn for_caller(path: &Path) -> Result<OwnDir, String> {
        let (uid, euid) = (crate::sys::uid(), crate::sys::euid());
        if uid == 0 || euid == 0 {
            return Err("nothing is kept for root".into());
        }
        if uid != euid {
            return Err("nothing is kept for a set-user-id program".into());
        }
        OwnDir::open(path, euid)
    }

    /// The directory's path, as it was given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `name` in the directory with `flags` (and `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
    /// O_CLOEXEC`), and keeps it only where it is the owner's own regular file that nobody else
    /// may write.
    fn open_file(&self, name: &str, flags: libc::c_int) -> std::io::Result<File> {
        let c = entry(name)?;
        let all = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        let f = crate::sys::openat_mode(&self.dir, &c, all, 0o600)?;
        let m = f.metadata()?;
        let refuse = |why: String| {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: {why}", self.path.join(name).display()),
            ))
        };
        if !m.is_file() {
            return refuse("not a regular file".into());
        }
        if m.uid() != self.owner {
            return refuse(format!("belongs to uid {}, not to you", m.uid()));
        }
        if m.mode() & 0o022 != 0 {
            return refuse(format!(
                "can be written by others (mode {:o})",
                m.mode() & 0o7777
            ));
        }
        Ok(f)
    }

    /// The text of file `name`, at most `max` bytes ([`OwnDir::open_file`]'s rules).
    pub fn read(&self, name: &str, max: u64) -> std::io::Result<String> {
        use std::io::Read;
        let f = self.open_file(name, libc::O_RDONLY)?;
        let too_large = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{}: larger than {max} bytes",
                    self.path.join(name).display()
                ),
            )
        };
        if f.metadata()?.len() > max {
            return Err(too_large());
        }
        let mut text = String::new();
        f.take(max + 1).read_to_string(&mut text)?;
        if text.len() as u64 > max {
            return Err(too_large());
        }
        Ok(text)
    }

    /// Writes `bytes` as file `name` whole: a new file (0600, `O_EXCL`, never through a
    /// link) renamed over the old, which is replaced as an entry (a link there is replaced,
    /// not followed).
    pub fn write_whole(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let c = entry(name)?;
        let tmp = entry(&format!(".{name}.{}", std::process::id()))?;
        let mut f = match crate::sys::create_at(&self.dir, &tmp, 0o600) {
            // Left by a process of the same id that died before its rename (only the owner
            // and root make entries here).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                crate::sys::unlinkat(&self.dir, &tmp)?;
                crate::sys::create_at(&self.dir, &tmp, 0o600)?
            }
            other => other?,
        };
        let written = f
            .write_all(bytes)
            .and_then(|()| crate::sys::rename_at(&self.dir, &tmp, &c));
        if written.is_err() {
            let _ = crate::sys::unlinkat(&self.dir, &tmp);
        }
        written
    }

    /// File `name` (made, 0600, where missing) locked exclusively without waiting;
    /// `Ok(None)`: another process holds it. Dropping the file lets it go.
    pub fn try_lock(&self, name: &str) -> std::io::Result<Option<File>> {
        let f = self.open_file(name, libc::O_RDWR | libc::O_CREAT)?;
        Ok(crate::sys::try_lock(&f)?.then_some(f))
    }
}

/// The names of `path` in order, `.` left out, `..` kept.
fn names_of(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}
