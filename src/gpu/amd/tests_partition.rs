//! Compute partitions on fixture trees laid out as the kernel lays out a partitioned MI300X.

use std::collections::HashSet;

use super::energy::EnergyOrigin;
use super::tests::{Fx, missing};
use super::*;
use crate::gpu::figures::NOT_SUPPORTED;

/// The KFD id and render minor of partition `k` of the CPX GPU below.
fn cpx_ids(k: u32) -> (u32, u32) {
    (40000 + k, 136 + k)
}

/// A MI300X in CPX mode at PCI bus `bus`, as KFD node `first`..`first + 7`: eight partitions of
/// 38 CUs. Each has a KFD node with its own gpu_id and render node, the device's `unique_id`,
/// and the device's `location_id` with its number in the low bits; partition 0's render node
/// is the PCI device's own, the others' lead to a platform device without the amdgpu files.
fn cpx(fx: &Fx, first: u32, bus: u8) -> String {
    let pci = format!("0000:{bus:02x}:00.0");
    let unique: u64 = 0x5eed_0000 + u64::from(bus);
    for k in 0..8u32 {
        let (gpu_id, minor) = cpx_ids(k);
        let n = format!("sys/class/kfd/kfd/topology/nodes/{}", first + k);
        fx.write(&format!("{n}/gpu_id"), format!("{gpu_id}\n"));
        fx.write(&format!("{n}/name"), "gfx942\n");
        fx.write(
            &format!("{n}/properties"),
            format!(
                "simd_count 152\nsimd_per_cu 4\ndrm_render_minor {minor}\nlocation_id {}\n\
                 domain 0\nunique_id {unique}\n",
                (u32::from(bus) << 8) | k
            ),
        );
        let render = fx.path(&format!("sys/class/drm/renderD{minor}/device"));
        std::fs::create_dir_all(render.parent().unwrap()).unwrap();
        if k == 0 {
            fx.link(&format!("sys/class/drm/renderD{minor}/device"), &pci);
        } else {
            let xcp = format!("amdgpu_xcp.{}", k - 1);
            fx.write(&format!("sys/devices/platform/{xcp}/uevent"), "");
            std::os::unix::fs::symlink(format!("../../../devices/platform/{xcp}"), render).unwrap();
        }
    }
    let d = Fx::dev(&pci);
    // The whole GPU's figures: every partition's use.
    fx.write(&format!("{d}/gpu_busy_percent"), "87\n");
    fx.write(&format!("{d}/mem_info_vram_used"), "103079215104\n");
    fx.write(&format!("{d}/mem_info_vram_total"), "206158430208\n");
    fx.write(&format!("{d}/unique_id"), format!("{unique:016x}\n"));
    fx.write(&format!("{d}/product_name"), "AMD Instinct MI300X\n");
    fx.write(&format!("{d}/current_compute_partition"), "CPX\n");
    fx.write(
        &format!("{d}/gpu_metrics"),
        super::tests::metrics_table(6, 9000 * 65536),
    );
    fx.write(&format!("{d}/hwmon/hwmon3/name"), "amdgpu\n");
    fx.write(&format!("{d}/hwmon/hwmon3/power1_average"), "690000000\n");
    pci
}

#[test]
fn a_cpx_partition_reads_no_device_figure_and_only_its_own_processes() {
    let fx = Fx::new("cpx");
    // A whole MI300X beside the partitioned one.
    fx.gpu(1, 53241, 128, 0x11);
    cpx(&fx, 2, 0x21);
    // The job's process on partition 0; another job's, with much more, on partition 3.
    fx.proc(500, cpx_ids(0).0, 1 << 30, Some(20));
    fx.proc(600, cpx_ids(3).0, 8 << 30, Some(38));
    let mut s = AmdSource::open(fx.root()).unwrap();
    let d = s.devices().to_vec();
    assert_eq!(d.len(), 9, "{d:?}");
    // The whole GPU is as it was.
    assert_eq!(d[0].uuid, "GPU-000000000000abd1");
    // Each partition is a GPU of its own, named as its device with its number.
    let ids: HashSet<&str> = d.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(ids.len(), 9, "{d:?}");
    for (k, g) in d[1..].iter().enumerate() {
        assert_eq!(g.uuid, format!("GPU-000000005eed0021-p{k}"));
        assert_eq!(g.name, "AMD Instinct MI300X");
        assert_eq!(g.compute_units, Some(38));
        assert_eq!(g.minor, Some(cpx_ids(k as u32).1));
    }
    assert_eq!(d[1].pci_bus_id.as_deref(), Some("0000:21:00.0"));
    let notes = s.take_problems();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("compute partition 0 of the GPU at 0000:21:00.0 (CPX mode)")),
        "{notes:?}"
    );
    s.track_processes(500, &HashSet::new());
    for _ in 0..2 {
        let whole = s.read(0).unwrap();
        assert_eq!(whole.used, Some(296747008));
        assert_eq!(whole.utilization, Some(0));
        assert_eq!(whole.power_mw, Some(140_000));
        assert!(whole.energy_mj.is_some());
        // Partition 0: its render node is the whole GPU's, yet no device figure is its own.
        let p0 = s.read(1).unwrap();
        assert_eq!(
            (p0.used, p0.utilization, p0.power_mw, p0.energy_mj),
            (None, None, None, None)
        );
        for f in [figure::MEMORY, figure::UTILIZATION, figure::ENERGY] {
            let why = missing(&p0, f).unwrap();
            assert_eq!(why.kind, NOT_SUPPORTED, "{f}");
            assert!(why.why.contains("compute partition 0"), "{f}: {why:?}");
        }
        // Its processes' figures are its own: the job's VRAM, not the other job's.
        assert_eq!(p0.processes, vec![(500, Some(1 << 30))]);
        assert_eq!(p0.process_cu_occupancy, Some(vec![(500, 20)]));
        let p3 = s.read(4).unwrap();
        assert_eq!((p3.used, p3.utilization, p3.energy_mj), (None, None, None));
        assert_eq!(p3.processes, vec![(600, Some(8 << 30))]);
    }
}

#[test]
fn a_dpx_gpu_is_known_by_its_mode_and_an_spx_one_is_whole() {
    let fx = Fx::new("dpx");
    let pci = fx.gpu(1, 53241, 128, 0x11);
    let d = Fx::dev(&pci);
    fx.write(&format!("{d}/current_compute_partition"), "SPX\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert_eq!(s.devices()[0].uuid, "GPU-000000000000abd1");
    assert_eq!(s.read(0).unwrap().used, Some(296747008));
    // The mode alone says the device is partitioned, even with its other partitions' KFD nodes
    // not listed.
    fx.write(&format!("{d}/current_compute_partition"), "DPX\n");
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert_eq!(s.devices()[0].uuid, "GPU-000000000000abd1-p0");
    let r = s.read(0).unwrap();
    assert_eq!((r.used, r.utilization, r.power_mw), (None, None, None));
    assert!(matches!(
        s.energy_origin(0),
        Some(EnergyOrigin::None { .. })
    ));
}
