//! The GPUs of a node with more than one vendor: each source's devices one after the other, so
//! that each GPU is read by its own vendor's source.

use super::{GpuInfo, GpuReading, GpuSource};

/// Sources side by side: device `i` of the whole is device `i - offset` of the source it falls
/// in.
pub struct Combined {
    sources: Vec<Box<dyn GpuSource>>,
    devices: Vec<GpuInfo>,
    /// For each device of the whole: its source and its index there.
    at: Vec<(usize, usize)>,
    /// Each source's first device in the whole.
    offsets: Vec<usize>,
}

impl Combined {
    /// The sources' devices, in the sources' order.
    pub fn new(sources: Vec<Box<dyn GpuSource>>) -> Combined {
        let mut devices = Vec::new();
        let mut at = Vec::new();
        let mut offsets = Vec::new();
        for (s, src) in sources.iter().enumerate() {
            offsets.push(devices.len());
            for (i, d) in src.devices().iter().enumerate() {
                devices.push(d.clone());
                at.push((s, i));
            }
        }
        Combined {
            sources,
            devices,
            at,
            offsets,
        }
    }
}

impl GpuSource for Combined {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn read(&mut self, i: usize) -> Option<GpuReading> {
        let (s, j) = *self.at.get(i)?;
        self.sources[s].read(j)
    }

    fn track_processes(&mut self, main: u32, members: &std::collections::HashSet<u32>) {
        for s in &mut self.sources {
            s.track_processes(main, members);
        }
    }

    fn descriptors_marked_cloexec(&self) -> usize {
        self.sources
            .iter()
            .map(|s| s.descriptors_marked_cloexec())
            .sum()
    }

    fn take_problems(&mut self) -> Vec<String> {
        self.sources
            .iter_mut()
            .flat_map(|s| s.take_problems())
            .collect()
    }

    fn take_xids(&mut self) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        for (s, src) in self.sources.iter_mut().enumerate() {
            let off = self.offsets[s];
            out.extend(src.take_xids().into_iter().map(|(i, x)| (i + off, x)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Vendor;

    struct One {
        devices: Vec<GpuInfo>,
        used: u64,
        xid_on: usize,
    }

    impl GpuSource for One {
        fn devices(&self) -> &[GpuInfo] {
            &self.devices
        }
        fn read(&mut self, i: usize) -> Option<GpuReading> {
            (i < self.devices.len()).then(|| GpuReading {
                used: Some(self.used + i as u64),
                ..GpuReading::default()
            })
        }
        fn take_xids(&mut self) -> Vec<(usize, u64)> {
            vec![(self.xid_on, 79)]
        }
    }

    #[test]
    fn each_device_is_read_by_its_own_source_and_xids_name_the_whole_index() {
        let nv = One {
            devices: vec![GpuInfo::for_test(0, Some(0)), GpuInfo::for_test(1, Some(1))],
            used: 100,
            xid_on: 1,
        };
        let mut amd_gpu = GpuInfo::for_test(0, Some(128));
        amd_gpu.vendor = Vendor::Amd;
        let amd = One {
            devices: vec![amd_gpu],
            used: 500,
            xid_on: 0,
        };
        let mut c = Combined::new(vec![Box::new(nv), Box::new(amd)]);
        assert_eq!(c.devices().len(), 3);
        assert_eq!(c.devices()[2].vendor, Vendor::Amd);
        assert_eq!(c.read(1).and_then(|r| r.used), Some(101));
        assert_eq!(c.read(2).and_then(|r| r.used), Some(500));
        assert!(c.read(3).is_none());
        assert_eq!(c.take_xids(), vec![(1, 79), (2, 79)]);
    }
}
