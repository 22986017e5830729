//! GPM through `nvml-wrapper`: support, samples and metrics that follow the device's load.

use super::{Handle, UUID0, UUID1, init, raw_lib, scenario, sleeper, stop, sym};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{GpmSample, Nvml};
use std::ffi::{c_char, c_uint, c_void};
use std::ptr::null_mut;

const WANTED: [GpmMetricId; 5] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
];

/// The four simulated metrics between two samples; Fp64Util must be NOT_SUPPORTED.
pub(super) fn metrics(nvml: &Nvml, a: &GpmSample, b: &GpmSample) -> [f64; 4] {
    let got = gpm_metrics_get(nvml, a, b, &WANTED).expect("metrics");
    assert_eq!(got.len(), 5);
    assert!(matches!(got[4], Err(NvmlError::NotSupported)), "{got:?}");
    std::array::from_fn(|k| {
        let m = got[k].as_ref().expect("simulated metric");
        assert_eq!(m.metric_id, WANTED[k]);
        m.value
    })
}

#[test]
fn gpm_follows_the_load_on_a_device_that_has_it() {
    let marker = format!("32.{}", std::process::id());
    let json = format!(
        r#"{{"devices": [
            {{"uuid": "{UUID0}", "name": "H", "memory_total": 1,
              "processes": [{{"cmdline_contains": "sleep {marker}"}}],
              "gpm": {{"sm_active": 55, "sm_occupancy": 30, "tensor_active": 20,
                       "dram_bandwidth": 15}}}},
            {{"uuid": "{UUID1}", "name": "A", "memory_total": 1}}]}}"#
    );
    let _s = scenario("gpm", &json);
    let nvml = init().expect("init");
    let (d0, d1) = (
        nvml.device_by_index(0).unwrap(),
        nvml.device_by_index(1).unwrap(),
    );
    assert!(d0.gpm_support().unwrap());
    assert!(!d1.gpm_support().unwrap(), "a pre-Hopper device");
    assert!(matches!(d1.gpm_sample(), Err(NvmlError::NotSupported)));
    assert!(
        matches!(d0.gpm_mig_sample(1), Err(NvmlError::InvalidArg)),
        "not in MIG mode"
    );

    let idle1 = d0.gpm_sample().unwrap();
    let idle2 = d0.gpm_sample().unwrap();
    assert_eq!(
        metrics(&nvml, &idle1, &idle2),
        [0.0; 4],
        "no process: idle SMs"
    );

    let (load, again) = sleeper(32);
    assert_eq!(again, marker);
    let busy1 = d0.gpm_sample().unwrap();
    assert_eq!(metrics(&nvml, &idle2, &busy1), [27.5, 15.0, 10.0, 7.5]);
    let busy2 = d0.gpm_sample().unwrap();
    assert_eq!(metrics(&nvml, &busy1, &busy2), [55.0, 30.0, 20.0, 15.0]);
    stop(load);
    let idle3 = d0.gpm_sample().unwrap();
    assert_eq!(metrics(&nvml, &busy2, &idle3), [27.5, 15.0, 10.0, 7.5]);

    for (a, b) in [(&busy2, &busy1), (&busy1, &busy1)] {
        assert!(
            matches!(
                gpm_metrics_get(&nvml, a, b, &WANTED),
                Err(NvmlError::InvalidArg)
            ),
            "the second sample must be taken after the first"
        );
    }
    assert!(
        gpm_metrics_get(&nvml, &idle1, &idle3, &[])
            .unwrap()
            .is_empty()
    );
}

#[repr(C)]
struct Support {
    version: c_uint,
    supported: c_uint,
}

/// `nvmlGpmMetric_t`.
#[repr(C)]
struct Metric {
    id: c_uint,
    ret: c_uint,
    value: f64,
    names: [*mut c_char; 3],
}

/// `nvmlGpmMetricsGet_t`, with room for `NVML_GPM_METRIC_MAX` (210) metrics.
#[repr(C)]
struct MetricsGet {
    version: c_uint,
    count: c_uint,
    sample1: Handle,
    sample2: Handle,
    metrics: [Metric; 210],
}

#[test]
fn gpm_raw_c_api_rules() {
    let json = format!(
        r#"{{"devices": [{{"uuid": "{UUID0}", "name": "H", "memory_total": 1, "gpm": {{}},
            "errors": {{"nvmlGpmMetricsGet": "NO_PERMISSION"}}}},
            {{"uuid": "{UUID1}", "name": "H2", "memory_total": 1, "gpm": {{}}}}]}}"#
    );
    let _s = scenario("gpm-raw", &json);
    let nvml = init().expect("init");
    let lib = raw_lib();
    // SAFETY: the prototypes are those of nvml.h.
    let (support, alloc, free, get, metrics_get) = unsafe {
        (
            sym::<unsafe extern "C" fn(Handle, *mut Support) -> c_uint>(
                &lib,
                "nvmlGpmQueryDeviceSupport",
            ),
            sym::<unsafe extern "C" fn(*mut Handle) -> c_uint>(&lib, "nvmlGpmSampleAlloc"),
            sym::<unsafe extern "C" fn(Handle) -> c_uint>(&lib, "nvmlGpmSampleFree"),
            sym::<unsafe extern "C" fn(Handle, Handle) -> c_uint>(&lib, "nvmlGpmSampleGet"),
            sym::<unsafe extern "C" fn(*mut MetricsGet) -> c_uint>(&lib, "nvmlGpmMetricsGet"),
        )
    };
    // SAFETY: the device handles stay valid while `nvml` is initialized.
    let (d0, d1): (Handle, Handle) = unsafe {
        (
            nvml.device_by_index(0).unwrap().handle().cast(),
            nvml.device_by_index(1).unwrap().handle().cast(),
        )
    };
    // SAFETY: every pointer passed is null or points to a live local of the C type.
    unsafe {
        let mut s = Support {
            version: 2,
            supported: 9,
        };
        assert_eq!(support(d0, &mut s), 25, "ARGUMENT_VERSION_MISMATCH");
        s.version = 1;
        assert_eq!(support(d0, &mut s), 0);
        assert_eq!(s.supported, 1);
        assert_eq!(support(d0, null_mut()), 2);

        let (mut a, mut b, mut c) = (null_mut(), null_mut(), null_mut());
        assert_eq!(alloc(null_mut()), 2);
        assert_eq!(alloc(&mut a) | alloc(&mut b) | alloc(&mut c), 0);
        let mut req = MetricsGet {
            version: 1,
            count: 1,
            sample1: a,
            sample2: b,
            metrics: std::array::from_fn(|_| Metric {
                id: 0,
                ret: 99,
                value: -1.0,
                names: [null_mut(); 3],
            }),
        };
        req.metrics[0].id = 2;
        assert_eq!(metrics_get(&mut req), 2, "samples not filled yet");
        let mut bogus = 0u64;
        let foreign: Handle = (&raw mut bogus).cast::<c_void>();
        assert_eq!(get(d1, foreign), 2);
        assert_eq!(get(d1, a) | get(d0, b) | get(d1, c), 0);
        assert_eq!(metrics_get(&mut req), 2, "samples of two devices");
        req.sample1 = c;
        req.sample2 = a;
        assert_eq!(metrics_get(&mut req), 2, "sample1 taken after sample2");
        req.sample1 = a;
        req.sample2 = c;
        req.version = 2;
        assert_eq!(metrics_get(&mut req), 25);
        req.version = 1;
        req.count = 211;
        assert_eq!(
            metrics_get(&mut req),
            2,
            "more metrics than the array holds"
        );
        req.count = 1;
        assert_eq!(metrics_get(&mut req), 0);
        let m = &req.metrics[0];
        assert_eq!((m.id, m.ret, m.value), (2, 0, 0.0));
        assert!(m.names.iter().all(|n| n.is_null()));
        assert_eq!(
            req.metrics[1].ret, 99,
            "only numMetrics entries are written"
        );
        req.sample1 = b;
        req.sample2 = b;
        assert_eq!(metrics_get(&mut req), 2);
        // Injected errors follow the samples' device.
        let (mut e, mut f) = (null_mut(), null_mut());
        assert_eq!(alloc(&mut e) | alloc(&mut f), 0);
        assert_eq!(get(d0, e) | get(d0, f), 0);
        req.sample1 = e;
        req.sample2 = f;
        assert_eq!(metrics_get(&mut req), 4, "NO_PERMISSION");

        assert_eq!(free(foreign), 2);
        assert_eq!(free(a), 0);
        assert_eq!(free(a), 2, "freed already");
        req.sample1 = a;
        assert_eq!(metrics_get(&mut req), 2, "a freed sample");
        // b, c, e and f are left for the shutdown to free.
    }
    nvml.shutdown().unwrap();
}
