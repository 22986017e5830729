//! What both samplers compute the same way, whatever they sample (a command's process tree for
//! `gpu-tracker -e` and the library, a step's cgroup and tasks for the plugin): the resident
//! memory of a set of processes and its peaks, and what one sample hands the history recorder.

use super::gpus::GpuAccumulator;
use crate::history::{Observation, Recorder};
use crate::units::Units;
use crate::usage::RssValues;

/// Resident memory of a set of processes: private pages summed, shared pages counted once (the
/// largest share of one process: processes share mostly the same files and libraries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemSum {
    /// Private resident bytes, summed.
    pub private: u64,
    /// The largest shared resident bytes of one process.
    pub shared: u64,
}

impl MemSum {
    /// Adds a process (or a set summed already) of `private` and `shared` bytes.
    pub fn add(&mut self, private: u64, shared: u64) {
        self.private += private;
        self.shared = self.shared.max(shared);
    }

    /// Private and shared together, bytes.
    pub fn total(&self) -> u64 {
        self.private + self.shared
    }
}

/// Peak resident memory over samples: the largest total, private and shared parts seen (each
/// its own maximum, at whatever sample).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RssPeak {
    /// Largest total, bytes, raised to the kernel's high-water marks where known.
    pub total: u64,
    /// Largest private part, bytes.
    pub private: u64,
    /// Largest shared part, bytes.
    pub shared: u64,
}

impl RssPeak {
    /// Adds a sample of `m`; `floor`: a peak the kernel vouches for (`VmHWM`), 0 if none.
    pub fn update(&mut self, m: MemSum, floor: u64) {
        self.private = self.private.max(m.private);
        self.shared = self.shared.max(m.shared);
        self.total = self.total.max(m.total().max(floor));
    }

    /// The peaks in `units`.
    pub fn values(&self, units: &Units) -> RssValues {
        RssValues {
            total_rss: units.ram.from_bytes(self.total),
            private_rss: units.ram.from_bytes(self.private),
            shared_rss: units.ram.from_bytes(self.shared),
        }
    }
}

/// Hands each sample to a history [`Recorder`]: names the GPUs once they are known, records
/// those lost at this sample, then the readings.
#[derive(Debug, Clone, Copy, Default)]
pub struct HistoryFeed {
    gpus_named: bool,
}

impl HistoryFeed {
    /// Adds the sample `o` (its GPU readings are taken from `gpu`'s latest) to `rec`. The GPUs
    /// are named by `ids` where given (Slurm's index of each), else by NVML's index.
    pub fn observe(
        &mut self,
        rec: &mut Recorder,
        gpu: &GpuAccumulator,
        ids: Option<Vec<u32>>,
        o: Observation,
    ) {
        let (uuids, nvml_ids) = gpu.devices_seen();
        if !self.gpus_named && !uuids.is_empty() {
            rec.set_gpus(uuids, ids.unwrap_or(nvml_ids));
            self.gpus_named = true;
        }
        for &i in gpu.lost_at_last_sample() {
            rec.gpu_lost(o.unix, i);
        }
        rec.observe(&Observation {
            gpus: gpu.last_readings().to_vec(),
            ..o
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_pages_add_up_and_shared_ones_count_once() {
        let mut m = MemSum::default();
        m.add(100, 40);
        m.add(50, 60);
        m.add(0, 10);
        assert_eq!((m.private, m.shared, m.total()), (150, 60, 210));
    }
}
