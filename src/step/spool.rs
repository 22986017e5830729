//! The spool: `<spool_dir>/<cluster>/<jobid>/<node>.<step>.json`, written atomically (a new
//! file, fsync, rename, fsync of the directory) so a reader sees the old record or the new one,
//! never half.
//!
//! A job directory belongs to ONE job instance: its `instance.json` names the cluster, the job
//! id, the user id and the submission token ([`Instance`]). Job ids repeat (MaxJobId wraps,
//! slurmctld's state is reset); a step that finds its job's directory held by another instance
//! moves it aside into `<spool_dir>/<cluster>/.stale/` (root only) before it makes its own, so
//! no record of one user's job is ever opened to, summarized for, or listed as another's. Each
//! cluster has its own directory: two clusters may share one spool.
//!
//! The plugin writes as root, so every directory on the way is checked before use: a real
//! directory (not a symlink), owned by the writer, writable by no one else. Files are created
//! with `O_EXCL|O_NOFOLLOW` and mode 0600 relative to the open job directory, and checked to be
//! owned by the writer before they are renamed into place (glibc's `seteuid` applies to every
//! thread: a write that happened while slurmstepd had switched to the user is thrown away, not
//! published); a temporary file that such a write left behind is replaced by the next one
//! (`own_dir.rs`).

use std::fs::{self, DirBuilder};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::own_dir::{self, DirError, OwnDir};
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

/// The spool directory of one cluster.
#[derive(Debug, Clone)]
pub struct Spool {
    root: PathBuf,
    reader: Option<u32>,
}

/// The job instance a job directory belongs to (`instance.json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    /// The cluster's name (slurm.conf's `ClusterName`).
    pub cluster: String,
    /// Slurm's job id.
    pub job_id: u32,
    /// The job's user id (from SPANK's `S_JOB_UID`: Slurm's signed credential).
    pub uid: u32,
    /// The submission's token (set by the plugin in sbatch, salloc or srun when the job is
    /// submitted; empty when unknown). It tells two jobs of the SAME user with one id apart;
    /// the user id, which the job cannot choose, keeps users apart.
    #[serde(default)]
    pub token: String,
}

impl Instance {
    /// Whether a directory of instance `other` holds records of this job instance. Two known
    /// tokens must agree; an unknown one (a job submitted without the plugin on the submit
    /// host) cannot tell one job of the same user from another and is taken as the same.
    pub fn same_job(&self, other: &Instance) -> bool {
        self.cluster == other.cluster
            && self.job_id == other.job_id
            && self.uid == other.uid
            && (self.token == other.token || self.token.is_empty() || other.token.is_empty())
    }
}

/// Name of the instance file in a job directory.
pub const INSTANCE_FILE: &str = "instance.json";
/// Directory (under a cluster's spool) where directories of earlier job instances are moved.
pub const STALE_DIR: &str = ".stale";

/// Name of the marker in a job directory that says the job had more numbered steps than the
/// plugin records (`max_step_records`): steps numbered from that setting on have no record.
/// Not named `*.json`, so no reader takes it for a record.
pub const STEPS_LEFT_OUT_FILE: &str = "steps-left-out";

/// What [`STEPS_LEFT_OUT_FILE`] holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepsLeftOut {
    /// The setting when the first step was left out: steps numbered this and above have no
    /// record.
    pub max_step_records: u32,
}

/// Reads the instance file of job directory `dir`: the directory opened without following a
/// link and owned by `owner` (when given), the file a regular one (not a link, FIFO or
/// device) owned by the directory's owner, with one link and at most
/// [`super::safe_read::MAX_INSTANCE_BYTES`]. `None` when missing, unsafe or unreadable.
pub fn read_instance(dir: &Path, owner: Option<u32>) -> Option<Instance> {
    use super::safe_read::{JobDir, MAX_INSTANCE_BYTES};
    let d = JobDir::open(dir).ok()?;
    if owner.is_some_and(|o| d.owner() != o) {
        return None;
    }
    let bytes = d
        .read(std::ffi::OsStr::new(INSTANCE_FILE), MAX_INSTANCE_BYTES)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What [`Spool::claim_job_dir`] did.
#[derive(Debug)]
pub struct Claim {
    /// The job instance's directory.
    pub dir: PathBuf,
    /// Where an earlier instance's directory was moved, if one was there.
    pub moved_aside: Option<PathBuf>,
    /// Why the reader has no access (the filesystem refused the ACL), if so.
    pub not_shared: Option<String>,
}

fn io_err(p: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |e| SpoolError::Io(p.to_path_buf(), e)
}

/// Checks that `dir` is a directory (not a symlink) owned by `owner` and not writable by group or
/// others: what the plugin asks of the spool's directories before it writes there (and what
/// `gpu-tracker-report --check-node` tells of them).
pub fn check_dir(dir: &Path, owner: u32) -> Result<(), SpoolError> {
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

    /// The spool of cluster `name` (a directory name made by
    /// [`crate::config::slurmconf::cluster_dir_name`]): `<root>/<name>`, made with mode 0755 if missing,
    /// checked like the root.
    pub fn for_cluster(self, name: &str) -> Result<Spool, SpoolError> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(SpoolError::Unsafe(
                self.root.join(name),
                "bad cluster directory name".into(),
            ));
        }
        Spool::open(&self.root.join(name)).map(|s| Spool {
            reader: self.reader,
            ..s
        })
    }

    /// Records written from now on (and their job directory) are readable by user `uid` as
    /// well, through a POSIX ACL: the job's user reads them, cannot change them, and other
    /// users cannot read them. Root (uid 0) needs no grant.
    pub fn readable_by(mut self, uid: u32) -> Spool {
        self.reader = (uid != 0 && uid != u32::MAX).then_some(uid);
        self
    }

    /// The directory of job instance `inst`, made for it if there is none, with the reader's
    /// access. A directory held by another instance (or by none that can be told: no safe
    /// instance file) is first moved aside into [`STALE_DIR`], root only: its records are
    /// never opened to this job's user, nor mixed with this job's.
    ///
    /// A new directory is made under a temporary name with its instance file and ACL, then
    /// renamed into place without replacing: steps of one job starting at once agree on one.
    pub fn claim_job_dir(&self, inst: &Instance) -> Result<Claim, SpoolError> {
        let dir = self.root.join(inst.job_id.to_string());
        let owner = sys::euid();
        let mut moved_aside = None;
        for _ in 0..4 {
            match fs::symlink_metadata(&dir) {
                Ok(_) => {
                    let held = check_dir(&dir, owner).is_ok()
                        && read_instance(&dir, Some(owner)).is_some_and(|i| inst.same_job(&i));
                    if held {
                        let not_shared = self.share(&dir).err().map(|e| e.to_string());
                        return Ok(Claim {
                            dir,
                            moved_aside,
                            not_shared,
                        });
                    }
                    match self.move_aside(&dir, inst.job_id) {
                        Ok(to) => moved_aside = Some(to),
                        // Moved by another step of this job meanwhile: look again.
                        Err(SpoolError::Io(_, e)) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(SpoolError::Io(dir, e)),
            }
            let tmp = self.root.join(format!(
                ".new-{}-{}-{}",
                inst.job_id,
                std::process::id(),
                sys::gettid()
            ));
            DirBuilder::new()
                .mode(0o700)
                .create(&tmp)
                .map_err(io_err(&tmp))?;
            let made = (|| {
                let text = serde_json::to_string_pretty(inst).unwrap_or_default() + "\n";
                self.write_file(&tmp, INSTANCE_FILE, text.as_bytes())?;
                let not_shared = self.share(&tmp).err().map(|e| e.to_string());
                sys::rename_noreplace(&tmp, &dir).map_err(io_err(&dir))?;
                Ok(not_shared)
            })();
            match made {
                Ok(not_shared) => {
                    return Ok(Claim {
                        dir,
                        moved_aside,
                        not_shared,
                    });
                }
                Err(e) => {
                    let _ = fs::remove_dir_all(&tmp);
                    // Another step of this job made it first: join it (next round).
                    if !matches!(&e, SpoolError::Io(_, e) if e.kind() == io::ErrorKind::AlreadyExists)
                    {
                        return Err(e);
                    }
                }
            }
        }
        Err(SpoolError::Unsafe(
            dir,
            "the job directory keeps changing under the plugin".into(),
        ))
    }

    /// Gives the reader access to `dir` (a POSIX ACL). An error means the filesystem refuses
    /// ACLs: records are then readable by root only.
    fn share(&self, dir: &Path) -> Result<(), SpoolError> {
        if let Some(uid) = self.reader {
            sys::grant_user_read(dir, uid, true).map_err(|e| {
                SpoolError::Io(
                    dir.to_path_buf(),
                    std::io::Error::new(e.kind(), format!("ACL for uid {uid}: {e}")),
                )
            })?;
            if let Ok(f) = fs::symlink_metadata(dir.join(INSTANCE_FILE)) {
                if f.file_type().is_file() {
                    let _ = sys::grant_user_read(&dir.join(INSTANCE_FILE), uid, false);
                }
            }
        }
        Ok(())
    }

    /// Moves `dir` into `<root>/.stale/<jobid>-<time>-<pid>-<tid>` (the stale directory is made
    /// 0700, so nothing under it is readable by any user whatever its ACLs say).
    fn move_aside(&self, dir: &Path, job_id: u32) -> Result<PathBuf, SpoolError> {
        let stale = self.root.join(STALE_DIR);
        match DirBuilder::new().mode(0o700).create(&stale) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SpoolError::Io(stale, e)),
        }
        check_dir(&stale, sys::euid())?;
        if fs::symlink_metadata(&stale).map_err(io_err(&stale))?.mode() & 0o077 != 0 {
            return Err(SpoolError::Unsafe(stale, "not private (mode)".into()));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let to = stale.join(format!(
            "{job_id}-{}.{:09}-{}-{}",
            now.as_secs(),
            now.subsec_nanos(),
            std::process::id(),
            sys::gettid()
        ));
        sys::rename_noreplace(dir, &to).map_err(io_err(dir))?;
        Ok(to)
    }

    /// The spool directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of job `job_id` (claimed by [`Spool::claim_job_dir`]), checked.
    pub fn job_dir(&self, job_id: u32) -> Result<PathBuf, SpoolError> {
        let dir = self.root.join(job_id.to_string());
        check_dir(&dir, sys::euid())?;
        Ok(dir)
    }

    /// Notes in job instance `inst`'s directory (claimed for it, made if need be) that its
    /// steps numbered `max_step_records` and above are not recorded ([`STEPS_LEFT_OUT_FILE`]).
    /// Written once: a job's later steps find it there and write nothing.
    pub fn note_steps_left_out(
        &self,
        inst: &Instance,
        max_step_records: u32,
    ) -> Result<PathBuf, SpoolError> {
        let claim = self.claim_job_dir(inst)?;
        let path = claim.dir.join(STEPS_LEFT_OUT_FILE);
        if fs::symlink_metadata(&path).is_ok() {
            return Ok(path);
        }
        let text = serde_json::to_string(&StepsLeftOut { max_step_records }).unwrap_or_default();
        self.write_file(
            &claim.dir,
            STEPS_LEFT_OUT_FILE,
            format!("{text}\n").as_bytes(),
        )
    }

    /// Writes the run file of job `file.job_id` into [`super::run::RUNS_DIR`] (made 0700 if
    /// missing, checked like the job directories), replacing the job's earlier one; returns its
    /// path. Root only: no user reads it (the steps copy the run into their records).
    pub fn write_run(&self, file: &super::run::RunFile) -> Result<PathBuf, SpoolError> {
        let dir = self.root.join(super::run::RUNS_DIR);
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SpoolError::Io(dir, e)),
        }
        check_dir(&dir, sys::euid())?;
        let text = serde_json::to_string(file).unwrap_or_default() + "\n";
        let plain = Spool {
            root: self.root.clone(),
            reader: None,
        };
        plain.write_file(&dir, &format!("{}.json", file.job_id), text.as_bytes())
    }

    /// The run file of job `job_id`, read without following a link from a directory of the
    /// writer's: `None` when missing, unsafe or not a run file.
    pub fn read_run(&self, job_id: u32) -> Option<super::run::RunFile> {
        use super::safe_read::JobDir;
        let d = JobDir::open(&self.root.join(super::run::RUNS_DIR)).ok()?;
        if d.owner() != sys::euid() {
            return None;
        }
        let name = format!("{job_id}.json");
        let bytes = d
            .read(std::ffi::OsStr::new(&name), super::run::MAX_RUN_FILE_BYTES)
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes `contents` to `<job dir>/<name>` atomically; returns the path.
    pub fn write(&self, job_id: u32, name: &str, contents: &[u8]) -> Result<PathBuf, SpoolError> {
        let dir = self.job_dir(job_id)?;
        self.write_file(&dir, name, contents)
    }

    fn write_file(&self, dir: &Path, name: &str, contents: &[u8]) -> Result<PathBuf, SpoolError> {
        if name.contains('/') || name.starts_with('.') || name.is_empty() {
            return Err(SpoolError::Unsafe(
                self.root.join(name),
                "bad record file name".into(),
            ));
        }
        let path = dir.join(name);
        let owner = sys::euid();
        let d = OwnDir::open(dir, owner).map_err(|e| match e {
            DirError::Io(e) => SpoolError::Io(dir.to_path_buf(), e),
            DirError::Unsafe(why) => SpoolError::Unsafe(dir.to_path_buf(), why),
        })?;
        let tmp = dir.join(own_dir::temp_name(name));
        d.write_atomically(name, 0o600, |f| {
            f.write_all(contents)?;
            if let Some(uid) = self.reader {
                // Where ACLs are refused the record stays root-only (share_job_dir said so).
                let _ = sys::grant_user_read(&tmp, uid, false);
            }
            f.sync_all()
        })
        .map_err(io_err(&path))?;
        d.file().sync_all().map_err(io_err(dir))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use std::os::unix::fs::PermissionsExt;

    fn inst(job_id: u32, uid: u32, token: &str) -> Instance {
        Instance {
            cluster: "c1".into(),
            job_id,
            uid,
            token: token.into(),
        }
    }

    #[test]
    fn writes_atomically_with_private_modes() {
        let t = TempTree::new("spool");
        let root = t.path().join("spool");
        let s = Spool::open(&root).unwrap().for_cluster("c1").unwrap();
        assert!(
            s.write(7, "n1.batch.json", b"{}\n").is_err(),
            "no claim yet"
        );
        s.claim_job_dir(&inst(7, 0, "")).unwrap();
        let p = s.write(7, "n1.batch.json", b"{}\n").unwrap();
        assert_eq!(p, root.join("c1/7/n1.batch.json"));
        assert_eq!(fs::read(&p).unwrap(), b"{}\n");
        s.write(7, "n1.batch.json", b"{\"a\":1}\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{\"a\":1}\n");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(root.join("c1/7")).unwrap().mode() & 0o777,
            0o700
        );
        // The instance file and the record; no temporary file is left behind.
        let mut names: Vec<_> = fs::read_dir(root.join("c1/7"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["instance.json", "n1.batch.json"]);
        assert!(s.write(7, "../x.json", b"").is_err());
        assert!(Spool::open(&root).unwrap().for_cluster("../x").is_err());
    }

    #[test]
    fn a_temporary_file_left_by_an_interrupted_write_is_replaced_at_the_next_write() {
        let t = TempTree::new("spool-left");
        let s = Spool::open(&t.path().join("spool")).unwrap();
        let dir = s.claim_job_dir(&inst(7, 0, "")).unwrap().dir;
        // A write cut short after its temporary file was made (the clean-up failed: slurmstepd
        // had taken the user's id); the same thread's next write uses the same name.
        let tmp = dir.join(format!(
            ".n1.batch.json.{}.{}.tmp",
            std::process::id(),
            sys::gettid()
        ));
        fs::write(&tmp, b"{\"half").unwrap();
        let p = s.write(7, "n1.batch.json", b"{}\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}\n");
        assert!(!tmp.exists());
        // Anything but a regular file of the writer's is left alone, and not written through.
        let outside = t.path().join("outside");
        fs::write(&outside, b"keep").unwrap();
        std::os::unix::fs::symlink(&outside, &tmp).unwrap();
        let e = s.write(7, "n1.batch.json", b"{\"a\":1}\n").unwrap_err();
        assert!(e.to_string().contains("exists"), "{e}");
        assert_eq!(fs::read(&outside).unwrap(), b"keep");
        assert_eq!(fs::read(&p).unwrap(), b"{}\n");
    }

    #[test]
    fn a_reader_gets_read_access_through_an_acl() {
        let t = TempTree::new("spool-acl");
        let s = Spool::open(&t.path().join("spool"))
            .unwrap()
            .readable_by(4242);
        let claim = s.claim_job_dir(&inst(9, 4242, "")).unwrap();
        assert!(claim.not_shared.is_none(), "{:?}", claim.not_shared);
        let p = s.write(9, "n1.batch.json", b"{}").unwrap();
        // An access ACL shows its mask in the group bits of the mode: r-x on the directory,
        // r-- on the file; others get nothing.
        assert_eq!(fs::metadata(&claim.dir).unwrap().mode() & 0o777, 0o750);
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o640);
        let plain = Spool::open(&t.path().join("spool")).unwrap().readable_by(0);
        plain.claim_job_dir(&inst(10, 0, "")).unwrap();
        let q = plain.write(10, "n1.0.json", b"{}").unwrap();
        assert_eq!(fs::metadata(&q).unwrap().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_job_directory_belongs_to_one_job_instance() {
        let t = TempTree::new("spool-instance");
        let root = t.path().join("spool");
        let a = Spool::open(&root).unwrap().readable_by(1001);
        let first = a.claim_job_dir(&inst(5, 1001, "100.1")).unwrap();
        a.write(5, "n1.batch.json", b"{\"secret\":1}").unwrap();
        // Another step of the same job joins; so does one whose token is unknown.
        for token in ["100.1", ""] {
            let again = a.claim_job_dir(&inst(5, 1001, token)).unwrap();
            assert_eq!(again.dir, first.dir);
            assert!(again.moved_aside.is_none());
        }
        // The same id for another user, even with the same token (a user may copy one): the
        // earlier directory goes aside, root only.
        let b = Spool::open(&root).unwrap().readable_by(1002);
        let other = b.claim_job_dir(&inst(5, 1002, "100.1")).unwrap();
        let aside = other.moved_aside.expect("moved aside");
        assert!(aside.starts_with(root.join(STALE_DIR)));
        assert_eq!(
            fs::metadata(root.join(STALE_DIR)).unwrap().mode() & 0o777,
            0o700
        );
        assert!(aside.join("n1.batch.json").exists());
        assert!(!other.dir.join("n1.batch.json").exists());
        assert_eq!(read_instance(&other.dir, Some(0)).unwrap().uid, 1002);
        // The same user's next job with this id (another token) gets its own directory too.
        let c = b.claim_job_dir(&inst(5, 1002, "300.1")).unwrap();
        assert!(c.moved_aside.is_some());
        // A directory without a (safe) instance file is no one's: moved aside.
        fs::remove_file(c.dir.join(INSTANCE_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", c.dir.join(INSTANCE_FILE)).unwrap();
        assert!(
            b.claim_job_dir(&inst(5, 1002, "300.1"))
                .unwrap()
                .moved_aside
                .is_some()
        );
    }

    #[test]
    fn steps_starting_at_once_agree_on_one_directory() {
        let t = TempTree::new("spool-race");
        let s = Spool::open(&t.path().join("spool")).unwrap();
        let claims: Vec<Claim> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8)
                .map(|_| sc.spawn(|| s.claim_job_dir(&inst(3, 77, "1.2")).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(claims.iter().all(|c| c.moved_aside.is_none()));
        assert!(claims.iter().all(|c| c.dir == claims[0].dir));
        let left: Vec<_> = fs::read_dir(t.path().join("spool"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(left.len(), 1, "temporary directories left: {left:?}");
    }

    #[test]
    fn run_files_are_root_only_and_read_back_without_following_links() {
        use crate::step::run::{RUNS_DIR, RunFile, RunInfo};
        let t = TempTree::new("spool-runs");
        let s = Spool::open(&t.path().join("spool"))
            .unwrap()
            .readable_by(4242);
        assert!(s.read_run(7).is_none());
        let file = RunFile {
            job_id: 7,
            uid: 4242,
            token: Some("1.2.3".into()),
            job_start_unix: Some(1),
            written_unix: 1,
            run: RunInfo {
                restart_count: 1,
                time_limit_seconds: Some(60),
                ..RunInfo::default()
            },
        };
        let p = s.write_run(&file).unwrap();
        assert_eq!(p, t.path().join("spool").join(RUNS_DIR).join("7.json"));
        assert_eq!(s.read_run(7), Some(file.clone()));
        // No ACL for the job's user, on the file or its directory.
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        let dir = t.path().join("spool").join(RUNS_DIR);
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        // A link in its place is not followed.
        fs::remove_file(&p).unwrap();
        let elsewhere = t.path().join("elsewhere.json");
        fs::write(&elsewhere, serde_json::to_string(&file).unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
        assert!(s.read_run(7).is_none());
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
        // Claiming moves the link aside (never follows it) and makes a real directory.
        let c = s.claim_job_dir(&inst(8, 0, "")).unwrap();
        assert!(c.moved_aside.is_some());
        assert!(fs::symlink_metadata(&c.dir).unwrap().is_dir());
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
        let e = Spool::open(&root).unwrap_err();
        assert!(e.to_string().contains("writable"), "{e}");
    }
}
