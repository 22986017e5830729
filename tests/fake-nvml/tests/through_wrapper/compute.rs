//! `compute_marker`: a device is busy only while a process on it computes, as a real GPU, whose
//! utilization and SM activity are 0 with no kernel running, however much memory is held.

use super::{UUID0, UUID1, init, scenario, sleeper, stop};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::error::NvmlError;

#[test]
fn utilization_and_sm_activity_follow_the_processes_that_compute() {
    let me = std::process::id();
    // `sleep 33.<me>` holds memory and only sleeps; `sleep 34.<me>` says it computes.
    let json = format!(
        r#"{{"compute_marker": "34.{me}", "devices": [
            {{"uuid": "{UUID0}", "name": "H", "memory_total": 4294967296,
              "utilization": [{{"at_ms": 0, "gpu": 55, "memory": 20}}],
              "gpm": {{"sm_active": 40, "sm_occupancy": 20, "tensor_active": 10,
                       "dram_bandwidth": 5}},
              "processes": [{{"cmdline_contains": "sleep 33.{me}", "used_memory": 1024}},
                            {{"cmdline_contains": "sleep 34.{me}", "used_memory": 2048}}]}},
            {{"uuid": "{UUID1}", "name": "A", "memory_total": 1,
              "utilization": [{{"at_ms": 0, "gpu": 70, "memory": 30}}]}}]}}"#
    );
    let _s = scenario("compute", &json);
    let nvml = init().expect("init");
    let (d0, d1) = (
        nvml.device_by_index(0).unwrap(),
        nvml.device_by_index(1).unwrap(),
    );
    let util = |d: &nvml_wrapper::Device| {
        let u = d.utilization_rates().unwrap();
        (u.gpu, u.memory)
    };
    let sm_active = |a: &nvml_wrapper::GpmSample, b: &nvml_wrapper::GpmSample| {
        super::gpm::metrics(&nvml, a, b)[0]
    };
    // Nobody on either device: idle, whatever the timeline says.
    assert_eq!(util(&d0), (0, 0));
    assert_eq!(util(&d1), (0, 0));
    assert_eq!(
        d0.current_throttle_reasons().unwrap(),
        ThrottleReasons::GPU_IDLE
    );
    let s1 = d0.gpm_sample().unwrap();
    // A holder that only sleeps: its memory is there, the device stays idle.
    let (holder, _) = sleeper(33);
    assert_eq!(d0.memory_info().unwrap().used, 1024);
    assert_eq!(util(&d0), (0, 0));
    let s2 = d0.gpm_sample().unwrap();
    assert_eq!(sm_active(&s1, &s2), 0.0);
    assert_eq!(
        d0.current_throttle_reasons().unwrap(),
        ThrottleReasons::GPU_IDLE
    );
    let samples = d0.process_utilization_stats(None).unwrap();
    assert_eq!(
        samples
            .iter()
            .map(|s| (s.sm_util, s.mem_util))
            .collect::<Vec<_>>(),
        [(0, 0)]
    );
    // One that computes: the scenario's figures, its own per-process share, none for the
    // sleeper.
    let (worker, _) = sleeper(34);
    assert_eq!(util(&d0), (55, 20));
    let s3 = d0.gpm_sample().unwrap();
    let s4 = d0.gpm_sample().unwrap();
    assert_eq!(sm_active(&s3, &s4), 40.0);
    assert!(d0.current_throttle_reasons().unwrap().is_empty());
    let mut samples: Vec<(u32, u32)> = d0
        .process_utilization_stats(None)
        .unwrap()
        .iter()
        .map(|s| {
            let w = s.pid == worker.id();
            assert!(w || s.pid == holder.id(), "{s:?}");
            (u32::from(w), s.sm_util)
        })
        .collect();
    samples.sort();
    assert_eq!(samples, [(0, 0), (1, 55)]);
    // The other device has no process: still idle.
    assert_eq!(util(&d1), (0, 0));
    stop(worker);
    assert_eq!(util(&d0), (0, 0));
    stop(holder);
    assert_eq!(util(&d0), (0, 0));
    assert!(matches!(
        d0.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));
}
