//! Parsing and validation of scenario documents.

use super::*;

#[test]
fn parses_full_example() {
    let s = parse(
        r#"{"init_error": null, "driver_version": "550.54.15", "devices": [{
            "uuid": "GPU-1", "name": "Sim", "memory_total": 100,
            "utilization": [{"at_ms": 500, "gpu": 90, "memory": 30},
                            {"at_ms": 0, "gpu": 40, "memory": 10}],
            "processes": [{"cmdline_contains": "x", "used_memory": 5},
                          {"pid": 1, "used_memory": null}],
            "errors": {"nvmlDeviceGetMigMode": "NVML_ERROR_GPU_IS_LOST"}}]}"#,
    )
    .unwrap();
    let d = &s.devices[0];
    assert_eq!(d.minor, 0);
    assert_eq!(d.utilization[0].at_ms, 0);
    assert_eq!(d.errors["nvmlDeviceGetMigMode"], 15);
    assert_eq!(s.driver_version.to_str().unwrap(), "550.54.15");
}

#[test]
fn rejects_bad_documents() {
    for bad in [
        r#"{"bogus": 1}"#,
        r#"{"init_error": "NOPE"}"#,
        r#"{"devices": [{"uuid": "a", "name": "n"}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1, "extra": 0}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "errors": {"nvmlFoo": "UNKNOWN"}}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "processes": [{"pid": 1, "cmdline_contains": "x"}]}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1},
                        {"uuid": "a", "name": "n", "memory_total": 1}]}"#,
        r#"{"hang": {"call": "nvmlFoo"}}"#,
        r#"{"hang": {"after_ms": 5}}"#,
        r#"{"hang": {"call": "nvmlShutdown", "forever": true}}"#,
        r#"{"delays_ms": {"nvmlFoo": 5}}"#,
        r#"{"delays_ms": {"nvmlShutdown": -1}}"#,
    ] {
        assert!(parse(bad).is_err(), "accepted {bad}");
    }
    assert_eq!(parse("{}").unwrap().devices.len(), 0);
}

#[test]
fn parses_gpm_ecc_and_faults() {
    let s = parse(
        r#"{"fault_marker": "SIMGPU_XID", "compute_marker": "SIMGPU_COMPUTE", "devices": [
            {"uuid": "a", "name": "n", "memory_total": 1, "fault_throttle_ms": 50,
             "gpm": {"sm_active": 55, "sm_occupancy": 30, "tensor_active": 20,
                     "dram_bandwidth": 15},
             "ecc": {"corrected": 3, "uncorrected": 1},
             "errors": {"nvmlGpmSampleGet": "UNKNOWN", "nvmlEventSetWait_v2": "TIMEOUT"}},
            {"uuid": "b", "name": "n", "memory_total": 1, "gpm": {"sm_active": 100},
             "ecc": {}},
            {"uuid": "c", "name": "n", "memory_total": 1}]}"#,
    )
    .unwrap();
    assert_eq!(s.fault_marker.as_deref(), Some("SIMGPU_XID"));
    assert_eq!(s.compute_marker.as_deref(), Some("SIMGPU_COMPUTE"));
    let [a, b, c] = &s.devices[..] else {
        panic!("3 devices")
    };
    let gpm = Gpm {
        sm_active: 55,
        sm_occupancy: 30,
        tensor_active: 20,
        dram_bandwidth: 15,
    };
    assert_eq!(a.gpm, Some(gpm));
    assert_eq!(
        a.ecc,
        Some(Ecc {
            corrected: 3,
            uncorrected: 1
        })
    );
    assert_eq!(a.fault_throttle, Duration::from_millis(50));
    assert_eq!(a.errors["nvmlEventSetWait_v2"], 10);
    let b_gpm = Gpm {
        sm_active: 100,
        ..Gpm::default()
    };
    assert_eq!((b.gpm, b.ecc), (Some(b_gpm), Some(Ecc::default())));
    assert_eq!((c.gpm, c.ecc), (None, None));
    assert_eq!(c.fault_throttle, Duration::from_millis(2000));
    assert!(parse("{}").unwrap().fault_marker.is_none());
    assert!(parse("{}").unwrap().compute_marker.is_none());
    let s = parse(r#"{"delays_ms": {"nvmlEventSetCreate": 5, "nvmlGpmSampleFree": 1}}"#);
    assert_eq!(s.unwrap().delays.len(), 2);
}

#[test]
fn rejects_bad_gpm_ecc_and_faults() {
    for bad in [
        r#"{"fault_marker": ""}"#,
        r#"{"fault_marker": 5}"#,
        r#"{"compute_marker": ""}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "gpm": {"sm_active": 101}}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "gpm": {"dram_bandwidth": -1}}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "gpm": {"sm_util": 5}}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "ecc": {"corrected": 1, "double_bit": 1}}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1, "ecc": 3}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "fault_throttle_ms": null}]}"#,
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "fault_marker": "x"}]}"#,
        // Functions without a device handle take no injected errors.
        r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
            "errors": {"nvmlEventSetCreate": "UNKNOWN"}}]}"#,
    ] {
        assert!(parse(bad).is_err(), "accepted {bad}");
    }
}

#[test]
fn parses_files_hangs_and_delays() {
    let s = parse(
        r#"{"control_file": "/tmp/ctl", "delays_ms": {"nvmlDeviceGetUtilizationRates": 30},
            "hang": {"call": "nvmlDeviceGetMemoryInfo_v2", "after_ms": 1000, "after_calls": 2},
            "devices": [{"uuid": "a", "name": "n", "memory_total": 1, "device_file": "/tmp/d0"}]}"#,
    )
    .unwrap();
    assert_eq!(
        s.control_file.as_deref(),
        Some(std::path::Path::new("/tmp/ctl"))
    );
    assert_eq!(
        s.devices[0].device_file.as_deref(),
        Some(std::path::Path::new("/tmp/d0"))
    );
    assert_eq!(
        s.delays["nvmlDeviceGetUtilizationRates"],
        Duration::from_millis(30)
    );
    let h = s.hang.unwrap();
    assert_eq!(
        (h.call.as_str(), h.after_ms, h.after_calls, h.for_ms),
        ("nvmlDeviceGetMemoryInfo_v2", 1000, 2, None)
    );
    let s = parse(r#"{"hang": {"call": "nvmlInit_v2", "for_ms": 50}}"#).unwrap();
    let h = s.hang.unwrap();
    assert_eq!((h.after_ms, h.after_calls, h.for_ms), (0, 0, Some(50)));
    assert!(s.control_file.is_none() && s.delays.is_empty());
}

#[test]
fn parses_mig_instances_and_environ_entries() {
    let s = parse(
        r#"{"devices": [{"uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3", "memory_total": 9,
            "processes": [{"pid": 7, "environ_contains": "SLURM_JOB_ID=3"}],
            "mig": {"instances": [
                {"uuid": "MIG-a", "profile": "1g.10gb", "gpu_instance_id": 1,
                 "compute_instance_id": 0, "memory_total": 5, "gpm": {"sm_active": 40},
                 "processes": [{"cmdline_contains": "x", "environ_contains": "M=1"}],
                 "errors": {"nvmlDeviceGetGpuInstanceId": "NO_PERMISSION"}}]}},
            {"uuid": "GPU-2", "name": "n", "memory_total": 1, "mig": {"max_instances": 0}}]}"#,
    )
    .unwrap();
    let d = &s.devices[0];
    assert_eq!(
        d.processes[0].environ_contains.as_deref(),
        Some("SLURM_JOB_ID=3")
    );
    let mig = d.mig.as_ref().unwrap();
    assert_eq!(mig.max_instances, 7);
    let i = &mig.instances[0];
    assert_eq!(
        i.name.to_str().unwrap(),
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    );
    assert_eq!((i.gpu_instance_id, i.compute_instance_id), (1, 0));
    assert_eq!((i.memory_total, i.memory_used_base), (5, 0));
    assert_eq!(i.gpm.unwrap().sm_active, 40);
    assert_eq!(i.errors["nvmlDeviceGetGpuInstanceId"], 4);
    assert_eq!(i.processes[0].environ_contains.as_deref(), Some("M=1"));
    let empty = s.devices[1].mig.as_ref().unwrap();
    assert_eq!((empty.max_instances, empty.instances.len()), (0, 0));
    assert!(s.devices[1].errors.is_empty() && parse("{}").unwrap().devices.is_empty());
    let delayed = r#"{"delays_ms": {"nvmlDeviceGetComputeInstanceId": 5},
        "hang": {"call": "nvmlDeviceGetMigDeviceHandleByIndex"}}"#;
    assert!(
        parse(delayed).is_ok(),
        "the MIG calls can be delayed and hung"
    );
}

#[test]
fn rejects_bad_mig_documents() {
    let device = |mig: &str| {
        format!(r#"{{"devices": [{{"uuid": "GPU-1", "name": "n", "memory_total": 1, {mig}}}]}}"#)
    };
    let instance = |uuid: &str, gi: u64, more: &str| {
        format!(
            r#"{{"uuid": "{uuid}", "profile": "1g.10gb", "gpu_instance_id": {gi},
                "compute_instance_id": 0, "memory_total": 1 {more}}}"#
        )
    };
    let a = instance("MIG-a", 1, "");
    let mig = |instances: &str, max: &str| {
        device(&format!(r#""mig": {{"instances": [{instances}]{max}}}"#))
    };
    let beside_a = |uuid: &str, gi: u64| mig(&format!("{a}, {}", instance(uuid, gi, "")), "");
    let only = |uuid: &str, gi: u64, more: &str| mig(&instance(uuid, gi, more), "");
    for bad in [
        device(r#""processes": [{"pid": 1, "environ_contains": ""}]"#),
        device(r#""mig": {"bogus": 1}"#),
        mig(&a, r#", "max_instances": 0"#),
        beside_a("MIG-b", 1),
        beside_a("MIG-a", 2),
        only("GPU-1", 1, ""),
        only("M", 4294967295, ""),
        only("M", 1, r#", "x": 1"#),
        only("M", 1, r#", "gpm": {"sm_active": 101}"#),
        only("M", 1, r#", "errors": {"nvmlFoo": "UNKNOWN"}"#),
        only("M", 1, r#", "processes": [{"environ_contains": "A=1"}]"#),
        device(r#""mig": {"instances": [{"uuid": "M", "gpu_instance_id": 1}]}"#),
    ] {
        assert!(parse(&bad).is_err(), "accepted {bad}");
    }
    assert!(
        parse(&mig(&a, r#", "max_instances": 1"#)).is_ok(),
        "the base is valid"
    );
}

#[test]
fn a_mig_reconfiguration_is_a_second_layout_checked_as_the_first() {
    let instance = |uuid: &str, gi: u64| {
        format!(
            r#"{{"uuid": "{uuid}", "profile": "1g.10gb", "gpu_instance_id": {gi},
                "compute_instance_id": 0, "memory_total": 1}}"#
        )
    };
    let doc = |later: &str, more: &str| {
        format!(
            r#"{{"devices": [{{"uuid": "GPU-1", "name": "n", "memory_total": 1, "mig": {{
                "instances": [{a}], "reconfigure": {{"at_ms": 300, "instances": [{later}]}}}}}}
                {more}]}}"#,
            a = instance("MIG-a", 1)
        )
    };
    // The second layout may keep an instance of the first and add new ones.
    let later = format!("{}, {}", instance("MIG-c", 2), instance("MIG-a", 1));
    let s = parse(&doc(&later, "")).unwrap();
    let mig = s.devices[0].mig.as_ref().unwrap();
    let (at_ms, instances) = mig.reconfigure.as_ref().unwrap();
    assert_eq!(*at_ms, 300);
    let uuids: Vec<&str> = instances.iter().map(|i| i.uuid.to_str().unwrap()).collect();
    assert_eq!(uuids, ["MIG-c", "MIG-a"]);
    assert_eq!(mig.instances.len(), 1);
    for bad in [
        doc(
            &format!("{}, {}", instance("MIG-c", 2), instance("MIG-d", 2)),
            "",
        ),
        doc(&instance("GPU-1", 2), ""),
        doc(
            &instance("MIG-c", 2),
            r#", {"uuid": "MIG-c", "name": "n", "memory_total": 1}"#,
        ),
        doc(&format!("{}, \"x\"", instance("MIG-c", 2)), ""),
    ] {
        assert!(parse(&bad).is_err(), "accepted {bad}");
    }
}
