//! Which MIG instance a gres.conf GPU is. Slurm names a MIG instance by three device files
//! (`MultipleFiles=/dev/nvidia<P>,/dev/nvidia-caps/nvidia-cap<A>,/dev/nvidia-caps/nvidia-cap<B>`,
//! as AutoDetect=nvml writes them): the parent GPU's, and the capability files of its GPU
//! instance and compute instance. The NVIDIA driver lists which capability minor stands for
//! what in `/proc/driver/nvidia-caps/mig-minors`, lines such as `gpu0/gi1/access 12` and
//! `gpu0/gi1/ci0/access 13` (`gpu<P>` is the parent's minor number). slurmd reads the same
//! table to write those files; here it is read back to find the instance.

use std::collections::HashMap;
use std::path::Path;

/// Where the NVIDIA driver lists its capability minors.
pub const DEFAULT_MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

/// The most of the table read: a GPU has some 100 lines of some 25 bytes each.
const MAX_BYTES: u64 = 1 << 20;

/// What a capability minor stands for: the parent GPU's minor, the GPU instance and, for a
/// compute instance's file, the compute instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// The parent GPU's minor number.
    pub gpu_minor: u32,
    /// GPU instance id.
    pub gpu_instance: u32,
    /// Compute instance id; `None` for the GPU instance's own file.
    pub compute_instance: Option<u32>,
}

/// The driver's table: capability minor → what it stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors(HashMap<u32, Capability>);

impl MigMinors {
    /// Parses the table. Lines that are not a GPU or compute instance's (`config 1`,
    /// `monitor 2`, anything unknown) are skipped.
    pub fn parse(text: &str) -> MigMinors {
        let mut out = HashMap::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(minor), None) = (words.next(), words.next(), words.next()) else {
                continue;
            };
            let (Some(cap), Ok(minor)) = (parse_name(name), minor.parse::<u32>()) else {
                continue;
            };
            out.insert(minor, cap);
        }
        MigMinors(out)
    }

    /// Reads the table at `path`; `Ok(None)` when there is none (no NVIDIA driver, or one
    /// without MIG). Only a regular file is read (procfs files are), at most [`MAX_BYTES`]: a
    /// FIFO or device in its place is an error at once, never waited on in slurmstepd
    /// ([`crate::sys::read_small_file`]).
    pub fn read(path: &Path) -> Result<Option<MigMinors>, std::io::Error> {
        match crate::sys::read_small_file(path, MAX_BYTES, "the driver's mig-minors table") {
            Ok(text) => Ok(Some(MigMinors::parse(&text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What capability minor `minor` stands for.
    pub fn get(&self, minor: u32) -> Option<Capability> {
        self.0.get(&minor).copied()
    }

    /// The MIG instance that the capability files `caps` (their minors) of one gres.conf GPU
    /// give access to: the compute instance's file when there is one, else the GPU instance's.
    /// `None` when no file is a MIG capability, or the files name more than one instance.
    pub fn instance(&self, caps: &[u32]) -> Option<Capability> {
        let found: Vec<Capability> = caps.iter().filter_map(|m| self.get(*m)).collect();
        let best = found
            .iter()
            .find(|c| c.compute_instance.is_some())
            .or(found.first())
            .copied()?;
        let same = |c: &Capability| {
            c.gpu_minor == best.gpu_minor
                && c.gpu_instance == best.gpu_instance
                && (c.compute_instance.is_none() || c.compute_instance == best.compute_instance)
        };
        found.iter().all(same).then_some(best)
    }
}

/// `gpu<P>/gi<G>/access` or `gpu<P>/gi<G>/ci<C>/access`.
fn parse_name(name: &str) -> Option<Capability> {
    let parts: Vec<&str> = name.split('/').collect();
    let num = |s: &str, prefix: &str| s.strip_prefix(prefix)?.parse::<u32>().ok();
    match parts.as_slice() {
        [gpu, gi, "access"] => Some(Capability {
            gpu_minor: num(gpu, "gpu")?,
            gpu_instance: num(gi, "gi")?,
            compute_instance: None,
        }),
        [gpu, gi, ci, "access"] => Some(Capability {
            gpu_minor: num(gpu, "gpu")?,
            gpu_instance: num(gi, "gi")?,
            compute_instance: Some(num(ci, "ci")?),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of the table an H100 (minor 0) with driver 580 gave, MIG off.
    const H100: &str = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n\
        gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi1/ci1/access 14\n\
        gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\nfabric-mgmt 0\n";

    #[test]
    fn the_drivers_table_names_gpu_and_compute_instances() {
        let t = MigMinors::parse(H100);
        assert_eq!(t.get(1), None);
        assert_eq!(
            t.get(12),
            Some(Capability {
                gpu_minor: 0,
                gpu_instance: 1,
                compute_instance: None
            })
        );
        assert_eq!(t.get(22).and_then(|c| c.compute_instance), Some(0));
        assert_eq!(
            t.get(14).map(|c| (c.gpu_instance, c.compute_instance)),
            Some((1, Some(1)))
        );
    }

    #[test]
    fn a_gres_gpus_capability_files_give_its_instance() {
        let t = MigMinors::parse(H100);
        // AutoDetect=nvml's files: the GPU instance's and the compute instance's.
        let c = t.instance(&[21, 22]).unwrap();
        assert_eq!(
            (c.gpu_minor, c.gpu_instance, c.compute_instance),
            (0, 2, Some(0))
        );
        // A GPU instance's file alone (hand-written gres.conf).
        assert_eq!(t.instance(&[12]).unwrap().compute_instance, None);
        // Files of two instances, or none of MIG: not one instance.
        assert_eq!(t.instance(&[13, 22]), None);
        assert_eq!(t.instance(&[7]), None);
        assert_eq!(t.instance(&[]), None);
    }

    #[test]
    fn the_table_is_read_bounded_and_never_from_a_fifo() {
        use crate::cgroup::fixture::{TempTree, within};
        use std::time::Duration;
        let t = TempTree::new("mig-read");
        t.write("mig-minors", H100);
        let read = |p: std::path::PathBuf| {
            within(Duration::from_secs(2), move || {
                MigMinors::read(&p).map_err(|e| e.to_string())
            })
            .expect("MigMinors::read did not return within 2 s")
        };
        assert_eq!(
            read(t.path().join("mig-minors")).unwrap(),
            Some(MigMinors::parse(H100))
        );
        assert_eq!(read(t.path().join("missing")).unwrap(), None);
        // A FIFO (no writer) in its place: an error at once, not a wait for ever.
        let e = read(t.fifo("fifo")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let huge = t.path().join("huge");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(MAX_BYTES + 1)
            .unwrap();
        let e = read(huge).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        // The driver's own file, where there is one: a regular procfs file of size 0.
        let real = Path::new(DEFAULT_MIG_MINORS);
        if real.exists() {
            assert!(read(real.to_path_buf()).unwrap().is_some());
        }
    }

    #[test]
    fn lines_that_are_no_capability_are_skipped() {
        let t =
            MigMinors::parse("gpu0/gi1/access x\ngpu/gi1/access 5\ngpu0/gi1/ci0/access 6 7\n\n");
        assert_eq!(t, MigMinors::default());
    }
}
