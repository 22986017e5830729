//! The slurmd daemons of this machine, from `/proc`: which node each serves (`-N`), when it
//! started, and the Slurm release of its program (`slurmd -V`).
//!
//! slurmd runs the plugin's `job_prolog` only when it saw that symbol when it started, so a
//! plugin installed or replaced after slurmd started has its prolog missing until slurmd is
//! restarted (docs/INSTALL.md). The plugin file's change time is compared with each slurmd's
//! start.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long `slurmd -V` may take.
pub const VERSION_DEADLINE: Duration = Duration::from_secs(10);

/// One running slurmd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slurmd {
    /// Its process id.
    pub pid: u32,
    /// Its program (`/proc/<pid>/exe`), when readable.
    pub exe: Option<PathBuf>,
    /// The node it serves (`-N NAME`), when given: several slurmd on one machine.
    pub node: Option<String>,
    /// The slurm.conf it reads (`-f PATH`), when given.
    pub conf: Option<PathBuf>,
    /// When it started, in seconds since the epoch.
    pub started_unix: Option<i64>,
}

/// The slurmd processes under `proc_root`, by pid.
pub fn find(proc_root: &Path) -> Vec<Slurmd> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let btime = std::fs::read_to_string(proc_root.join("stat"))
        .ok()
        .and_then(|s| boot_time(&s));
    let ticks = crate::sys::clock_ticks().max(1);
    let mut out: Vec<Slurmd> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let dir = e.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            if comm.trim_end() != "slurmd" {
                return None;
            }
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let started_unix = std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|s| start_ticks(&s))
                .zip(btime)
                .map(|(t, b)| b + (t / ticks) as i64);
            Some(Slurmd {
                pid,
                exe: std::fs::read_link(dir.join("exe")).ok(),
                node: argument(&cmdline, "-N"),
                conf: argument(&cmdline, "-f").map(PathBuf::from),
                started_unix,
            })
        })
        .collect();
    out.sort_by_key(|d| d.pid);
    out
}

/// The value of option `flag` (`-N NAME` or `-NNAME`) in a slurmd's `/proc/<pid>/cmdline`.
pub fn argument(cmdline: &[u8], flag: &str) -> Option<String> {
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            return it.next().cloned();
        }
        if let Some(n) = a.strip_prefix(flag).filter(|n| !n.is_empty()) {
            return Some(n.to_string());
        }
    }
    None
}

/// The start time, in clock ticks after boot, of `/proc/<pid>/stat` (its 22nd field; the
/// command name, field 2, may hold blanks and parentheses, so fields are counted after its
/// last `)`).
pub fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The boot time (`btime`) of `/proc/stat`, in seconds since the epoch.
pub fn boot_time(stat: &str) -> Option<i64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The release `slurmd -V` prints (`slurm 22.05.8`, `slurm-wlm 24.11.0`, `slurm 25.05.0-0rc1`):
/// (major, minor, micro).
pub fn parse_version(out: &str) -> Option<(u32, u32, u32)> {
    let word = out.split_whitespace().find(|w| {
        w.split('.').count() >= 2 && w.chars().next().is_some_and(|c| c.is_ascii_digit())
    })?;
    let mut parts = word.split('.');
    let number = |p: Option<&str>| -> Option<u32> {
        let p = p?;
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let major = number(parts.next())?;
    let minor = number(parts.next())?;
    let micro = number(parts.next()).unwrap_or(0);
    Some((major, minor, micro))
}

/// The release of slurmd's program: `PROGRAM -V`, where PROGRAM is the running slurmd's (else
/// `slurmd` on the PATH); the release and the program asked.
pub fn version(daemons: &[Slurmd]) -> Result<((u32, u32, u32), String), String> {
    // A program replaced since slurmd started reads as "PATH (deleted)": the new one is what
    // the next slurmd runs, but not what runs now; the running one is named.
    let program = daemons
        .iter()
        .find_map(|d| d.exe.clone())
        .map(|p| p.display().to_string())
        .map(|p| p.trim_end_matches(" (deleted)").to_string())
        .unwrap_or_else(|| "slurmd".into());
    let out = crate::slurm::command::run(
        std::process::Command::new(&program).arg("-V"),
        VERSION_DEADLINE,
    )
    .map_err(|e| format!("{program} -V: {e}"))?;
    parse_version(&out)
        .map(|v| (v, program.clone()))
        .ok_or_else(|| format!("{program} -V printed no release: {:?}", out.trim()))
}

/// How much earlier than its real start a process's start time may read: `/proc/stat`'s
/// `btime` and the start's clock ticks are each cut to a whole second and tick, and the
/// file's change time to a whole second, so a slurmd restarted the second after the plugin
/// was installed may read as started before it.
pub const START_SLACK_SECONDS: i64 = 2;

/// The slurmd of `daemons` that started before `changed_unix` (the plugin file's change),
/// by more than [`START_SLACK_SECONDS`]: those whose prolog is not the installed plugin's. A
/// slurmd whose start cannot be told is not among them.
pub fn started_before(daemons: &[Slurmd], changed_unix: i64) -> Vec<&Slurmd> {
    daemons
        .iter()
        .filter(|d| {
            d.started_unix
                .is_some_and(|s| s + START_SLACK_SECONDS < changed_unix)
        })
        .collect()
}

/// A slurmd for people: `slurmd -N vm (pid 12)`.
pub fn describe(d: &Slurmd) -> String {
    match &d.node {
        Some(n) => format!("slurmd -N {n} (pid {})", d.pid),
        None => format!("slurmd (pid {})", d.pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;

    #[test]
    fn slurmd_releases_are_read_from_what_it_prints() {
        assert_eq!(parse_version("slurm 22.05.8\n"), Some((22, 5, 8)));
        assert_eq!(parse_version("slurm-wlm 24.11.0"), Some((24, 11, 0)));
        assert_eq!(parse_version("slurm 25.05.0-0rc1"), Some((25, 5, 0)));
        assert_eq!(parse_version("slurm 26.05"), Some((26, 5, 0)));
        assert_eq!(parse_version("slurmd: error: no"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn a_processs_start_and_node_are_read_from_proc() {
        // A command name with blanks and a parenthesis does not shift the fields.
        let stat = "4242 (slurm d) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    123456 1000000 100 18446744073709551615\n";
        assert_eq!(start_ticks(stat), Some(123456));
        assert_eq!(start_ticks("garbage"), None);
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1764370000\nprocesses 9\n"),
            Some(1764370000)
        );
        let cmdline = b"slurmd\0-f\0/x/slurm.conf\0-N\0vm-2\0";
        assert_eq!(argument(cmdline, "-N"), Some("vm-2".into()));
        assert_eq!(argument(cmdline, "-f"), Some("/x/slurm.conf".into()));
        assert_eq!(argument(b"slurmd\0-Nvm3\0", "-N"), Some("vm3".into()));
        assert_eq!(argument(b"/usr/sbin/slurmd\0-D\0", "-N"), None);
    }

    #[test]
    fn slurmd_processes_are_found_with_their_start() {
        let t = TempTree::new("check-slurmd");
        t.write("stat", "cpu 0\nbtime 1000\n")
            .write("10/comm", "slurmd\n")
            .write("10/cmdline", "slurmd\0-f\0/e/s.conf\0-N\0n1\0")
            .write(
                "10/stat",
                "10 (slurmd) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0\n",
            )
            .write("11/comm", "slurmstepd\n")
            .write("self/comm", "slurmd\n");
        let ticks = crate::sys::clock_ticks() as i64;
        let found = find(t.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, 10);
        assert_eq!(found[0].node.as_deref(), Some("n1"));
        assert_eq!(found[0].conf.as_deref(), Some(Path::new("/e/s.conf")));
        assert_eq!(found[0].started_unix, Some(1000 + 500 / ticks));
        let started = found[0].started_unix.unwrap();
        assert_eq!(started_before(&found, started + 3).len(), 1);
        // Restarted the second after the install: within what the clocks can tell.
        assert!(started_before(&found, started + 2).is_empty());
        assert!(started_before(&found, started).is_empty());
        assert_eq!(describe(&found[0]), "slurmd -N n1 (pid 10)");
    }
}
