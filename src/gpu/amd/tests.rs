//! The AMD source on fixture trees: every reader, and every "no data" rule.

use std::path::{Path, PathBuf};

use super::energy::EnergyOrigin;
use super::*;
use crate::gpu::figures::{NOT_SAMPLED, NOT_SUPPORTED};

/// A fixture root, removed on drop.
pub(super) struct Fx(pub(super) PathBuf);

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `gpu_metrics` table of revision 1.`content` with `steps` in its energy accumulator.
pub(super) fn metrics_table(content: u8, steps: u64) -> Vec<u8> {
    let mut b = vec![0u8; 384];
    b[..2].copy_from_slice(&384u16.to_ne_bytes());
    b[2] = 1;
    b[3] = content;
    if let Some(at) = metrics::energy_offset(1, content, 384) {
        b[at..at + 8].copy_from_slice(&steps.to_ne_bytes());
    }
    b
}

impl Fx {
    pub(super) fn new(tag: &str) -> Fx {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "gpu-tracker-amd-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        let fx = Fx(p);
        // Node 0: the CPU.
        fx.write(
            "sys/class/kfd/kfd/topology/nodes/0/properties",
            "cpu_cores_count 64\nsimd_count 0\n",
        );
        fx.write("sys/class/kfd/kfd/topology/nodes/0/gpu_id", "0\n");
        fx.write("sys/class/kfd/kfd/proc/.keep", "");
        fx
    }

    pub(super) fn root(&self) -> &Path {
        &self.0
    }

    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    pub(super) fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub(super) fn dev(pci: &str) -> String {
        format!("sys/devices/pci0000:00/{pci}")
    }

    /// A MI300X at KFD node `node`, with gpu_id `gpu_id`, render node `minor`, PCI bus `bus`:
    /// idle, its energy counter at 1000 J.
    pub(super) fn gpu(&self, node: u32, gpu_id: u32, minor: u32, bus: u8) -> String {
        let pci = format!("0000:{bus:02x}:00.0");
        let n = format!("sys/class/kfd/kfd/topology/nodes/{node}");
        self.write(&format!("{n}/gpu_id"), format!("{gpu_id}\n"));
        self.write(&format!("{n}/name"), "gfx942\n");
        self.write(
            &format!("{n}/properties"),
            format!(
                "simd_count 1216\nsimd_per_cu 4\ndrm_render_minor {minor}\nlocation_id {}\n\
                 domain 0\nunique_id {}\n",
                u32::from(bus) << 8,
                0x1000 + u64::from(bus)
            ),
        );
        let d = Fx::dev(&pci);
        self.write(&format!("{d}/gpu_busy_percent"), "0\n");
        self.write(&format!("{d}/mem_busy_percent"), "0\n");
        self.write(&format!("{d}/mem_info_vram_used"), "296747008\n");
        self.write(&format!("{d}/mem_info_vram_total"), "206158430208\n");
        self.write(
            &format!("{d}/unique_id"),
            format!("{:016x}\n", 0xabc0 + u64::from(bus)),
        );
        self.write(&format!("{d}/product_name"), "AMD Instinct MI300X\n");
        self.write(&format!("{d}/current_compute_partition"), "SPX\n");
        self.write(&format!("{d}/gpu_metrics"), metrics_table(6, 1000 * 65536));
        self.write(&format!("{d}/hwmon/hwmon3/name"), "amdgpu\n");
        self.write(&format!("{d}/hwmon/hwmon3/power1_average"), "140000000\n");
        self.link(&format!("sys/class/drm/renderD{minor}/device"), &pci);
        pci
    }

    /// `rel` (a render node's `device`) as a relative link to the PCI device `pci`.
    pub(super) fn link(&self, rel: &str, pci: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(format!("../../../devices/pci0000:00/{pci}"), p).unwrap();
    }

    /// Process `pid` with `vram` bytes on `gpu_id`, and `cu` CUs where given.
    pub(super) fn proc(&self, pid: u32, gpu_id: u32, vram: u64, cu: Option<u32>) {
        let p = format!("sys/class/kfd/kfd/proc/{pid}");
        self.write(&format!("{p}/vram_{gpu_id}"), format!("{vram}\n"));
        self.write(&format!("{p}/stats_{gpu_id}/evicted_ms"), "0\n");
        if let Some(c) = cu {
            self.write(
                &format!("{p}/stats_{gpu_id}/cu_occupancy"),
                format!("{c}\n"),
            );
        }
    }
}

pub(super) fn missing<'a>(r: &'a GpuReading, fig: &str) -> Option<&'a NoData> {
    r.missing.iter().find(|m| m.figure == fig).map(|m| &m.why)
}

#[test]
fn gpu_nodes_are_listed_with_their_identity() {
    let fx = Fx::new("identity");
    fx.gpu(1, 53241, 128, 0x11);
    fx.gpu(2, 21457, 129, 0x21);
    let s = AmdSource::open(fx.root()).unwrap();
    let d = s.devices();
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[0],
        GpuInfo {
            vendor: Vendor::Amd,
            index: 0,
            minor: Some(128),
            pci_bus_id: Some("0000:11:00.0".into()),
            compute_units: Some(304),
            uuid: "GPU-000000000000abd1".into(),
            name: "AMD Instinct MI300X".into(),
            memory_total: 206158430208,
            mig: None,
        }
    );
    assert_eq!(
        (d[1].index, d[1].minor, d[1].pci_bus_id.as_deref()),
        (1, Some(129), Some("0000:21:00.0"))
    );
    assert_eq!(
        s.energy_origin(0),
        Some(&EnergyOrigin::Accumulator {
            revision: "1.6".into()
        })
    );
}

#[test]
fn without_kfd_or_without_a_gpu_node_opening_says_why() {
    let empty = Fx::new("nokfd");
    std::fs::remove_dir_all(empty.path("sys")).unwrap();
    let e = AmdSource::open(empty.root()).err().unwrap();
    assert!(matches!(e, AmdError::NoKfd { .. }), "{e}");
    assert!(
        e.to_string().contains("topology/nodes cannot be listed"),
        "{e}"
    );
    let cpu_only = Fx::new("cpuonly");
    let e = AmdSource::open(cpu_only.root()).err().unwrap();
    assert!(matches!(e, AmdError::NoGpu { .. }), "{e}");
    // A GPU node that cannot be read is named.
    cpu_only.write("sys/class/kfd/kfd/topology/nodes/1/gpu_id", "garbage\n");
    let e = AmdSource::open(cpu_only.root()).err().unwrap();
    assert!(e.to_string().contains("1 node(s) unreadable"), "{e}");
}

#[test]
fn an_idle_gpu_reads_zero_busy_no_process_and_its_counters() {
    let fx = Fx::new("idle");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    let mut s = AmdSource::open(fx.root()).unwrap();
    let r = s.read(0).unwrap();
    assert_eq!(r.utilization, Some(0));
    assert_eq!(r.used, Some(296747008));
    assert_eq!(r.power_mw, Some(140_000));
    assert_eq!(r.energy_mj, Some(1_000_000));
    assert!(r.processes.is_empty());
    assert_eq!(r.process_cu_occupancy, Some(vec![]));
    for f in [
        figure::PROCESS_UTILIZATION,
        figure::SM_ACTIVITY,
        figure::THROTTLE,
        figure::ECC,
        figure::XID,
    ] {
        assert_eq!(
            missing(&r, f).map(|w| w.kind.as_str()),
            Some(NOT_SUPPORTED),
            "{f}"
        );
    }
    assert_eq!(r.missing.len(), 5, "{:?}", r.missing);
    // The counter moves on as the GPU counts.
    fx.write(
        &format!("{}/gpu_metrics", Fx::dev(&pci)),
        metrics_table(6, 1500 * 65536),
    );
    assert_eq!(s.read(0).unwrap().energy_mj, Some(1_500_000));
    assert!(s.take_problems().is_empty());
}

#[test]
fn a_process_counts_on_the_gpus_it_uses_with_its_vram_and_cus() {
    let fx = Fx::new("procs");
    fx.gpu(1, 53241, 128, 0x11);
    fx.gpu(2, 21457, 129, 0x21);
    // 4242 holds 1 GiB on the first GPU and has the second open, unused.
    fx.proc(4242, 53241, 1 << 30, Some(182));
    fx.proc(4242, 21457, 0, Some(0));
    // 4343 has allocated but runs nothing.
    fx.proc(4343, 53241, 4096, Some(0));
    // A name that is not a pid (a simulator's half-made entry) is not a process.
    fx.write("sys/class/kfd/kfd/proc/.4444.new/vram_53241", "1\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    let a = s.read(0).unwrap();
    assert_eq!(a.processes, vec![(4242, Some(1 << 30)), (4343, Some(4096))]);
    assert_eq!(a.process_cu_occupancy, Some(vec![(4242, 182), (4343, 0)]));
    let b = s.read(1).unwrap();
    assert!(b.processes.is_empty(), "{:?}", b.processes);
    assert_eq!(b.process_cu_occupancy, Some(vec![]));
}

#[test]
fn one_listing_serves_every_gpu_of_a_sample() {
    let fx = Fx::new("listing");
    fx.gpu(1, 53241, 128, 0x11);
    fx.gpu(2, 21457, 129, 0x21);
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert!(s.read(0).unwrap().processes.is_empty());
    // A process that appears after the sample's listing is not seen by the rest of it...
    fx.proc(77, 21457, 100, Some(1));
    assert!(s.read(1).unwrap().processes.is_empty());
    // ...and is at the next sample, which reading a device again begins.
    assert_eq!(s.read(0).unwrap().processes, vec![]);
    assert_eq!(s.read(1).unwrap().processes, vec![(77, Some(100))]);
}

#[test]
fn a_kernel_without_cu_occupancy_says_so() {
    let fx = Fx::new("nocu");
    fx.gpu(1, 53241, 128, 0x11);
    fx.proc(4242, 53241, 1 << 30, None);
    let mut s = AmdSource::open(fx.root()).unwrap();
    let r = s.read(0).unwrap();
    assert_eq!(r.processes, vec![(4242, Some(1 << 30))]);
    assert_eq!(r.process_cu_occupancy, None);
    let why = missing(&r, figure::CU_OCCUPANCY).unwrap();
    assert_eq!(why.kind, NOT_SUPPORTED);
    assert!(why.why.contains("no cu_occupancy"), "{why:?}");
}

#[test]
fn without_a_known_energy_counter_power_is_integrated_and_said_so() {
    let fx = Fx::new("integrate");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    // An MI200's table: revision 1.3, whose counter has no documented unit.
    fx.write(
        &format!("{}/gpu_metrics", Fx::dev(&pci)),
        metrics_table(3, 1 << 40),
    );
    let mut s = AmdSource::open(fx.root()).unwrap();
    let origin = s.energy_origin(0).unwrap().clone();
    assert!(origin.is_estimate(), "{origin:?}");
    assert!(
        matches!(&origin, EnergyOrigin::IntegratedPower { file: "power1_average", why }
            if why.contains("revision 1.3")),
        "{origin:?}"
    );
    let notes = s.take_problems();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("power1_average integrated")),
        "{notes:?}"
    );
    let t0 = std::time::Instant::now();
    assert_eq!(s.read(0).unwrap().energy_mj, Some(0));
    std::thread::sleep(Duration::from_millis(100));
    let e = s.read(0).unwrap().energy_mj.unwrap();
    // 140 W for the time between the two reads.
    let most = 140.0 * t0.elapsed().as_secs_f64() * 1000.0;
    assert!(
        e >= 14_000 && (e as f64) <= most + 1.0,
        "{e} mJ, at most {most}"
    );
}

#[test]
fn power_input_stands_in_for_a_missing_average() {
    let fx = Fx::new("input");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    let d = Fx::dev(&pci);
    std::fs::remove_file(fx.path(&format!("{d}/gpu_metrics"))).unwrap();
    std::fs::remove_file(fx.path(&format!("{d}/hwmon/hwmon3/power1_average"))).unwrap();
    fx.write(&format!("{d}/hwmon/hwmon3/power1_input"), "90000000\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert!(matches!(
        s.energy_origin(0),
        Some(EnergyOrigin::IntegratedPower { file: "power1_input", why })
            if why.contains("no gpu_metrics")
    ));
    let r = s.read(0).unwrap();
    assert_eq!((r.power_mw, r.energy_mj), (Some(90_000), Some(0)));
}

#[test]
fn without_counter_or_power_there_is_no_energy_with_why() {
    let fx = Fx::new("noenergy");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    let d = Fx::dev(&pci);
    fx.write(&format!("{d}/gpu_metrics"), [1u8, 0]);
    // A hwmon of another driver is not the GPU's.
    fx.write(&format!("{d}/hwmon/hwmon3/name"), "nvme\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert!(matches!(
        s.energy_origin(0),
        Some(EnergyOrigin::None { .. })
    ));
    let r = s.read(0).unwrap();
    assert_eq!((r.energy_mj, r.power_mw), (None, None));
    let why = missing(&r, figure::ENERGY).unwrap();
    assert_eq!(why.kind, NOT_SUPPORTED);
    assert!(why.why.contains("shorter than its header"), "{why:?}");
}

#[test]
fn device_files_missing_unreadable_or_garbage_give_no_data_with_why() {
    let fx = Fx::new("devfiles");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    let d = Fx::dev(&pci);
    std::fs::remove_file(fx.path(&format!("{d}/mem_info_vram_used"))).unwrap();
    fx.write(&format!("{d}/gpu_busy_percent"), "busy\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    for _ in 0..2 {
        let r = s.read(0).unwrap();
        assert_eq!((r.used, r.utilization), (None, None));
        assert_eq!(missing(&r, figure::MEMORY).unwrap().kind, NOT_SUPPORTED);
        let u = missing(&r, figure::UTILIZATION).unwrap();
        assert_eq!(u.kind, NOT_SAMPLED);
        assert!(u.why.contains("not a number"), "{u:?}");
    }
    // Noted once each, not at every sample.
    let notes = s.take_problems();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(s.take_problems().is_empty());
    // A directory where a number should be cannot be read.
    std::fs::remove_file(fx.path(&format!("{d}/gpu_busy_percent"))).unwrap();
    std::fs::create_dir(fx.path(&format!("{d}/gpu_busy_percent"))).unwrap();
    let r = s.read(0).unwrap();
    assert_eq!(missing(&r, figure::UTILIZATION).unwrap().kind, NOT_SAMPLED);
}

#[test]
fn a_garbled_kfd_file_leaves_its_process_out_with_a_note() {
    let fx = Fx::new("kfdgarbage");
    fx.gpu(1, 53241, 128, 0x11);
    fx.proc(10, 53241, 1 << 20, Some(3));
    fx.write("sys/class/kfd/kfd/proc/11/vram_53241", "lots\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    let r = s.read(0).unwrap();
    assert_eq!(r.processes, vec![(10, Some(1 << 20))]);
    let notes = s.take_problems();
    assert!(notes.iter().any(|n| n.contains("vram_53241")), "{notes:?}");
}

#[test]
fn without_kfd_process_files_process_figures_are_not_supported() {
    let fx = Fx::new("noproc");
    fx.gpu(1, 53241, 128, 0x11);
    std::fs::remove_dir_all(fx.path("sys/class/kfd/kfd/proc")).unwrap();
    let mut s = AmdSource::open(fx.root()).unwrap();
    let r = s.read(0).unwrap();
    assert_eq!(r.utilization, Some(0));
    for f in [figure::PROCESS_MEMORY, figure::CU_OCCUPANCY] {
        assert_eq!(missing(&r, f).unwrap().kind, NOT_SUPPORTED, "{f}");
    }
    assert_eq!(r.process_cu_occupancy, None);
}

#[test]
fn a_gpu_whose_device_went_away_is_lost() {
    let fx = Fx::new("lost");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert!(s.read(0).is_some());
    std::fs::remove_dir_all(fx.path(&Fx::dev(&pci))).unwrap();
    assert!(s.read(0).is_none());
    // Even if a directory of that name comes back (another device), it stays lost.
    fx.write(&format!("{}/gpu_busy_percent", Fx::dev(&pci)), "5\n");
    assert!(s.read(0).is_none());
    let notes = s.take_problems();
    assert!(
        notes.iter().any(|n| n.contains("device directory is gone")),
        "{notes:?}"
    );
}

#[test]
fn the_render_node_and_kfd_are_cross_checked_and_fallbacks_named() {
    let fx = Fx::new("cross");
    fx.gpu(1, 53241, 128, 0x11);
    let other = fx.gpu(2, 21457, 129, 0x21);
    // The first GPU's render node leads to the second's device.
    fx.link("sys/class/drm/renderD128/device", &other);
    let d = Fx::dev(&other);
    std::fs::remove_file(fx.path(&format!("{d}/unique_id"))).unwrap();
    fx.write(&format!("{d}/product_name"), "\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    let notes = s.take_problems();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("0000:11:00.0 but its render node leads to 0000:21:00.0")),
        "{notes:?}"
    );
    let g = &s.devices()[0];
    assert_eq!(g.pci_bus_id.as_deref(), Some("0000:21:00.0"));
    // No unique_id file: the KFD topology's.
    assert_eq!(g.uuid, "GPU-0000000000001011");
    assert_eq!(g.name, "AMD GPU (gfx942)");
    // Neither: the PCI address.
    fx.write(
        "sys/class/kfd/kfd/topology/nodes/2/properties",
        "simd_count 8\nsimd_per_cu 4\ndrm_render_minor 129\nlocation_id 8448\n",
    );
    let s = AmdSource::open(fx.root()).unwrap();
    assert_eq!(s.devices()[1].uuid, "0000:21:00.0");
    assert_eq!(s.devices()[1].compute_units, Some(2));
}

#[test]
fn a_gpu_without_its_render_node_still_has_its_processes() {
    let fx = Fx::new("norender");
    fx.gpu(1, 53241, 128, 0x11);
    std::fs::remove_dir_all(fx.path("sys/class/drm")).unwrap();
    fx.proc(5, 53241, 1 << 30, Some(10));
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert_eq!(s.devices()[0].pci_bus_id.as_deref(), Some("0000:11:00.0"));
    assert_eq!(s.devices()[0].memory_total, 0);
    let r = s.read(0).unwrap();
    assert_eq!(r.processes, vec![(5, Some(1 << 30))]);
    for f in [figure::MEMORY, figure::UTILIZATION, figure::ENERGY] {
        assert_eq!(missing(&r, f).unwrap().kind, NOT_SUPPORTED, "{f}");
    }
    assert!(
        s.take_problems()
            .iter()
            .any(|n| n.contains("renderD128/device is missing"))
    );
}

#[test]
fn a_render_link_out_of_the_root_is_refused() {
    let fx = Fx::new("escape");
    fx.gpu(1, 53241, 128, 0x11);
    let link = fx.path("sys/class/drm/renderD128/device");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/proc/self", &link).unwrap();
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert!(s.read(0).unwrap().utilization.is_none());
    let notes = s.take_problems();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("not a device directory under the root")),
        "{notes:?}"
    );
}
