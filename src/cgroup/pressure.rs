//! Pressure stall information (PSI) of a cgroup v2: for CPU, memory and I/O, the time in which
//! some (`some`) or all (`full`) of the cgroup's runnable tasks waited for the resource, as the
//! kernel's cumulative microsecond counters (`total=`), from the cgroup's `cpu.pressure`,
//! `memory.pressure` and `io.pressure`. The counters start at 0 when the cgroup is made.
//!
//! cgroup v1 keeps no pressure per cgroup. A kernel booted with `psi=0` (or built with
//! `CONFIG_PSI_DEFAULT_DISABLED` and not booted with `psi=1`), or with
//! `cgroup_disable=pressure`, or a cgroup whose `cgroup.pressure` is 0, has no such files (older
//! kernels keep the files and refuse to read them, `EOPNOTSUPP`): then every figure is unknown,
//! never 0, and [`Unavailable`] says why.

use std::io;
use std::path::Path;

use super::{Cgroup, Version};

/// The resources the kernel measures, in the order figures are given.
pub const RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

/// One resource's stall counters, microseconds since the cgroup was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stall {
    /// Time in which at least one task waited.
    pub some_us: u64,
    /// Time in which every runnable task waited (`None`: the kernel gives no `full` line, as
    /// for CPU before 5.13).
    pub full_us: Option<u64>,
}

/// The three resources' counters at one reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PressureTotals {
    /// CPU: runnable tasks that waited for a core.
    pub cpu: Stall,
    /// Memory: tasks stalled in reclaim, refaulting their working set, or swapping.
    pub memory: Stall,
    /// I/O: tasks waiting for block I/O.
    pub io: Stall,
}

impl PressureTotals {
    /// The counters in the order of [`RESOURCES`].
    pub fn by_resource(&self) -> [Stall; 3] {
        [self.cpu, self.memory, self.io]
    }
}

/// Why a cgroup has no pressure figures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// cgroup v1.
    #[error("cgroup v1 keeps no pressure stall figures per cgroup (cgroup v2 does)")]
    CgroupV1,
    /// The files are not there, or the kernel refuses to read them.
    #[error(
        "the kernel keeps no pressure stall figures for the step's cgroup ({0}): pressure stall \
         information is off (boot with psi=1, and without cgroup_disable=pressure)"
    )]
    Off(String),
    /// A file could not be read for another reason, or did not read as the kernel writes it.
    #[error("{0}")]
    Unreadable(String),
}

impl Unavailable {
    /// Whether a later reading could succeed (a passing fault, not the kernel's setup).
    pub fn is_passing(&self) -> bool {
        matches!(self, Unavailable::Unreadable(_))
    }
}

/// One file's `some` and `full` totals: lines `some avg10=0.00 avg60=0.00 avg300=0.00
/// total=12345` and `full ...`. `None` without a `some` total.
pub fn parse(contents: &str) -> Option<Stall> {
    let total = |kind: &str| {
        contents.lines().find_map(|l| {
            let mut words = l.split_ascii_whitespace();
            if words.next()? != kind {
                return None;
            }
            words.find_map(|w| w.strip_prefix("total=")?.parse::<u64>().ok())
        })
    };
    Some(Stall {
        some_us: total("some")?,
        full_us: total("full"),
    })
}

/// The kernel's `EOPNOTSUPP` (`ENOTSUP` on Linux).
const EOPNOTSUPP: i32 = 95;

fn read_one(dir: &Path, name: &str) -> Result<Stall, Unavailable> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text).ok_or_else(|| {
            Unavailable::Unreadable(format!(
                "{}: not pressure stall figures: {:?}",
                path.display(),
                text.chars().take(80).collect::<String>()
            ))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(Unavailable::Off(format!("no {name}")))
        }
        Err(e) if e.raw_os_error() == Some(EOPNOTSUPP) => {
            Err(Unavailable::Off(format!("{name} refuses to be read")))
        }
        Err(e) => Err(Unavailable::Unreadable(format!("{}: {e}", path.display()))),
    }
}

impl Cgroup {
    /// The cgroup's stall counters: three small files read, on v2 only.
    pub fn pressure(&self) -> Result<PressureTotals, Unavailable> {
        if self.version == Version::V1 {
            return Err(Unavailable::CgroupV1);
        }
        let dir = &self.memory_dir;
        Ok(PressureTotals {
            cpu: read_one(dir, "cpu.pressure")?,
            memory: read_one(dir, "memory.pressure")?,
            io: read_one(dir, "io.pressure")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;

    const CPU: &str = "some avg10=12.50 avg60=3.00 avg300=0.70 total=7000000\n\
                       full avg10=0.00 avg60=0.00 avg300=0.00 total=250000\n";

    #[test]
    fn the_totals_are_read_not_the_averages() {
        let s = parse(CPU).unwrap();
        assert_eq!(s.some_us, 7_000_000);
        assert_eq!(s.full_us, Some(250_000));
        // CPU before 5.13: no full line.
        let old = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n").unwrap();
        assert_eq!(old.full_us, None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("some avg10=1.00\n"), None);
        assert_eq!(parse("full avg10=0 total=5\n"), None, "no some line");
        assert_eq!(parse("some total=-3\n"), None);
    }

    #[test]
    fn a_v2_cgroup_reads_its_three_files_and_says_why_when_it_cannot() {
        let t = TempTree::new("psi");
        t.write("step/memory.current", "1\n")
            .write("step/cpu.pressure", CPU)
            .write(
                "step/memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            )
            .write(
                "step/io.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=3000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\n",
            );
        let cg = Cgroup {
            version: Version::V2,
            memory_dir: t.path().join("step"),
            cpu_dir: Some(t.path().join("step")),
        };
        let p = cg.pressure().unwrap();
        assert_eq!(p.cpu.some_us, 7_000_000);
        assert_eq!(
            p.memory,
            Stall {
                some_us: 0,
                full_us: Some(0)
            }
        );
        assert_eq!(p.io.full_us, Some(2_000_000));
        assert_eq!(p.by_resource()[2], p.io);

        // psi=0: the files are not made.
        std::fs::remove_file(t.path().join("step/io.pressure")).unwrap();
        let off = cg.pressure().unwrap_err();
        assert!(matches!(off, Unavailable::Off(_)), "{off:?}");
        assert!(off.to_string().contains("psi=1"), "{off}");
        assert!(!off.is_passing());
        // Not what the kernel writes: said, and tried again at the next reading.
        t.write("step/io.pressure", "garbage\n");
        let bad = cg.pressure().unwrap_err();
        assert!(bad.is_passing(), "{bad:?}");
        assert!(bad.to_string().contains("io.pressure"), "{bad}");

        let v1 = Cgroup {
            version: Version::V1,
            ..cg
        };
        assert_eq!(v1.pressure(), Err(Unavailable::CgroupV1));
        assert!(Unavailable::CgroupV1.to_string().contains("v1"));
    }
}
