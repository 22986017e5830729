//! MIG through `nvml-wrapper`: a plain GPU beside one in MIG mode with two 1g.10gb instances,
//! each matching its own processes by their environment.

use super::gpm::metrics;
use super::{GIB, Handle, UUID0, UUID1, init, raw_lib, scenario, stop, sym, wait_for_cmdline};
use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use std::ffi::c_uint;
use std::process::{Child, Command};
use std::ptr::null_mut;
use std::time::Duration;

const MIG_A: &str = "MIG-aaaaaaaa-1111-2222-3333-444444444444";
const MIG_B: &str = "MIG-bbbbbbbb-1111-2222-3333-444444444444";
/// A real 1g.10gb instance's memory.
const SLICE: u64 = 10_468_982_784;
const MIB: u64 = 1 << 20;

const GPM_A: &str =
    r#""gpm": {"sm_active": 40, "sm_occupancy": 20, "tensor_active": 10, "dram_bandwidth": 8},"#;
const GPM_B: &str =
    r#""gpm": {"sm_active": 70, "sm_occupancy": 60, "tensor_active": 50, "dram_bandwidth": 30},"#;

/// Device 0: a plain GPU; device 1 (with `extra`): an H100 in MIG mode with instances gi 1 and
/// gi 2 (ci 0, B with `gpm_b` and an injected error), whose processes are `sleep {marker}` with
/// `MARK_A=1` / `MARK_B=1` in their environment.
fn mig_scenario(marker: &str, extra: &str, gpm_b: &str) -> String {
    let instance = |uuid: &str, gi: u32, mark: &str, used: u64, more: &str| {
        format!(
            r#"{{"uuid": "{uuid}", "profile": "1g.10gb", "gpu_instance_id": {gi},
                "compute_instance_id": 0, "memory_total": {SLICE}, "memory_used_base": {MIB},
                {more} "processes": [{{"cmdline_contains": "sleep {marker}",
                                       "environ_contains": "{mark}=1", "used_memory": {used}}}]}}"#
        )
    };
    let a = instance(MIG_A, 1, "MARK_A", GIB, GPM_A);
    let errors = r#""errors": {"nvmlDeviceGetPowerUsage": "NO_PERMISSION"},"#;
    let b = instance(MIG_B, 2, "MARK_B", 2 * GIB, &format!("{gpm_b} {errors}"));
    format!(
        r#"{{"devices": [
            {{"uuid": "{UUID0}", "name": "Simulated GPU 80GB", "memory_total": {total}}},
            {{"uuid": "{UUID1}", "name": "NVIDIA H100 80GB HBM3", "memory_total": {total},
              "memory_used_base": {base}, "gpm": {{"sm_active": 90}},
              "utilization": [{{"at_ms": 0, "gpu": 33, "memory": 5}}],
              "mig": {{"instances": [{a}, {b}]}} {extra}}}]}}"#,
        total = 80 * GIB,
        base = 512 * MIB,
    )
}

/// A `sleep {marker}` with `{var}=1` in its environment.
fn marked_sleep(marker: &str, var: &str) -> Child {
    let child = Command::new("sleep")
        .arg(marker)
        .env(var, "1")
        .spawn()
        .expect("spawn sleep");
    wait_for_cmdline(&child, marker);
    child
}

/// `nvmlDeviceGetGpuInstanceId` and `nvmlDeviceGetComputeInstanceId` of `device`, with their
/// return codes (not in `nvml-wrapper`).
fn instance_ids(device: &Device) -> [(c_uint, c_uint); 2] {
    type IdFn = unsafe extern "C" fn(Handle, *mut c_uint) -> c_uint;
    let lib = raw_lib();
    // SAFETY: the prototypes are those of nvml.h; the handle is live while `device` is.
    unsafe {
        let handle: Handle = device.handle().cast();
        [
            "nvmlDeviceGetGpuInstanceId",
            "nvmlDeviceGetComputeInstanceId",
        ]
        .map(|name| {
            let mut id = 99;
            let rc = sym::<IdFn>(&lib, name)(handle, &mut id);
            (rc, id)
        })
    }
}

fn used(device: &Device) -> u64 {
    device.memory_info().unwrap().used
}

#[test]
fn mig_devices_answer_for_their_own_processes() {
    let marker = format!("41.{}", std::process::id());
    let _s = scenario("mig", &mig_scenario(&marker, "", GPM_B));
    let nvml = init().expect("init");
    assert_eq!(nvml.device_count().unwrap(), 2, "parents only");
    let (plain, parent) = (
        nvml.device_by_index(0).unwrap(),
        nvml.device_by_index(1).unwrap(),
    );

    // A GPU not in MIG mode, as a real H100 answers.
    assert!(matches!(plain.mig_mode(), Err(NvmlError::NotSupported)));
    assert!(!plain.mig_is_mig_device_handle().unwrap());
    assert_eq!(plain.mig_device_count().unwrap(), 0);
    assert!(matches!(
        plain.mig_device_by_index(0),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        plain.mig_parent_device(),
        Err(NvmlError::InvalidArg)
    ));
    assert!(matches!(
        plain.gpm_mig_sample(1),
        Err(NvmlError::InvalidArg)
    ));
    assert_eq!(instance_ids(&plain), [(2, 99), (2, 99)]);

    let mode = parent.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert!(!parent.mig_is_mig_device_handle().unwrap());
    assert_eq!(parent.mig_device_count().unwrap(), 7);
    assert!(matches!(
        parent.mig_parent_device(),
        Err(NvmlError::InvalidArg)
    ));
    assert_eq!(instance_ids(&parent), [(2, 99), (2, 99)]);
    for empty_slot in [2, 6] {
        assert!(matches!(
            parent.mig_device_by_index(empty_slot),
            Err(NvmlError::NotFound)
        ));
    }
    assert!(matches!(
        parent.mig_device_by_index(7),
        Err(NvmlError::InvalidArg)
    ));

    let a = parent.mig_device_by_index(0).unwrap();
    let b = parent.mig_device_by_index(1).unwrap();
    assert_eq!(
        (a.uuid().unwrap().as_str(), b.uuid().unwrap().as_str()),
        (MIG_A, MIG_B)
    );
    assert_eq!(a.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
    assert!(a.mig_is_mig_device_handle().unwrap() && b.mig_is_mig_device_handle().unwrap());
    assert_eq!(instance_ids(&a), [(0, 1), (0, 0)]);
    assert_eq!(instance_ids(&b), [(0, 2), (0, 0)]);
    // SAFETY: only the handles' addresses are compared.
    unsafe {
        assert_ne!(a.handle(), b.handle());
        assert_eq!(a.mig_parent_device().unwrap().handle(), parent.handle());
        assert_eq!(nvml.device_by_uuid(MIG_B).unwrap().handle(), b.handle());
    }
    assert_eq!(b.mig_parent_device().unwrap().uuid().unwrap(), UUID1);

    // What real NVML does not answer on a MIG device; an injection on B comes first.
    assert!(matches!(
        a.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        a.process_utilization_stats(None),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(a.minor_number(), Err(NvmlError::NotSupported)));
    assert!(matches!(a.mig_mode(), Err(NvmlError::NotSupported)));
    assert!(matches!(a.mig_device_count(), Err(NvmlError::NotSupported)));
    assert!(matches!(a.gpm_sample(), Err(NvmlError::NotSupported)));
    assert!(matches!(a.power_usage(), Err(NvmlError::NotSupported)));
    assert!(matches!(b.power_usage(), Err(NvmlError::NoPermission)));
    assert!(a.gpm_support().unwrap(), "the parent's GPM");
    assert_eq!(parent.utilization_rates().unwrap().gpu, 33);

    assert_eq!(a.memory_info().unwrap().total, SLICE);
    assert_eq!((used(&a), used(&b)), (MIB, MIB));
    assert_eq!(used(&parent), 514 * MIB);
    let idle = [
        parent.gpm_mig_sample(1).unwrap(),
        parent.gpm_mig_sample(2).unwrap(),
    ];

    let load_a = marked_sleep(&marker, "MARK_A");
    let load_b = marked_sleep(&marker, "MARK_B");
    assert_eq!((used(&a), used(&b)), (MIB + GIB, MIB + 2 * GIB));
    assert_eq!(used(&parent), 514 * MIB + 3 * GIB);
    let procs = |d: &Device| {
        let mut got: Vec<_> = d
            .running_compute_processes()
            .unwrap()
            .into_iter()
            .map(|p| {
                (
                    p.pid,
                    p.used_gpu_memory,
                    p.gpu_instance_id,
                    p.compute_instance_id,
                )
            })
            .collect();
        got.sort_by_key(|p| p.2);
        got
    };
    let in_a = (load_a.id(), UsedGpuMemory::Used(GIB), Some(1), Some(0));
    let in_b = (load_b.id(), UsedGpuMemory::Used(2 * GIB), Some(2), Some(0));
    assert_eq!(procs(&a), vec![in_a.clone()]);
    assert_eq!(procs(&b), vec![in_b.clone()]);
    assert_eq!(procs(&parent), vec![in_a, in_b]);
    assert!(procs(&plain).is_empty());

    let busy_a = [
        parent.gpm_mig_sample(1).unwrap(),
        parent.gpm_mig_sample(1).unwrap(),
    ];
    let busy_b = parent.gpm_mig_sample(2).unwrap();
    assert_eq!(
        metrics(&nvml, &busy_a[0], &busy_a[1]),
        [40.0, 20.0, 10.0, 8.0]
    );
    assert_eq!(metrics(&nvml, &idle[0], &busy_a[0]), [20.0, 10.0, 5.0, 4.0]);
    assert_eq!(metrics(&nvml, &idle[1], &busy_b), [35.0, 30.0, 25.0, 15.0]);
    let mixed = gpm_metrics_get(&nvml, &busy_a[1], &busy_b, &[]);
    assert!(
        matches!(mixed, Err(NvmlError::InvalidArg)),
        "two GPU instances"
    );
    assert!(matches!(parent.gpm_mig_sample(3), Err(NvmlError::NotFound)));
    let device_wide = [parent.gpm_sample().unwrap(), parent.gpm_sample().unwrap()];
    let sm = metrics(&nvml, &device_wide[0], &device_wide[1])[0];
    assert_eq!(sm, 90.0, "the parent's samples are device-wide");

    stop(load_a);
    assert_eq!((used(&a), used(&b)), (MIB, MIB + 2 * GIB));
    assert!(procs(&a).is_empty());
    assert_eq!(procs(&parent).len(), 1);
    stop(load_b);
}

#[test]
fn mig_devices_are_lost_with_their_gpu() {
    let marker = format!("42.{}", std::process::id());
    let json = mig_scenario(&marker, r#", "lost_after_ms": 300"#, "");
    let _s = scenario("mig-lost", &json);
    let nvml = init().expect("init");
    let parent = nvml.device_by_index(1).unwrap();
    let b = nvml.device_by_uuid(MIG_B).unwrap();
    assert!(
        matches!(parent.gpm_mig_sample(2), Err(NvmlError::NotSupported)),
        "no gpm"
    );
    assert_eq!(b.uuid().unwrap(), MIG_B);
    type ByIndex = unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> c_uint;
    let lib = raw_lib();
    // SAFETY: the prototype is that of nvml.h; the handle is live while `parent` is.
    let rc = unsafe {
        sym::<ByIndex>(&lib, "nvmlDeviceGetMigDeviceHandleByIndex")(
            parent.handle().cast(),
            0,
            null_mut(),
        )
    };
    assert_eq!(rc, 2, "null out pointer: INVALID_ARGUMENT");
    type IsMig = unsafe extern "C" fn(Handle, *mut c_uint) -> c_uint;
    let mut bogus = 0u64;
    let mut is_mig = 9;
    // SAFETY: the prototype is that of nvml.h; the foreign handle is never dereferenced.
    let rc = unsafe {
        sym::<IsMig>(&lib, "nvmlDeviceIsMigDeviceHandle")((&raw mut bogus).cast(), &mut is_mig)
    };
    assert_eq!((rc, is_mig), (2, 9), "a foreign handle: INVALID_ARGUMENT");
    std::thread::sleep(Duration::from_millis(400));
    assert!(matches!(b.uuid(), Err(NvmlError::GpuLost)));
    assert!(matches!(b.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(b.mig_parent_device(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        parent.mig_device_by_index(0),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(
        nvml.device_by_uuid(MIG_A),
        Err(NvmlError::GpuLost)
    ));
    assert_eq!(instance_ids(&b), [(15, 99), (15, 99)]);
}

#[test]
fn a_mig_reconfiguration_puts_another_instance_in_a_slot() {
    const MIG_C: &str = "MIG-cccccccc-1111-2222-3333-444444444444";
    let instance = |uuid: &str, gi: u32| {
        format!(
            r#"{{"uuid": "{uuid}", "profile": "1g.10gb", "gpu_instance_id": {gi},
                "compute_instance_id": 0, "memory_total": {SLICE}}}"#
        )
    };
    // Slots 0 and 1 hold A and B; from 300 ms on, slot 0 holds C and slot 1 nothing.
    let json = format!(
        r#"{{"devices": [{{"uuid": "{UUID1}", "name": "NVIDIA H100 80GB HBM3",
            "memory_total": {total}, "mig": {{"instances": [{a}, {b}],
            "reconfigure": {{"at_ms": 300, "instances": [{c}]}}}}}}]}}"#,
        total = 80 * GIB,
        a = instance(MIG_A, 1),
        b = instance(MIG_B, 2),
        c = instance(MIG_C, 3),
    );
    let _s = scenario("mig-reconfigure", &json);
    let nvml = init().expect("init");
    let parent = nvml.device_by_index(0).unwrap();
    let slot0 = parent.mig_device_by_index(0).unwrap();
    let slot1 = parent.mig_device_by_index(1).unwrap();
    assert_eq!(slot0.uuid().unwrap(), MIG_A);
    assert_eq!(slot1.uuid().unwrap(), MIG_B);
    assert!(matches!(
        nvml.device_by_uuid(MIG_C),
        Err(NvmlError::NotFound)
    ));
    std::thread::sleep(Duration::from_millis(400));
    let now0 = parent.mig_device_by_index(0).unwrap();
    assert_eq!(now0.uuid().unwrap(), MIG_C);
    assert_eq!(instance_ids(&now0), [(0, 3), (0, 0)]);
    // An index the new layout leaves empty: NOT_FOUND, as an empty slot ever was.
    assert!(matches!(
        parent.mig_device_by_index(1),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(parent.mig_device_count().unwrap(), 7);
    // The old instances are gone by uuid; the handle of the emptied slot names nothing.
    assert!(matches!(
        nvml.device_by_uuid(MIG_A),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(nvml.device_by_uuid(MIG_C).unwrap().uuid().unwrap(), MIG_C);
    assert!(matches!(slot1.uuid(), Err(NvmlError::InvalidArg)));
    // A handle taken by index names what the slot holds now.
    assert_eq!(slot0.uuid().unwrap(), MIG_C);
}
