//! Pure parsers for the few `/proc` files the sampler reads. They take file contents, never
//! paths, so they are tested here on literal contents; `super::ProcFs` does the I/O.
//!
//! The files read at every sample (`stat`, `status`, `meminfo`) have parsers of their own that
//! take only the fields used, checked against the `procfs` crate's on this machine's live files;
//! `smaps_rollup` goes through `procfs`'s. Figures are converted to bytes and clock ticks.

use procfs::FromRead;

/// What was wrong with a file's contents.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// Fields of `/proc/<pid>/stat` the sampler uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStat {
    /// Parent process id.
    pub ppid: u32,
    /// Process state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// User CPU time of the process itself, in clock ticks.
    pub utime: u64,
    /// System CPU time of the process itself, in clock ticks.
    pub stime: u64,
    /// User CPU time of the children this process has waited for, in clock ticks.
    pub cutime: u64,
    /// System CPU time of the children this process has waited for, in clock ticks.
    pub cstime: u64,
    /// Number of threads.
    pub threads: u64,
    /// Start time after boot, in clock ticks: with the pid, it names one process for good.
    pub starttime: u64,
    /// Resident memory, pages: the same counters as `statm`'s resident figure.
    pub rss_pages: u64,
}

impl PidStat {
    /// CPU time of the process itself.
    pub fn own_ticks(&self) -> u64 {
        self.utime + self.stime
    }
    /// CPU time of the children it has reaped (and theirs, recursively).
    pub fn reaped_ticks(&self) -> u64 {
        self.cutime + self.cstime
    }
}

/// Parses `/proc/<pid>/stat`. Read at every sample for every process that ran, so it picks its
/// nine fields itself instead of building all fifty-two: the command name is skipped up to the
/// line's last `)` (a name may hold spaces and parentheses), then fields are counted from the
/// state, the third field of proc(5).
pub fn parse_pid_stat(contents: &[u8]) -> Result<PidStat, ParseError> {
    let bad = |what: &str| ParseError(format!("stat line: {what}"));
    let close = contents
        .iter()
        .rposition(|&b| b == b')')
        .ok_or_else(|| bad("no command name"))?;
    let rest = std::str::from_utf8(&contents[close + 1..]).map_err(|_| bad("not ASCII"))?;
    // fields[0] is field 3 of proc(5) (state), fields[k] is field k + 3.
    let fields: Vec<&str> = rest.split_ascii_whitespace().take(22).collect();
    if fields.len() < 22 {
        return Err(bad("too few fields"));
    }
    let num = |k: usize| -> Result<u64, ParseError> {
        let f = fields[k - 3];
        // cutime and cstime are signed in the kernel's format; never negative in practice.
        f.parse::<u64>()
            .or_else(|_| f.parse::<i64>().map(|v| v.max(0) as u64))
            .map_err(|_| bad(&format!("field {k} is {f:?}")))
    };
    let state = fields[0].chars().next().ok_or_else(|| bad("no state"))?;
    Ok(PidStat {
        ppid: u32::try_from(num(4)?).unwrap_or(0),
        state,
        utime: num(14)?,
        stime: num(15)?,
        cutime: num(16)?,
        cstime: num(17)?,
        threads: num(20)?,
        starttime: num(22)?,
        rss_pages: num(24)?,
    })
}

/// `/proc/<pid>/statm`, in bytes: the cheapest file with a process's resident memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Statm {
    /// Resident memory (`VmRSS`).
    pub resident: u64,
    /// Resident file-backed and shared memory (`RssFile + RssShmem`); the rest is anonymous.
    pub shared: u64,
}

impl Statm {
    /// The split `/proc/<pid>/status` would give ([`MemSplit::from_status`]): anonymous memory
    /// as private, file and shmem pages as shared.
    pub fn split(&self) -> MemSplit {
        MemSplit {
            private: self.resident.saturating_sub(self.shared),
            shared: self.shared,
        }
    }
}

/// Parses `/proc/<pid>/statm` (pages of `page_size` bytes).
pub fn parse_statm(contents: &[u8], page_size: u64) -> Result<Statm, ParseError> {
    let s = std::str::from_utf8(contents).map_err(|_| ParseError("statm: not ASCII".into()))?;
    let mut f = s.split_ascii_whitespace().skip(1).map(str::parse::<u64>);
    match (f.next(), f.next()) {
        (Some(Ok(resident)), Some(Ok(shared))) => Ok(Statm {
            resident: resident * page_size,
            shared: shared * page_size,
        }),
        _ => Err(ParseError(format!("statm: {:?}", s.trim()))),
    }
}

/// The CPU time a task has run, in nanoseconds, from `/proc/<pid>/schedstat` (its first field;
/// for a process, its main thread's). `None` where the kernel keeps no such figure (it writes
/// `0 0 0`) or the task has not been charged any time yet: then it cannot tell whether the task
/// ran, and the caller reads `stat`.
pub fn parse_schedstat_runtime(contents: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(contents).ok()?;
    let ns: u64 = s.split_ascii_whitespace().next()?.parse().ok()?;
    (ns > 0).then_some(ns)
}

/// Fields of `/proc/<pid>/status` the sampler uses, in bytes. Memory fields are `None` for
/// kernel threads and zombies (their memory is already gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PidStatus {
    /// Resident set size now (`VmRSS`).
    pub rss: Option<u64>,
    /// Peak resident set size since the process started or last exec'd (`VmHWM`): exact, kept by
    /// the kernel, so a spike between two samples is not missed.
    pub hwm: Option<u64>,
    /// Resident anonymous memory (`RssAnon`).
    pub rss_anon: Option<u64>,
    /// Resident file mappings (`RssFile`).
    pub rss_file: Option<u64>,
    /// Resident shared memory: shmem, tmpfs, shared anonymous mappings (`RssShmem`).
    pub rss_shmem: Option<u64>,
    /// Number of threads.
    pub threads: u64,
}

/// The first number after `Key:` of each of `keys`, in one pass over a `Key:   value [kB]` file
/// (`status`, `meminfo`), on its bytes (a process's name need not be UTF-8). A key whose value
/// is no number is missing. The sampler reads these files at every sample: a parser that keeps
/// every line in a map cost the sampler thread more than half its own instructions.
fn keyed_numbers<const N: usize>(contents: &[u8], keys: [&[u8]; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    for line in contents.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let Some(i) = keys.iter().position(|k| *k == &line[..colon]) else {
            continue;
        };
        let value = line[colon + 1..]
            .split(|b| b.is_ascii_whitespace())
            .find(|w| !w.is_empty());
        out[i] = value
            .and_then(|w| std::str::from_utf8(w).ok())
            .and_then(|w| w.parse().ok());
    }
    out
}

/// Parses `/proc/<pid>/status`.
pub fn parse_pid_status(contents: &[u8]) -> Result<PidStatus, ParseError> {
    let [rss, hwm, rss_anon, rss_file, rss_shmem, threads] = keyed_numbers(
        contents,
        [
            b"VmRSS",
            b"VmHWM",
            b"RssAnon",
            b"RssFile",
            b"RssShmem",
            b"Threads",
        ],
    );
    let kib = |v: Option<u64>| v.map(|k| k * 1024);
    Ok(PidStatus {
        rss: kib(rss),
        hwm: kib(hwm),
        rss_anon: kib(rss_anon),
        rss_file: kib(rss_file),
        rss_shmem: kib(rss_shmem),
        threads: threads.ok_or_else(|| ParseError("status: no `Threads` line".into()))?,
    })
}

/// The private/shared split of a process's resident memory, in bytes, from
/// `/proc/<pid>/smaps_rollup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemSplit {
    /// Resident memory mapped by this process alone (`Private_Clean + Private_Dirty`).
    pub private: u64,
    /// Resident memory also mapped by another process (`Shared_Clean + Shared_Dirty`).
    pub shared: u64,
}

impl MemSplit {
    /// Private plus shared: the resident set.
    pub fn total(&self) -> u64 {
        self.private + self.shared
    }

    /// The split estimated from `/proc/<pid>/status` alone, for when reading smaps is too costly
    /// or not allowed: anonymous memory as private, file and shmem pages as shared.
    pub fn from_status(st: &PidStatus) -> Option<MemSplit> {
        let anon = st.rss_anon?;
        Some(MemSplit {
            private: anon,
            shared: st.rss_file.unwrap_or(0) + st.rss_shmem.unwrap_or(0),
        })
    }
}

/// Parses `/proc/<pid>/smaps_rollup`.
pub fn parse_smaps_rollup(contents: &[u8]) -> Result<MemSplit, ParseError> {
    let maps = procfs::process::SmapsRollup::from_read(contents)
        .map_err(|e| ParseError(e.to_string()))?
        .memory_map_rollup;
    let mut split = MemSplit::default();
    for m in maps.iter() {
        let get = |k: &str| m.extension.map.get(k).copied().unwrap_or(0);
        split.private += get("Private_Clean") + get("Private_Dirty");
        split.shared += get("Shared_Clean") + get("Shared_Dirty");
    }
    if maps.iter().next().is_none() {
        return Err(ParseError("no rollup entry".into()));
    }
    Ok(split)
}

/// Cumulative CPU time of the whole machine, from the first line of `/proc/stat`, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTotals {
    /// Ticks spent doing anything but idling or waiting for I/O.
    pub busy: u64,
    /// All ticks, summed over every CPU.
    pub total: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`. Guest time is already inside user time,
/// so it is not added again.
pub fn parse_cpu_totals(contents: &str) -> Result<CpuTotals, ParseError> {
    let line = contents
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| ParseError("no aggregate `cpu` line".into()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|e| ParseError(format!("bad `cpu` line: {e}")))?;
    if v.len() < 4 {
        return Err(ParseError("`cpu` line has fewer than 4 fields".into()));
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Ok(CpuTotals {
        busy: total - idle.min(total),
        total,
    })
}

/// Machine memory figures from `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// Memory in use as `psutil` (and so `gpu_tracker`) counts it: total minus free, buffers,
    /// page cache and reclaimable slab.
    pub used: u64,
}

/// Parses `/proc/meminfo`.
pub fn parse_meminfo(contents: &[u8]) -> Result<MemInfo, ParseError> {
    let keys: [&[u8]; 5] = [
        b"MemTotal",
        b"MemFree",
        b"Buffers",
        b"Cached",
        b"SReclaimable",
    ];
    let [total, free, buffers, cached, reclaimable] = keyed_numbers(contents, keys);
    let need = |v: Option<u64>, i: usize| {
        v.map(|k| k.saturating_mul(1024)).ok_or_else(|| {
            ParseError(format!(
                "meminfo: no `{}` line",
                String::from_utf8_lossy(keys[i])
            ))
        })
    };
    let (total, free) = (need(total, 0)?, need(free, 1)?);
    let cached = need(cached, 3)?.saturating_add(reclaimable.unwrap_or(0).saturating_mul(1024));
    let mut used = total.saturating_sub(
        free.saturating_add(need(buffers, 2)?)
            .saturating_add(cached),
    );
    if used == 0 {
        used = total.saturating_sub(free);
    }
    Ok(MemInfo { total, used })
}

/// Parses a `children` file (`/proc/<pid>/task/<tid>/children`): pids separated by spaces.
pub fn parse_pid_list(contents: &str) -> Vec<u32> {
    contents
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real /proc/<pid>/stat line of a python process, with a space and parens in its name.
    const STAT: &str = "4242 (py (x) 1) S 4200 4242 4200 34816 4242 4194304 1873 0 0 0 \
        150 30 7 2 20 0 3 0 123456 15339520 2300 18446744073709551615 1 1 0 0 0 0 0 16781312 \
        134234626 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn pid_stat_fields() {
        let s = parse_pid_stat(STAT.as_bytes()).unwrap();
        assert_eq!(s.ppid, 4200);
        assert_eq!(s.state, 'S');
        assert_eq!((s.utime, s.stime, s.cutime, s.cstime), (150, 30, 7, 2));
        assert_eq!(s.own_ticks(), 180);
        assert_eq!(s.reaped_ticks(), 9);
        assert_eq!(s.threads, 3);
        assert_eq!(s.starttime, 123456);
        assert_eq!(s.rss_pages, 2300);
    }

    #[test]
    fn pid_stat_garbage_is_an_error() {
        assert!(parse_pid_stat(b"not a stat line").is_err());
        assert!(parse_pid_stat(b"1 (a) S 0 1").is_err(), "too short");
        assert!(parse_pid_stat(STAT.replace(" 150 ", " x ").as_bytes()).is_err());
    }

    #[test]
    fn pid_stat_agrees_with_the_procfs_crate_on_live_processes() {
        let mut checked = 0;
        for ent in std::fs::read_dir("/proc").unwrap().flatten() {
            if ent
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_none()
            {
                continue;
            }
            let Ok(b) = std::fs::read(ent.path().join("stat")) else {
                continue;
            };
            let theirs = procfs::process::Stat::from_read(&b[..]).unwrap();
            let ours = parse_pid_stat(&b).unwrap();
            assert_eq!(ours.ppid as i32, theirs.ppid);
            assert_eq!(ours.state, theirs.state);
            assert_eq!((ours.utime, ours.stime), (theirs.utime, theirs.stime));
            assert_eq!(ours.cutime as i64, theirs.cutime);
            assert_eq!(ours.cstime as i64, theirs.cstime);
            assert_eq!(ours.threads as i64, theirs.num_threads);
            assert_eq!(ours.starttime, theirs.starttime);
            assert_eq!(ours.rss_pages as i64, theirs.rss as i64);
            checked += 1;
        }
        assert!(checked > 1);
    }

    #[test]
    fn status_and_meminfo_agree_with_the_procfs_crate_on_live_files() {
        let mut checked = 0;
        for ent in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = ent.file_name();
            if name.to_str().is_none_or(|n| n.parse::<u32>().is_err()) {
                continue;
            }
            let Ok(b) = std::fs::read(ent.path().join("status")) else {
                continue;
            };
            let theirs = procfs::process::Status::from_read(&b[..]).unwrap();
            let ours = parse_pid_status(&b).unwrap();
            let kib = |v: Option<u64>| v.map(|k| k * 1024);
            assert_eq!(ours.rss, kib(theirs.vmrss));
            assert_eq!(ours.hwm, kib(theirs.vmhwm));
            assert_eq!(ours.rss_anon, kib(theirs.rssanon));
            assert_eq!(ours.rss_file, kib(theirs.rssfile));
            assert_eq!(ours.rss_shmem, kib(theirs.rssshmem));
            assert_eq!(ours.threads, theirs.threads);
            checked += 1;
        }
        assert!(checked > 1);
        let b = std::fs::read("/proc/meminfo").unwrap();
        let theirs = procfs::Meminfo::from_read(&b[..]).unwrap();
        let ours = parse_meminfo(&b).unwrap();
        assert_eq!(ours.total, theirs.mem_total);
        let cached = theirs.cached + theirs.s_reclaimable.unwrap_or(0);
        let used = theirs
            .mem_total
            .saturating_sub(theirs.mem_free + theirs.buffers + cached);
        assert_eq!(
            ours.used,
            if used == 0 {
                theirs.mem_total - theirs.mem_free
            } else {
                used
            }
        );
    }

    #[test]
    fn status_and_meminfo_without_their_needed_lines_are_errors() {
        let no_threads: String = STATUS
            .lines()
            .filter(|l| !l.starts_with("Threads"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(parse_pid_status(no_threads.as_bytes()).is_err());
        assert!(parse_pid_status(b"").is_err());
        // A value that is no number is missing, not 0.
        let s = parse_pid_status(b"VmHWM:\tlots kB\nThreads:\t1\n").unwrap();
        assert_eq!((s.hwm, s.threads), (None, 1));
        // A name that is not UTF-8 is no reason to lose the figures.
        let s = parse_pid_status(b"Name:\t\xff\xfe\nVmRSS:\t 8 kB\nThreads:\t2\n").unwrap();
        assert_eq!((s.rss, s.threads), (Some(8192), 2));
        assert!(parse_meminfo(b"MemTotal: 10 kB\nMemFree: 5 kB\n").is_err());
        // `Cached` is not `SwapCached`.
        let m = parse_meminfo(
            b"MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nSwapCached: 50 kB\nCached: 20 kB\n",
        )
        .unwrap();
        assert_eq!((m.total, m.used), (100 * 1024, 65 * 1024));
    }

    #[test]
    fn statm_in_bytes_and_its_split() {
        let m = parse_statm(b"3750 2300 1250 700 0 900 0\n", 4096).unwrap();
        assert_eq!((m.resident, m.shared), (2300 * 4096, 1250 * 4096));
        assert_eq!(m.split().private, 1050 * 4096);
        assert_eq!(m.split().total(), m.resident);
        // A zombie's statm: all zeros, still a reading.
        assert_eq!(
            parse_statm(b"0 0 0 0 0 0 0\n", 4096).unwrap(),
            Statm::default()
        );
        assert!(parse_statm(b"", 4096).is_err());
        assert!(parse_statm(b"12 x 3", 4096).is_err());
    }

    #[test]
    fn schedstat_runtime_or_nothing_to_tell() {
        assert_eq!(
            parse_schedstat_runtime(b"8101992 106729 14\n"),
            Some(8101992)
        );
        assert_eq!(parse_schedstat_runtime(b"0 0 0\n"), None);
        assert_eq!(parse_schedstat_runtime(b""), None);
        assert_eq!(parse_schedstat_runtime(b"-"), None);
    }

    const STATUS: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
Ngid:\t0\nPid:\t4242\nPPid:\t4200\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n\
Gid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t1000 \nNStgid:\t4242\nNSpid:\t4242\n\
NSpgid:\t4242\nNSsid:\t4200\nVmPeak:\t  280000 kB\nVmSize:\t   15000 kB\nVmLck:\t       0 kB\n\
VmPin:\t       0 kB\nVmHWM:\t  262400 kB\nVmRSS:\t    9200 kB\nRssAnon:\t    4000 kB\n\
RssFile:\t    5000 kB\nRssShmem:\t     200 kB\nVmData:\t    3000 kB\nVmStk:\t     132 kB\n\
VmExe:\t    2800 kB\nVmLib:\t    3500 kB\nVmPTE:\t      52 kB\nVmSwap:\t       0 kB\n\
HugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t3\nSigQ:\t0/95617\n\
SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n\
SigIgn:\t0000000001001000\nSigCgt:\t0000000100000002\nCapInh:\t0000000000000000\n\
CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n\
CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n\
Speculation_Store_Bypass:\tthread vulnerable\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n\
Mems_allowed:\t00000000,00000001\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t10\n\
nonvoluntary_ctxt_switches:\t2\n";

    #[test]
    fn status_memory_in_bytes_and_threads() {
        let s = parse_pid_status(STATUS.as_bytes()).unwrap();
        assert_eq!(s.hwm, Some(262_400 * 1024));
        assert_eq!(s.rss, Some(9_200 * 1024));
        assert_eq!(s.rss_anon, Some(4_000 * 1024));
        assert_eq!(s.threads, 3);
        let split = MemSplit::from_status(&s).unwrap();
        assert_eq!(split.private, 4_000 * 1024);
        assert_eq!(split.shared, 5_200 * 1024);
    }

    #[test]
    fn status_of_a_zombie_has_no_memory() {
        let zombie: String = STATUS
            .lines()
            .filter(|l| !l.starts_with("Vm") && !l.starts_with("Rss"))
            .map(|l| format!("{l}\n"))
            .collect();
        let s = parse_pid_status(zombie.as_bytes()).unwrap();
        assert_eq!(s.hwm, None);
        assert_eq!(MemSplit::from_status(&s), None);
    }

    const SMAPS_ROLLUP: &str =
        "55d0c8a4e000-7ffd3a5f1000 ---p 00000000 00:00 0                          [rollup]
Rss:                9216 kB
Pss:                5000 kB
Pss_Anon:           4000 kB
Pss_File:            900 kB
Pss_Shmem:           100 kB
Shared_Clean:       4800 kB
Shared_Dirty:        400 kB
Private_Clean:       100 kB
Private_Dirty:      3916 kB
Referenced:         9216 kB
Anonymous:          4000 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
";

    #[test]
    fn smaps_rollup_split() {
        let m = parse_smaps_rollup(SMAPS_ROLLUP.as_bytes()).unwrap();
        assert_eq!(m.private, 4_016 * 1024);
        assert_eq!(m.shared, 5_200 * 1024);
        assert_eq!(m.total(), 9_216 * 1024);
        assert!(parse_smaps_rollup(b"").is_err());
    }

    #[test]
    fn cpu_totals_skip_guest_and_count_iowait_as_idle() {
        let s = "cpu  100 5 50 800 40 1 2 3 60 0\ncpu0 50 2 25 400 20 0 1 1 30 0\nintr 1\n";
        let c = parse_cpu_totals(s).unwrap();
        assert_eq!(c.total, 100 + 5 + 50 + 800 + 40 + 1 + 2 + 3);
        assert_eq!(c.busy, 100 + 5 + 50 + 1 + 2 + 3);
        assert!(parse_cpu_totals("cpu0 1 2 3 4\n").is_err());
        assert!(parse_cpu_totals("cpu  1 x 3 4\n").is_err());
    }

    #[test]
    fn meminfo_used_like_psutil() {
        let s = "MemTotal:       1000000 kB\nMemFree:         200000 kB\nMemAvailable:    600000 kB\n\
Buffers:          50000 kB\nCached:          300000 kB\nSwapCached:            0 kB\n\
Active:          100000 kB\nInactive:        100000 kB\nSwapTotal:             0 kB\n\
SwapFree:              0 kB\nDirty:                 0 kB\nWriteback:             0 kB\n\
AnonPages:       100000 kB\nMapped:                0 kB\nShmem:                 0 kB\n\
Slab:             60000 kB\nSReclaimable:     40000 kB\nSUnreclaim:       20000 kB\n\
KernelStack:           0 kB\nPageTables:            0 kB\nNFS_Unstable:          0 kB\n\
Bounce:                0 kB\nWritebackTmp:          0 kB\nCommitLimit:           0 kB\n\
Committed_AS:          0 kB\nVmallocTotal:          0 kB\nVmallocUsed:           0 kB\n\
VmallocChunk:          0 kB\n";
        let m = parse_meminfo(s.as_bytes()).unwrap();
        assert_eq!(m.total, 1_000_000 * 1024);
        assert_eq!(
            m.used,
            (1_000_000 - 200_000 - 50_000 - 300_000 - 40_000) * 1024
        );
    }

    #[test]
    fn pid_lists() {
        assert_eq!(parse_pid_list("12 13 4000 \n"), vec![12, 13, 4000]);
        assert!(parse_pid_list("").is_empty());
    }
}
