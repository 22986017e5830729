//! The peak of the memory a cgroup held that the kernel could not reclaim, over its readings.
//!
//! The kernel keeps a high-water mark of what it charged (`memory.peak`,
//! `memory.max_usage_in_bytes`), page cache included, but none of the memory it could not take
//! back. That figure is read at each sample ([`CgroupReading::needed`]), so a spike between two
//! samples is missed. The charged peak bounds it from above; where reclaimable memory is known
//! around the moment the charged peak rose, the peak less that memory estimates the spike:
//! [`NeededPeak`] keeps the larger of the two, and says which it is.

use super::CgroupReading;

/// Where a needed peak comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeededSource {
    /// The kernel's charged peak: no reading saw memory the kernel could reclaim, so what it
    /// charged was all needed. Exact.
    CgroupPeak,
    /// The charged peak less the reclaimable memory read just before and just after it last
    /// rose: catches a spike of the job's own memory between two samples, and is above the
    /// truth when page cache came and went between them (never below the sampled figure).
    PeakLessReclaimable,
    /// The largest figure read at a sample: a spike between two samples is missed.
    Sampled,
}

impl NeededSource {
    /// The name the record keeps (`slurm/RECORD.md`).
    pub fn as_str(self) -> &'static str {
        match self {
            NeededSource::CgroupPeak => "cgroup_peak",
            NeededSource::PeakLessReclaimable => "cgroup_peak_less_reclaimable",
            NeededSource::Sampled => "sampled",
        }
    }
}

/// The needed peak of one cgroup while its readings come in ([`NeededPeak::observe`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeededPeak {
    /// Largest `current - reclaimable` read.
    sampled: Option<u64>,
    /// Largest estimate at a rise of the charged peak.
    at_rise: Option<u64>,
    /// The previous reading's charged peak and reclaimable memory.
    last_peak: Option<u64>,
    last_reclaimable: Option<u64>,
    /// Some reading saw reclaimable memory.
    saw_reclaimable: bool,
    /// The latest charged peak.
    peak: Option<u64>,
}

impl NeededPeak {
    /// Takes one reading of the cgroup (in time order).
    pub fn observe(&mut self, r: &CgroupReading) {
        let Some(rec) = r.reclaimable else {
            return;
        };
        self.saw_reclaimable |= rec > 0;
        if let Some(n) = r.needed() {
            self.sampled = Some(self.sampled.map_or(n, |s| s.max(n)));
        }
        if let Some(p) = r.peak {
            // The counter rose since the previous reading (or this is the first): the peak was
            // reached in between, with about as much reclaimable memory as either end shows.
            if self.last_peak.is_none_or(|l| p > l) {
                let around = self.last_reclaimable.map_or(rec, |l| l.max(rec));
                let e = p.saturating_sub(around);
                self.at_rise = Some(self.at_rise.map_or(e, |a| a.max(e)));
            }
            self.last_peak = Some(p);
            self.peak = Some(self.peak.map_or(p, |q| q.max(p)));
        }
        self.last_reclaimable = Some(rec);
    }

    /// The needed peak and its source; `None` when no reading had the counters.
    pub fn result(&self) -> Option<(u64, NeededSource)> {
        if let (Some(p), false) = (self.peak, self.saw_reclaimable) {
            return Some((p, NeededSource::CgroupPeak));
        }
        let sampled = self.sampled;
        match (sampled, self.at_rise) {
            (Some(s), Some(e)) if e > s => Some((
                e.min(self.peak.unwrap_or(e)),
                NeededSource::PeakLessReclaimable,
            )),
            (Some(s), _) => Some((s, NeededSource::Sampled)),
            (None, Some(e)) => Some((e, NeededSource::PeakLessReclaimable)),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn reading(current: u64, peak: u64, reclaimable: u64) -> CgroupReading {
        CgroupReading {
            current: Some(current),
            peak: Some(peak),
            reclaimable: Some(reclaimable),
            ..CgroupReading::default()
        }
    }

    #[test]
    fn a_file_reading_job_needed_its_own_few_mib() {
        // Writes 1.2 GB to a file and reads it back: the charge grows with the file's pages.
        let mut n = NeededPeak::default();
        for (cur, peak, rec) in [
            (4 * MIB, 4 * MIB, MIB),
            (600 * MIB, 600 * MIB, 595 * MIB),
            (1200 * MIB, 1200 * MIB, 1195 * MIB),
            (1205 * MIB, 1206 * MIB, 1200 * MIB),
            // The task ended: its anon memory is gone, the file's pages stay charged.
            (1200 * MIB, 1206 * MIB, 1200 * MIB),
        ] {
            n.observe(&reading(cur, peak, rec));
        }
        // The sampled figure is 5 MiB; the rise of the peak to 1206 MiB came with 1200 MiB
        // of page cache on either side: 6 MiB, a little above (the spike is not excluded).
        assert_eq!(
            n.result(),
            Some((6 * MIB, NeededSource::PeakLessReclaimable))
        );
    }

    #[test]
    fn nothing_reclaimable_seen_makes_the_charged_peak_exact() {
        let mut n = NeededPeak::default();
        n.observe(&reading(100 * MIB, 100 * MIB, 0));
        // A 3 GiB spike between samples: only the counter saw it.
        n.observe(&reading(100 * MIB, 3072 * MIB, 0));
        assert_eq!(n.result(), Some((3072 * MIB, NeededSource::CgroupPeak)));
    }

    #[test]
    fn a_spike_between_samples_is_caught_beside_steady_page_cache() {
        let mut n = NeededPeak::default();
        n.observe(&reading(150 * MIB, 150 * MIB, 50 * MIB));
        // 2 GiB allocated and freed between these two samples; 50 MiB of cache throughout.
        n.observe(&reading(150 * MIB, 2098 * MIB, 50 * MIB));
        assert_eq!(
            n.result(),
            Some((2048 * MIB, NeededSource::PeakLessReclaimable))
        );
        // The sampled figure wins when it is the larger.
        n.observe(&reading(3000 * MIB, 3000 * MIB, 2990 * MIB));
        n.observe(&reading(2500 * MIB, 3000 * MIB, 10 * MIB));
        assert_eq!(n.result(), Some((2490 * MIB, NeededSource::Sampled)));
    }

    #[test]
    fn shared_memory_is_needed() {
        // 300 MB in /dev/shm: charged, and on the anon lists, so not reclaimable.
        let mut n = NeededPeak::default();
        n.observe(&reading(303 * MIB, 303 * MIB, MIB));
        n.observe(&reading(303 * MIB, 304 * MIB, MIB));
        let (bytes, _) = n.result().unwrap();
        assert!((302 * MIB..=303 * MIB).contains(&bytes), "{bytes}");
    }

    #[test]
    fn without_the_counters_there_is_no_figure() {
        let mut n = NeededPeak::default();
        assert_eq!(n.result(), None);
        // No memory.stat file lists: not even the charged peak says what was needed.
        n.observe(&CgroupReading {
            current: Some(MIB),
            peak: Some(2 * MIB),
            ..CgroupReading::default()
        });
        assert_eq!(n.result(), None);
        // No peak counter (v2 before Linux 5.19): the samples alone.
        n.observe(&CgroupReading {
            current: Some(9 * MIB),
            reclaimable: Some(4 * MIB),
            ..CgroupReading::default()
        });
        assert_eq!(n.result(), Some((5 * MIB, NeededSource::Sampled)));
    }
}
