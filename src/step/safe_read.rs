//! Reading the spool without trusting what lies in it.
//!
//! The plugin reads records as root (the summary at the end of a batch job), and
//! `gpu-tracker-report` may be run by root over every job: an entry planted in a job directory
//! must not make either of them follow a link elsewhere, wait for ever on a FIFO, open a
//! device, fill memory with a huge file, or believe a file someone else made.
//!
//! So a job directory is opened without following a symbolic link (`O_DIRECTORY |
//! O_NOFOLLOW`), and its files are opened relative to that open directory (`openat`), again
//! without following a link, without blocking and without becoming a controlling terminal
//! (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`). What was opened is then judged on its
//! descriptor (`fstat`): only a regular file owned by the job directory's owner (root, in a
//! real spool), with one link and no larger than the bound, is read, and never more than the
//! bound however it grows meanwhile. Everything else is a [`Refusal`] that says why.

use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::fs::{self, File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Largest step record read: 16 MiB. A record is bounded by what the plugin keeps (see
/// `crate::history`): at most 240 timeline buckets, each with memory, CPU and three figures of
/// min, mean and max per GPU; at most 500 events and 200 phase marks (names of at most 64
/// characters); plus one entry per GPU and per task of the step on the node. With 64 GPUs
/// (MIG instances included) and 4096 tasks on one node (Slurm's default MaxTasksPerNode is
/// 512), every figure at its longest, that is 5.4 MiB of compact JSON (the unit test
/// `the_largest_record_fits_the_bound` builds such a record and measures it): 16 MiB leaves
/// room for three times that, and a larger file is not a record the plugin wrote.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Largest instance file read (`instance.json`): a cluster name, two ids and a token, a few
/// hundred bytes.
pub const MAX_INSTANCE_BYTES: u64 = 64 << 10;

/// Why a spool entry was not used.
#[derive(Debug)]
pub enum Refusal {
    /// Refused for what it is (a symbolic link, not a regular file, too large, another owner,
    /// more than one link); the reason, in words. Nothing was read from it.
    Unsafe(String),
    /// The system refused to open or read it (permission, I/O).
    Io(io::Error),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unsafe(why) => write!(f, "refused: {why}"),
            Refusal::Io(e) => e.fmt(f),
        }
    }
}

impl Refusal {
    /// Whether it is the system's "no such file" (the entry is gone).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Refusal::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// A file type in words, for a refusal: `a symbolic link`, `a FIFO`, ...
pub fn kind_of(t: &FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Why an entry of type `t` is not read as a file, or `None` for a regular file. Asked of the
/// type `read_dir` saw (which does not follow links) so that a FIFO or a device is never even
/// opened; the descriptor is judged again after the open.
pub fn refuse_type(t: &FileType) -> Option<String> {
    (!t.is_file()).then(|| match kind_of(t) {
        "a symbolic link" => "a symbolic link; not followed".to_string(),
        k => format!("{k}, not a regular file"),
    })
}

/// Judges an open file on its descriptor: a regular file owned by `owner`, with one link, at
/// most `cap` bytes. Returns its size.
pub fn check_open(f: &File, owner: u32, cap: u64) -> Result<u64, Refusal> {
    let m = f.metadata().map_err(Refusal::Io)?;
    if let Some(why) = refuse_type(&m.file_type()) {
        return Err(Refusal::Unsafe(why));
    }
    if m.uid() != owner {
        return Err(Refusal::Unsafe(format!(
            "owned by uid {}, not by uid {owner} (the owner of its job directory)",
            m.uid()
        )));
    }
    if m.nlink() != 1 {
        return Err(Refusal::Unsafe(format!(
            "{} hard links to it (a record has one)",
            m.nlink()
        )));
    }
    if m.len() > cap {
        return Err(Refusal::Unsafe(too_large(m.len(), cap)));
    }
    Ok(m.len())
}

fn too_large(len: u64, cap: u64) -> String {
    format!("{len} bytes, larger than a record can be ({cap} bytes at most); not read")
}

/// Reads checked file `f` (of `len` bytes when judged), never more than `cap` bytes.
pub fn read_bounded(f: &File, len: u64, cap: u64) -> Result<Vec<u8>, Refusal> {
    let mut buf = Vec::with_capacity(len.min(cap) as usize);
    f.take(cap + 1).read_to_end(&mut buf).map_err(Refusal::Io)?;
    if buf.len() as u64 > cap {
        return Err(Refusal::Unsafe(format!(
            "grew past {cap} bytes while it was read; not used"
        )));
    }
    Ok(buf)
}

/// A job directory, open: entries are opened relative to it, so a directory renamed or
/// replaced after it was opened is not read from.
#[derive(Debug)]
pub struct JobDir {
    dir: File,
    path: PathBuf,
    owner: u32,
    modified: Option<SystemTime>,
}

impl JobDir {
    /// Opens directory `path`, never through a symbolic link. A link or anything else that is
    /// not a directory is an [`Refusal::Unsafe`]; a missing or forbidden one a [`Refusal::Io`].
    pub fn open(path: &Path) -> Result<JobDir, Refusal> {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path);
        let dir = match opened {
            Ok(d) => d,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                let what = fs::symlink_metadata(path)
                    .map(|m| kind_of(&m.file_type()))
                    .unwrap_or("not a directory");
                return Err(Refusal::Unsafe(format!(
                    "{what}, not a directory; not followed"
                )));
            }
            Err(e) => return Err(Refusal::Io(e)),
        };
        let m = dir.metadata().map_err(Refusal::Io)?;
        if !m.is_dir() {
            return Err(Refusal::Unsafe("not a directory".into()));
        }
        Ok(JobDir {
            owner: m.uid(),
            modified: m.modified().ok(),
            dir,
            path: path.to_path_buf(),
        })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its owner: the only owner its files may have.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// When it was last changed.
    pub fn modified(&self) -> Option<SystemTime> {
        self.modified
    }

    /// Its entries with their types as the directory says them (links not followed), sorted by
    /// name.
    pub fn entries(&self) -> io::Result<Vec<(OsString, FileType)>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.path)? {
            let e = e?;
            match e.file_type() {
                Ok(t) => out.push((e.file_name(), t)),
                // Gone meanwhile.
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn c_name(name: &OsStr) -> Result<CString, Refusal> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
            return Err(Refusal::Unsafe(format!("{name:?} is not a file name")));
        }
        CString::new(bytes).map_err(|_| Refusal::Unsafe(format!("{name:?} is not a file name")))
    }

    /// Opens entry `name` for reading and judges it ([`check_open`]): owned by this
    /// directory's owner, one link, at most `cap` bytes. Returns the file and its size.
    pub fn open_file(&self, name: &OsStr, cap: u64) -> Result<(File, u64), Refusal> {
        let c = Self::c_name(name)?;
        let flags =
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        let f = crate::sys::openat(&self.dir, &c, flags).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Refusal::Unsafe("a symbolic link; not followed".into()),
            // A socket cannot be opened: say what it is.
            Some(libc::ENXIO) => Refusal::Unsafe("a socket, not a regular file".into()),
            _ => Refusal::Io(e),
        })?;
        let len = check_open(&f, self.owner, cap)?;
        Ok((f, len))
    }

    /// Reads entry `name`: [`JobDir::open_file`], then at most `cap` bytes of it.
    pub fn read(&self, name: &OsStr, cap: u64) -> Result<Vec<u8>, Refusal> {
        let (f, len) = self.open_file(name, cap)?;
        read_bounded(&f, len, cap)
    }

    /// Removes entry `name` (not a directory) relative to the open directory: a link is
    /// removed itself, never what it points at.
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        let c = Self::c_name(name)
            .map_err(|r| io::Error::new(io::ErrorKind::InvalidInput, r.to_string()))?;
        crate::sys::unlinkat(&self.dir, &c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use std::os::unix::fs::symlink;

    fn mkfifo(p: &Path) {
        assert!(
            std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap()
                .success()
        );
    }

    fn unsafe_why(r: Result<Vec<u8>, Refusal>) -> String {
        match r {
            Err(Refusal::Unsafe(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn reads_a_regular_file_of_the_directory_owner() {
        let t = TempTree::new("safe-read-ok");
        t.write("j/a.json", "{}\n");
        let d = JobDir::open(&t.path().join("j")).unwrap();
        assert_eq!(d.owner(), crate::sys::euid());
        assert_eq!(d.read(OsStr::new("a.json"), 16).unwrap(), b"{}\n");
        // Exactly the bound is read; one byte more is refused without being read.
        assert_eq!(d.read(OsStr::new("a.json"), 3).unwrap(), b"{}\n");
        let why = unsafe_why(d.read(OsStr::new("a.json"), 2));
        assert!(why.contains("3 bytes, larger than"), "{why}");
        assert!(
            d.read(OsStr::new("missing.json"), 16)
                .unwrap_err()
                .is_not_found()
        );
        for bad in ["", ".", "..", "../j/a.json", "x\0y"] {
            assert!(
                matches!(d.read(OsStr::new(bad), 16), Err(Refusal::Unsafe(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn refuses_links_fifos_directories_huge_and_linked_files() {
        let t = TempTree::new("safe-read-bad");
        t.write("j/good.json", "{}")
            .write("elsewhere/secret.json", "secret");
        let j = t.path().join("j");
        symlink(t.path().join("elsewhere/secret.json"), j.join("link.json")).unwrap();
        mkfifo(&j.join("fifo.json"));
        fs::create_dir(j.join("dir.json")).unwrap();
        let huge = File::create(j.join("huge.json")).unwrap();
        huge.set_len(4 << 30).unwrap();
        fs::hard_link(
            t.path().join("elsewhere/secret.json"),
            j.join("linked.json"),
        )
        .unwrap();
        let d = JobDir::open(&j).unwrap();
        let cap = MAX_RECORD_BYTES;
        assert!(unsafe_why(d.read(OsStr::new("link.json"), cap)).contains("symbolic link"));
        // Opened without blocking (no writer), then refused on its descriptor.
        let started = std::time::Instant::now();
        assert!(unsafe_why(d.read(OsStr::new("fifo.json"), cap)).contains("a FIFO"));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(unsafe_why(d.read(OsStr::new("dir.json"), cap)).contains("a directory"));
        let why = unsafe_why(d.read(OsStr::new("huge.json"), cap));
        assert!(why.contains("4294967296 bytes"), "{why}");
        assert!(unsafe_why(d.read(OsStr::new("linked.json"), cap)).contains("2 hard links"));
        assert_eq!(d.read(OsStr::new("good.json"), cap).unwrap(), b"{}");
        // The types read_dir gives are not followed either.
        let kinds: Vec<(String, Option<String>)> = d
            .entries()
            .unwrap()
            .into_iter()
            .map(|(n, t)| (n.into_string().unwrap(), refuse_type(&t)))
            .collect();
        assert_eq!(kinds[0].0, "dir.json");
        assert!(
            kinds.iter().any(
                |(n, r)| n == "fifo.json" && r.as_deref() == Some("a FIFO, not a regular file")
            )
        );
        assert!(kinds.iter().any(
            |(n, r)| n == "link.json" && r.as_deref() == Some("a symbolic link; not followed")
        ));
        assert!(kinds.iter().any(|(n, r)| n == "huge.json" && r.is_none()));
    }

    #[test]
    fn a_job_directory_is_never_opened_through_a_link() {
        let t = TempTree::new("safe-read-dir");
        t.write("real/a.json", "{}").write("file", "x");
        symlink(t.path().join("real"), t.path().join("7")).unwrap();
        let why = match JobDir::open(&t.path().join("7")) {
            Err(Refusal::Unsafe(w)) => w,
            other => panic!("{other:?}"),
        };
        assert!(why.contains("a symbolic link"), "{why}");
        assert!(matches!(
            JobDir::open(&t.path().join("file")),
            Err(Refusal::Unsafe(_))
        ));
        assert!(matches!(
            JobDir::open(&t.path().join("none")),
            Err(Refusal::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
    }

    #[test]
    fn only_the_directory_owner_files_are_read() {
        if crate::sys::euid() != 0 {
            eprintln!("note: not root: a file of another owner cannot be made; skipped");
            return;
        }
        let t = TempTree::new("safe-read-owner");
        t.write("j/theirs.json", "{}");
        let p = t.path().join("j/theirs.json");
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        let d = JobDir::open(&t.path().join("j")).unwrap();
        let why = unsafe_why(d.read(OsStr::new("theirs.json"), 16));
        assert!(why.contains("owned by uid 65534, not by uid 0"), "{why}");
    }

    #[test]
    fn remove_file_removes_a_link_not_its_target() {
        let t = TempTree::new("safe-read-rm");
        t.write("j/a.json", "{}").write("elsewhere/keep", "keep");
        symlink(t.path().join("elsewhere/keep"), t.path().join("j/l.json")).unwrap();
        let d = JobDir::open(&t.path().join("j")).unwrap();
        d.remove_file(OsStr::new("l.json")).unwrap();
        d.remove_file(OsStr::new("a.json")).unwrap();
        assert!(d.remove_file(OsStr::new("..")).is_err());
        assert_eq!(
            fs::read_to_string(t.path().join("elsewhere/keep")).unwrap(),
            "keep"
        );
        assert_eq!(d.entries().unwrap().len(), 0);
    }

    /// A GPU's figures beyond memory at their largest: every clock event reason, every Xid kept.
    fn largest_depth() -> crate::gpu::figures::GpuDepth {
        use crate::gpu::figures::{EccCounts, GpuDepth, NoData, Spread, THROTTLE_BITS, XidError};
        let sp = Some(Spread {
            mean: 99.999_999_999,
            max: 100.0,
        });
        GpuDepth {
            process_utilization_percent: sp,
            cu_occupancy_percent: sp,
            sm_active_percent: sp,
            sm_occupancy_percent: sp,
            tensor_active_percent: sp,
            dram_bandwidth_percent: sp,
            throttle_seconds: Some(
                THROTTLE_BITS
                    .iter()
                    .map(|(_, n)| (n.to_string(), 123_456_789.123))
                    .collect(),
            ),
            xid_errors: Some(vec![
                XidError {
                    at: "2026-11-25T12:00:00.000+01:00".into(),
                    xid: u64::MAX,
                };
                crate::sampler::gpus::MAX_XIDS_KEPT
            ]),
            ecc_errors: Some(EccCounts {
                corrected: u64::MAX,
                uncorrected: u64::MAX,
            }),
            no_data: [crate::gpu::figures::figure::XID]
                .iter()
                .map(|f| (f.to_string(), NoData::not_supported("x".repeat(200))))
                .collect(),
        }
    }

    /// The bound holds a record far larger than any the plugin writes.
    #[test]
    fn the_largest_record_fits_the_bound() {
        use crate::history::pressure::{BucketStall, StallPair, StepPressure};
        use crate::history::{Bucket, Event, GpuStat, Stat, Timeline};
        use crate::step::record::{StepGpu, TaskRecord};
        let mut r = crate::step::record::tests_support::record("node-with-a-long-name-001", "12");
        let stat = Stat {
            min: 123_456_789_012.345_67,
            mean: 123_456_789_012.345_67,
            max: 123_456_789_012.345_67,
        };
        let s = Some(stat);
        let pair = StallPair {
            some: 123_456.789_012,
            full: Some(123_456.789_012),
        };
        let gpus = 64;
        r.gpus = (0..gpus)
            .map(|i| StepGpu {
                uuid: format!("GPU-{i:08}-aaaa-bbbb-cccc-dddddddddddd"),
                name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".into(),
                depth: largest_depth(),
                ..Default::default()
            })
            .collect();
        r.timeline = Some(Timeline {
            start_unix: 1_800_000_000.123,
            bucket_seconds: 2048.0,
            max_buckets: crate::history::MAX_BUCKETS as u32,
            gpus: r.gpus.iter().map(|g| g.uuid.clone()).collect(),
            memory_limit_bytes: Some(u64::MAX),
            buckets: (0..crate::history::MAX_BUCKETS)
                .map(|i| Bucket {
                    t: i as f64 * 2048.0,
                    samples: u32::MAX,
                    memory_bytes: stat,
                    cpu_cores: s,
                    gpus: vec![
                        GpuStat {
                            memory_bytes: s,
                            utilization_percent: s,
                            power_watts: s,
                            sm_active_percent: s,
                        };
                        gpus
                    ],
                    stall: Some(BucketStall {
                        seconds: 123_456.789_012,
                        cpu: pair,
                        memory: pair,
                        io: pair,
                    }),
                })
                .collect(),
        });
        r.pressure = Some(StepPressure::unavailable("x".repeat(300)));
        r.events = (0..crate::history::MAX_EVENTS)
            .map(|i| {
                let mut e = Event::new("mark", format!("phase {i}: {}", "x".repeat(200)));
                e.name = Some("n".repeat(crate::history::mark::MAX_NAME));
                e.value = Some(123_456.789);
                e
            })
            .collect();
        r.tasks = (0..4096)
            .map(|i| TaskRecord {
                local_id: Some(i),
                global_id: Some(100_000 + i),
                pid: 4_000_000 + i,
                ended: true,
                exit_code: Some(-1),
                peak_memory_bytes: u64::MAX,
                peak_source: "cgroup memory.peak of the task".into(),
                sampled_peak_rss_bytes: u64::MAX,
                cgroup_peak_bytes: Some(u64::MAX),
                oom_kills: Some(u64::MAX),
                cpu_seconds: 123_456_789.123_456,
                cpu_source: "cgroup cpu.stat of the task".into(),
                max_threads: Some(u64::MAX),
                max_processes: Some(u64::MAX),
                ..Default::default()
            })
            .collect();
        let len = r.to_json().len() as u64;
        eprintln!("the largest record: {len} bytes");
        assert!(len < MAX_RECORD_BYTES / 2, "{len} bytes");
        assert!(
            len > MAX_RECORD_BYTES / 8,
            "{len} bytes: the bound is too loose"
        );
    }
}
