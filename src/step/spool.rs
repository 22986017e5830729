//! The spool: `<spool_dir>/<jobid>/<node>.<step>.json`, written atomically (a new file, fsync,
//! rename, fsync of the directory) so a reader sees the old record or the new one, never half.
//!
//! The plugin writes as root, so every directory on the way is checked before use: a real
//! directory (not a symlink), owned by the writer, writable by no one else. Files are created
//! with `O_EXCL|O_NOFOLLOW` and mode 0600, and checked to be owned by the writer before they are
//! renamed into place (glibc's `seteuid` applies to every thread: a write that happened while
//! slurmstepd had switched to the user is thrown away, not published).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sys;

/// A spool problem; the message names the path.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file operation failed.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] io::Error),
    /// A directory or file is not safe to write through.
    #[error("{0}: {1}")]
    Unsafe(PathBuf, String),
}

/// The spool directory.
#[derive(Debug, Clone)]
pub struct Spool {
    root: PathBuf,
    reader: Option<u32>,
}

fn io_err(p: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |e| SpoolError::Io(p.to_path_buf(), e)
}

/// Checks that `dir` is a directory (not a symlink) owned by `owner` and not writable by group or
/// others.
fn check_dir(dir: &Path, owner: u32) -> Result<(), SpoolError> {
    let m = fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let unsafe_dir = |why: String| Err(SpoolError::Unsafe(dir.to_path_buf(), why));
    if !m.file_type().is_dir() {
        return unsafe_dir("not a directory (a symlink?)".into());
    }
    if m.uid() != owner {
        return unsafe_dir(format!("owned by uid {}, not {owner}", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return unsafe_dir(format!(
            "writable by group or others (mode {:o})",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

impl Spool {
    /// The spool at `root` (made with mode 0755 if missing; its parent must exist).
    pub fn open(root: &Path) -> Result<Spool, SpoolError> {
        match DirBuilder::new().mode(0o755).create(root) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SpoolError::Io(root.to_path_buf(), e)),
        }
        check_dir(root, sys::euid())?;
        Ok(Spool {
            root: root.to_path_buf(),
            reader: None,
        })
    }

    /// Records written from now on (and their job directory) are readable by user `uid` as
    /// well, through a POSIX ACL: the job's user reads them, cannot change them, and other
    /// users cannot read them. Root (uid 0) needs no grant.
    pub fn readable_by(mut self, uid: u32) -> Spool {
        self.reader = (uid != 0 && uid != u32::MAX).then_some(uid);
        self
    }

    /// Makes the job directory and gives the reader access to it. An error here means the
    /// filesystem refuses ACLs: records are then readable by root only.
    pub fn share_job_dir(&self, job_id: u32) -> Result<PathBuf, SpoolError> {
        let dir = self.job_dir(job_id)?;
        if let Some(uid) = self.reader {
            sys::grant_user_read(&dir, uid, true).map_err(|e| {
                SpoolError::Io(
                    dir.clone(),
                    std::io::Error::new(e.kind(), format!("ACL for uid {uid}: {e}")),
                )
            })?;
        }
        Ok(dir)
    }

    /// The spool directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of job `job_id`, made (mode 0700) if missing and checked.
    pub fn job_dir(&self, job_id: u32) -> Result<PathBuf, SpoolError> {
        let dir = self.root.join(job_id.to_string());
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SpoolError::Io(dir, e)),
        }
        check_dir(&dir, sys::euid())?;
        Ok(dir)
    }

    /// Writes `contents` to `<job dir>/<name>` atomically; returns the path.
    pub fn write(&self, job_id: u32, name: &str, contents: &[u8]) -> Result<PathBuf, SpoolError> {
        if name.contains('/') || name.starts_with('.') || name.is_empty() {
            return Err(SpoolError::Unsafe(
                self.root.join(name),
                "bad record file name".into(),
            ));
        }
        let dir = self.job_dir(job_id)?;
        let path = dir.join(name);
        let tmp = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            sys::gettid()
        ));
        let owner = sys::euid();
        let result = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)
                .map_err(io_err(&tmp))?;
            f.write_all(contents).map_err(io_err(&tmp))?;
            if let Some(uid) = self.reader {
                // Where ACLs are refused the record stays root-only (share_job_dir said so).
                let _ = sys::grant_user_read(&tmp, uid, false);
            }
            f.sync_all().map_err(io_err(&tmp))?;
            let m = f.metadata().map_err(io_err(&tmp))?;
            if m.uid() != owner || owner != sys::euid() {
                return Err(SpoolError::Unsafe(
                    tmp.clone(),
                    "written while the process had another user id; not published".into(),
                ));
            }
            fs::rename(&tmp, &path).map_err(io_err(&path))?;
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(&dir))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map(|()| path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_atomically_with_private_modes() {
        let t = TempTree::new("spool");
        let root = t.path().join("spool");
        let s = Spool::open(&root).unwrap();
        let p = s.write(7, "n1.batch.json", b"{}\n").unwrap();
        assert_eq!(p, root.join("7/n1.batch.json"));
        assert_eq!(fs::read(&p).unwrap(), b"{}\n");
        s.write(7, "n1.batch.json", b"{\"a\":1}\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{\"a\":1}\n");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(root.join("7")).unwrap().mode() & 0o777, 0o700);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(root.join("7")).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
        assert!(s.write(7, "../x.json", b"").is_err());
    }

    #[test]
    fn a_reader_gets_read_access_through_an_acl() {
        let t = TempTree::new("spool-acl");
        let s = Spool::open(&t.path().join("spool"))
            .unwrap()
            .readable_by(4242);
        let dir = s.share_job_dir(9).unwrap();
        let p = s.write(9, "n1.batch.json", b"{}").unwrap();
        // An access ACL shows its mask in the group bits of the mode: r-x on the directory,
        // r-- on the file; others get nothing.
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o750);
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o640);
        let plain = Spool::open(&t.path().join("spool")).unwrap().readable_by(0);
        let q = plain.write(10, "n1.0.json", b"{}").unwrap();
        assert_eq!(fs::metadata(&q).unwrap().mode() & 0o777, 0o600);
    }

    #[test]
    fn refuses_symlinks_and_open_directories() {
        let t = TempTree::new("spool-bad");
        let root = t.path().join("spool");
        let s = Spool::open(&root).unwrap();
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("8")).unwrap();
        let e = s.write(8, "n1.0.json", b"{}").unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
        let e = Spool::open(&root).unwrap_err();
        assert!(e.to_string().contains("writable"), "{e}");
    }
}
