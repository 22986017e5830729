//! Where the plugin binds a step's mark socket: `<mark_dir>/<job>.<node>/<step>.sock`.
//!
//! `mark_dir` itself is root's, mode 0711: anyone may pass through it, nobody but root may list
//! it, so the names of the jobs and steps running on the node are not shown to every user (as
//! `PrivateData=jobs` wants). Each job has a directory of its own there, root's, mode 0700, with
//! an access ACL that lets the job's user (and nobody else) list it and reach its sockets:
//! `gpu-tracker mark` in the job lists the job's sockets there ([`super::mark::send_to`] with
//! the directory and a trailing `/` as the prefix). Root binds the sockets and owns every
//! directory on the way, so no user can put a link where root creates or changes a file.

// The plugin's alone: a build without the `spank` feature (the command-line tool) uses none of it.
#![cfg_attr(not(feature = "spank"), allow(dead_code))]

use std::io;
use std::path::{Path, PathBuf};

/// The mode of `mark_dir`: passable, not listable, by other users.
pub const TOP_MODE: u32 = 0o711;

/// Makes `top` (the settings' `mark_dir`, whose parent must be there) when missing, root's and
/// mode [`TOP_MODE`]; an existing one that others may list is made so. `Err` when it is not a
/// directory of root's or others may write to it.
pub fn prepare_top(top: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if std::fs::symlink_metadata(top).is_err()
        && let Err(e) = std::fs::DirBuilder::new().mode(TOP_MODE).create(top)
        && e.kind() != io::ErrorKind::AlreadyExists
    {
        return Err(format!("cannot make mark_dir {}: {e}", top.display()));
    }
    let m = std::fs::symlink_metadata(top).map_err(|e| format!("mark_dir: {e}"))?;
    if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
        return Err(format!(
            "mark_dir {} must be a directory of root's that no one else can write to",
            top.display()
        ));
    }
    if m.mode() & 0o044 != 0 {
        // Made 0755 by an earlier version, or by hand: the running jobs' names were listable.
        std::fs::set_permissions(top, std::fs::Permissions::from_mode(m.mode() & 0o7711))
            .map_err(|e| format!("mark_dir {}: cannot make it unlistable: {e}", top.display()))?;
    }
    Ok(())
}

/// The job's directory of sockets in `top` (made by [`prepare_top`]): `<top>/<job>.<node>`, made
/// when missing, root's, mode 0700, its ACL giving `uid` (the job's user) read and search. An
/// existing one is taken only when it is a directory of root's; its ACL is set again (a job id
/// that comes round on this node finds the earlier job's directory, left by a killed step).
pub fn job_dir(top: &Path, job: u32, node: &str, uid: u32) -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = top.join(format!("{job}.{}", crate::step::record::file_safe(node)));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(&dir)?;
    if !m.is_dir() || m.uid() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is not a directory of root's", dir.display()),
        ));
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    crate::sys::grant_user_read(&dir, uid, true)?;
    Ok(dir)
}

/// The prefix `gpu-tracker mark` is given for the sockets in `dir` (every `*.sock` there).
pub fn prefix_of(dir: &Path) -> PathBuf {
    let mut p = dir.as_os_str().to_os_string();
    p.push("/");
    PathBuf::from(p)
}

/// Removes the job's directory when no socket is left in it (the job's last step on the node
/// ended); a directory still in use is left alone.
pub fn remove_if_empty(dir: &Path) {
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `path` can be listed by `user` (`runuser`, util-linux), as that user sees it.
    fn lists_as(user: &str, path: &Path) -> bool {
        std::process::Command::new("runuser")
            .args(["-u", user, "--", "ls", "-a"])
            .arg(path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// A job's sockets are listable by its user only; the directory of all jobs by nobody but
    /// root. Needs root (it makes root's directories and ACLs) and a user `nobody`.
    #[test]
    #[ignore = "needs root: tests/run-all.sh"]
    fn only_the_jobs_user_lists_its_sockets_and_nobody_lists_the_jobs() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = std::env::temp_dir().join(format!("gt-markdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let top = base.join("marks");
        // An earlier version's 0755 directory is made unlistable.
        std::fs::create_dir(&top).unwrap();
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_top(&top).unwrap();
        assert_eq!(std::fs::metadata(&top).unwrap().mode() & 0o7777, 0o711);
        let id = std::process::Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap();
        let nobody: u32 = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        let mine = job_dir(&top, 42, "n1", nobody).unwrap();
        let sock = mine.join("batch.sock");
        let inbox = super::super::mark::Inbox::bind(&sock, nobody).unwrap();
        // Root's job dir of another user (uid 1 is daemon's on Debian).
        let theirs = job_dir(&top, 43, "n1", 1).unwrap();
        assert!(lists_as("root", &top));
        assert!(
            !lists_as("nobody", &top),
            "the jobs on the node are listable"
        );
        assert!(
            lists_as("nobody", &mine),
            "the job's user cannot list its sockets"
        );
        assert!(
            !lists_as("nobody", &theirs),
            "another job's sockets are listable"
        );
        assert_eq!(
            prefix_of(&mine),
            PathBuf::from(format!("{}/", mine.display()))
        );
        // A file of a user's at the job's name is not taken.
        std::fs::remove_dir(&theirs).unwrap();
        std::fs::write(&theirs, "").unwrap();
        std::os::unix::fs::chown(&theirs, Some(nobody), None).unwrap();
        assert!(job_dir(&top, 43, "n1", 1).is_err());
        remove_if_empty(&mine);
        assert!(mine.exists(), "a directory with a socket is kept");
        drop(inbox);
        remove_if_empty(&mine);
        assert!(!mine.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
