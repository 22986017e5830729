//! Faults through `nvml-wrapper`: a marked process raises an Xid event, throttles the clocks
//! and counts a corrected ECC error.

use super::{Handle, UUID0, UUID1, init, raw_lib, scenario, stop, sym, wait_for_cmdline};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use std::ffi::{c_uint, c_ulonglong};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// A `sleep` whose command line (its argv[0], as `exec -a` sets it) carries `tag`.
fn tagged_sleep(tag: &str) -> Child {
    let child = Command::new("sleep")
        .arg0(format!("sleep-{tag}"))
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    wait_for_cmdline(&child, tag);
    child
}

fn faulty_scenario(load: &str) -> String {
    format!(
        r#"{{"fault_marker": "SIMGPU_XID", "devices": [
            {{"uuid": "{UUID0}", "name": "A", "memory_total": 1, "fault_throttle_ms": 1500,
              "processes": [{{"cmdline_contains": "{load}"}}],
              "ecc": {{"corrected": 2, "uncorrected": 1}}}},
            {{"uuid": "{UUID1}", "name": "B", "memory_total": 1}}]}}"#
    )
}

#[test]
fn a_marked_process_raises_an_xid_throttles_and_counts_an_ecc_error() {
    let load = format!("xid-load-{}", std::process::id());
    let _s = scenario("xid", &faulty_scenario(&load));
    let nvml = init().expect("init");
    let (d0, d1) = (
        nvml.device_by_index(0).unwrap(),
        nvml.device_by_index(1).unwrap(),
    );
    let fault = ThrottleReasons::HW_SLOWDOWN
        | ThrottleReasons::HW_THERMAL_SLOWDOWN
        | ThrottleReasons::SW_THERMAL_SLOWDOWN;
    let ecc = |d: &nvml_wrapper::Device, e, c| d.total_ecc_errors(e, c);

    assert_eq!(
        d0.supported_event_types().unwrap(),
        EventTypes::CRITICAL_XID_ERROR
    );
    assert!(
        d0.supported_throttle_reasons_strict()
            .unwrap()
            .contains(fault | ThrottleReasons::GPU_IDLE)
    );
    let set = d0
        .register_events(
            EventTypes::CRITICAL_XID_ERROR,
            nvml.create_event_set().unwrap(),
        )
        .unwrap();
    assert!(matches!(set.wait(0), Err(NvmlError::Timeout)));
    let t = Instant::now();
    assert!(matches!(set.wait(100), Err(NvmlError::Timeout)));
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        d0.current_throttle_reasons().unwrap(),
        ThrottleReasons::GPU_IDLE
    );
    assert_eq!(
        ecc(&d0, MemoryError::Corrected, EccCounter::Volatile).unwrap(),
        2
    );
    assert_eq!(
        ecc(&d0, MemoryError::Uncorrected, EccCounter::Aggregate).unwrap(),
        1
    );
    assert!(matches!(
        ecc(&d1, MemoryError::Corrected, EccCounter::Volatile),
        Err(NvmlError::NotSupported)
    ));
    let other = nvml.create_event_set().unwrap();
    let refused = d1.register_events(EventTypes::PSTATE_CHANGE, other);
    assert!(matches!(
        refused.map(|_| ()).unwrap_err().error,
        NvmlError::NotSupported
    ));

    // Matched but unmarked: load, no fault.
    let plain = tagged_sleep(&format!("{load}-plain"));
    assert!(matches!(set.wait(50), Err(NvmlError::Timeout)));
    assert!(d0.current_throttle_reasons().unwrap().is_empty());
    stop(plain);

    // The wait itself notices the fault of a process that starts meanwhile.
    let marked_tag = format!("{load}-SIMGPU_XID");
    let (marked, (event, waited)) = std::thread::scope(|scope| {
        let waiter = scope.spawn(move || {
            let t = Instant::now();
            let event = set.wait(5000);
            let event = event.map(|e| (e.device.uuid(), e.event_type, e.event_data));
            (event, t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        (tagged_sleep(&marked_tag), waiter.join().unwrap())
    });
    let (uuid, kind, xid) = event.expect("an Xid event");
    assert_eq!(uuid.unwrap(), UUID0);
    assert_eq!(kind, EventTypes::CRITICAL_XID_ERROR);
    assert_eq!(xid, Some(XidError::Value(79)));
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    let throttled_at = Instant::now();
    assert_eq!(d0.current_throttle_reasons_strict().unwrap(), fault);
    assert_eq!(
        d1.current_throttle_reasons().unwrap(),
        ThrottleReasons::GPU_IDLE
    );
    for counter in [EccCounter::Volatile, EccCounter::Aggregate] {
        assert_eq!(ecc(&d0, MemoryError::Corrected, counter).unwrap(), 3);
        assert_eq!(ecc(&d0, MemoryError::Uncorrected, counter).unwrap(), 1);
    }

    // Once per pid and set: a set registered while the faulty process runs gets its Xid at
    // registration, then no more; the device counts its error once.
    let xid_set = || {
        let set = nvml.create_event_set().unwrap();
        d0.register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .unwrap()
    };
    let late = xid_set();
    let e = late.wait(0).expect("the running fault's Xid");
    assert_eq!(e.event_data, Some(XidError::Value(79)));
    assert!(matches!(late.wait(0), Err(NvmlError::Timeout)));
    assert_eq!(
        ecc(&d0, MemoryError::Corrected, EccCounter::Volatile).unwrap(),
        3
    );

    std::thread::sleep(Duration::from_millis(1600).saturating_sub(throttled_at.elapsed()));
    assert!(
        d0.current_throttle_reasons().unwrap().is_empty(),
        "the throttle period is over"
    );
    stop(marked);
    assert_eq!(
        d0.current_throttle_reasons().unwrap(),
        ThrottleReasons::GPU_IDLE
    );
    assert_eq!(
        ecc(&d0, MemoryError::Corrected, EccCounter::Aggregate).unwrap(),
        3
    );
    // The fault ended before this set was registered: NVML delivers only later events.
    assert!(matches!(xid_set().wait(0), Err(NvmlError::Timeout)));
}

#[repr(C)]
struct EventData {
    device: Handle,
    event_type: c_ulonglong,
    event_data: c_ulonglong,
    gpu_instance: c_uint,
    compute_instance: c_uint,
}

#[test]
fn event_and_health_raw_c_api_rules() {
    let load = format!("raw-load-{}", std::process::id());
    let json = faulty_scenario(&load).replace(
        r#""name": "B""#,
        r#""name": "B", "errors": {"nvmlEventSetWait_v2": "UNKNOWN"}, "lost_after_ms": 1500"#,
    );
    let _s = scenario("events-raw", &json);
    let started = Instant::now();
    let nvml = init().expect("init");
    let lib = raw_lib();
    // SAFETY: the prototypes are those of nvml.h.
    let (create, free, register, wait_v2, wait_v1, reasons, ecc) = unsafe {
        (
            sym::<unsafe extern "C" fn(*mut Handle) -> c_uint>(&lib, "nvmlEventSetCreate"),
            sym::<unsafe extern "C" fn(Handle) -> c_uint>(&lib, "nvmlEventSetFree"),
            sym::<unsafe extern "C" fn(Handle, c_ulonglong, Handle) -> c_uint>(
                &lib,
                "nvmlDeviceRegisterEvents",
            ),
            sym::<unsafe extern "C" fn(Handle, *mut EventData, c_uint) -> c_uint>(
                &lib,
                "nvmlEventSetWait_v2",
            ),
            sym::<unsafe extern "C" fn(Handle, *mut EventData, c_uint) -> c_uint>(
                &lib,
                "nvmlEventSetWait",
            ),
            sym::<unsafe extern "C" fn(Handle, *mut c_ulonglong) -> c_uint>(
                &lib,
                "nvmlDeviceGetCurrentClocksEventReasons",
            ),
            sym::<unsafe extern "C" fn(Handle, c_uint, c_uint, *mut c_ulonglong) -> c_uint>(
                &lib,
                "nvmlDeviceGetTotalEccErrors",
            ),
        )
    };
    // SAFETY: the device handles stay valid while `nvml` is initialized.
    let (d0, d1): (Handle, Handle) = unsafe {
        (
            nvml.device_by_index(0).unwrap().handle().cast(),
            nvml.device_by_index(1).unwrap().handle().cast(),
        )
    };
    let marked = tagged_sleep(&format!("{load}-SIMGPU_XID"));
    // SAFETY: every pointer passed is null or points to a live local of the C type.
    unsafe {
        let (mut set, mut bad) = (null_mut(), null_mut());
        let mut data = EventData {
            device: null_mut(),
            event_type: 0,
            event_data: 0,
            gpu_instance: 7,
            compute_instance: 7,
        };
        let mut n: c_ulonglong = 0;
        assert_eq!(create(null_mut()), 2);
        assert_eq!(create(&mut set) | create(&mut bad), 0);
        assert_eq!(wait_v2(set, null_mut(), 0), 2);
        assert_eq!(wait_v2(d0, &mut data, 0), 2, "not a set");
        assert_eq!(register(d0, 0x8, d1), 2, "not a set");
        assert_eq!(
            register(d0, 0x8 | 0x1, set),
            3,
            "single-bit ECC events unsupported"
        );
        // Registration notices the process already running.
        assert_eq!(register(d0, 0x8, set), 0);
        assert_eq!(reasons(d0, &mut n), 0);
        assert_eq!(n, 0x68, "throttled by the fault");
        assert_eq!(reasons(d0, null_mut()), 2);
        assert_eq!(wait_v1(set, &mut data, 0), 0);
        assert_eq!(
            (data.device, data.event_type, data.event_data),
            (d0, 0x8, 79)
        );
        assert_eq!(
            (data.gpu_instance, data.compute_instance),
            (7, 7),
            "v1: 3 fields"
        );
        assert_eq!(wait_v2(set, &mut data, 0), 10, "TIMEOUT");

        assert_eq!(ecc(d0, 0, 0, &mut n), 0);
        assert_eq!(n, 3);
        assert_eq!(ecc(d0, 2, 0, &mut n), 2);
        assert_eq!(ecc(d0, 0, 2, &mut n), 2);
        assert_eq!(ecc(d0, 1, 1, null_mut()), 2);
        assert_eq!(ecc(d1, 0, 0, &mut n), 3, "no ECC");

        // Errors injected on a registered device reach the wait; a lost one ends it.
        assert_eq!(register(d1, 0x8, bad), 0);
        assert_eq!(wait_v2(bad, &mut data, 0), 999);
        std::thread::sleep(Duration::from_millis(1600).saturating_sub(started.elapsed()));
        assert_eq!(wait_v2(bad, &mut data, 0), 15, "GPU_IS_LOST");
        assert_eq!(free(bad), 0);
        assert_eq!(free(bad), 2, "freed already");
        assert_eq!(wait_v2(bad, &mut data, 0), 2);
        // `set` is left for the shutdown to free.
    }
    stop(marked);
    nvml.shutdown().unwrap();
}
