//! From per-process readings to the figures of a set of processes, for both samplers: the
//! command's tree of `gpu-tracker -e` (the main process, its descendants) and the step's tasks.
//! Each sampler lists and reads its processes its own way (the step a bounded number per sample,
//! see `step::procs`); what a reading counts for is decided here only.

use super::core::MemSum;
use crate::proc::watch::Reading;

/// One process's reading, in bytes and seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcReading {
    /// Private resident bytes.
    pub private: u64,
    /// Shared resident bytes.
    pub shared: u64,
    /// Its peak resident memory (`VmHWM`), bytes.
    pub hwm: u64,
    /// Its threads.
    pub threads: u64,
    /// Its own CPU seconds (user and system).
    pub own_cpu: f64,
    /// CPU seconds of the children it reaped (and theirs).
    pub reaped_cpu: f64,
}

impl ProcReading {
    /// The figures of `r`, its CPU ticks counted at `ticks_per_second`.
    pub fn of(r: &Reading, ticks_per_second: f64) -> ProcReading {
        ProcReading {
            private: r.split.private,
            shared: r.split.shared,
            hwm: r.hwm,
            threads: r.stat.threads,
            own_cpu: r.stat.own_ticks() as f64 / ticks_per_second,
            reaped_cpu: r.stat.reaped_ticks() as f64 / ticks_per_second,
        }
    }

    /// Its CPU seconds with its reaped children's: what it adds to a set's CPU time.
    pub fn cpu(&self) -> f64 {
        self.own_cpu + self.reaped_cpu
    }

    /// Its resident bytes.
    pub fn resident(&self) -> u64 {
        self.private + self.shared
    }
}

/// The figures of a set of processes at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcSum {
    /// Resident memory: private summed, shared once.
    pub mem: MemSum,
    /// Resident bytes summed over processes, shared pages in each (`gpu_tracker`'s rows).
    pub resident_sum: u64,
    /// The largest peak resident memory (`VmHWM`) of one process, bytes.
    pub hwm: u64,
    /// CPU seconds, with reaped children's.
    pub cpu: f64,
    /// Threads of the processes read.
    pub threads: u64,
    /// Processes listed, read or not.
    pub processes: u64,
    /// Processes with a reading: the memory, CPU and thread figures are theirs. Fewer than
    /// `processes` while a large set is read in turns; with none, its threads are unknown, not 0.
    pub read: u64,
}

impl ProcSum {
    /// Adds a process listed, with its reading if it has one.
    pub fn add(&mut self, r: Option<&ProcReading>) {
        self.processes += 1;
        let Some(r) = r else { return };
        self.read += 1;
        self.mem.add(r.private, r.shared);
        self.resident_sum += r.resident();
        self.hwm = self.hwm.max(r.hwm);
        self.cpu += r.cpu();
        self.threads += r.threads;
    }

    /// Adds the set `o` (disjoint from this one).
    pub fn merge(&mut self, o: &ProcSum) {
        self.mem.add(o.mem.private, o.mem.shared);
        self.resident_sum += o.resident_sum;
        self.hwm = self.hwm.max(o.hwm);
        self.cpu += o.cpu;
        self.threads += o.threads;
        self.processes += o.processes;
        self.read += o.read;
    }
}

/// Sums processes into `groups` sets: each item is the group a process counts in and its
/// reading, if it has one. Both samplers' listings come here: the command's tree (main process,
/// descendants) and the step's processes by task.
pub fn sum_groups<'a>(
    groups: usize,
    procs: impl IntoIterator<Item = (usize, Option<&'a ProcReading>)>,
) -> Vec<ProcSum> {
    let mut sums = vec![ProcSum::default(); groups];
    for (g, r) in procs {
        sums[g].add(r);
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(private: u64, shared: u64, threads: u64, cpu: f64) -> ProcReading {
        ProcReading {
            private,
            shared,
            hwm: private + shared + 1,
            threads,
            own_cpu: cpu,
            reaped_cpu: 0.5,
        }
    }

    #[test]
    fn a_set_sums_its_readings_and_counts_its_unread_processes() {
        let (a, b) = (reading(100, 40, 2, 1.0), reading(50, 60, 1, 2.0));
        let s = sum_groups(2, [(0, Some(&a)), (1, Some(&b)), (1, None), (0, None)]);
        assert_eq!((s[0].mem.total(), s[0].threads, s[0].cpu), (140, 2, 1.5));
        assert_eq!((s[0].processes, s[0].read, s[0].hwm), (2, 1, 141));
        assert_eq!((s[1].mem.private, s[1].mem.shared), (50, 60));
        let mut both = s[0];
        both.add(Some(&b));
        assert_eq!((both.mem.total(), both.resident_sum), (210, 250));
        let mut all = s[0];
        all.merge(&s[1]);
        assert_eq!((all.mem.private, all.mem.shared), (150, 60), "shared once");
        assert_eq!((all.cpu, all.threads), (4.0, 3));
        assert_eq!((all.processes, all.read, all.hwm), (4, 2, 141));
    }
}
