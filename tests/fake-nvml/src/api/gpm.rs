//! GPM (GPU Performance Monitoring, Hopper and newer): samples and the metrics between two.

use super::{nvmlDevice_t, put, target_ok, with_any, with_device, with_session};
use crate::live::{Sample, Taken};
use crate::scenario::Gpm;
use crate::state::{Session, Target};
use crate::{ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, Ret, SUCCESS};
use std::ffi::{c_char, c_uint};
use std::ptr::{addr_of, addr_of_mut, null_mut};

/// Opaque sample type; `nvmlGpmSample_t` is a pointer to it.
#[repr(C)]
pub struct nvmlGpmSample_st {
    _opaque: [u8; 0],
}
pub type nvmlGpmSample_t = *mut nvmlGpmSample_st;

#[repr(C)]
pub struct nvmlGpmSupport_t {
    pub version: c_uint,
    pub isSupportedDevice: c_uint,
}

/// The anonymous `metricInfo` struct of `nvmlGpmMetric_t`.
#[repr(C)]
pub struct nvmlGpmMetricInfo {
    pub shortName: *mut c_char,
    pub longName: *mut c_char,
    pub unit: *mut c_char,
}

#[repr(C)]
pub struct nvmlGpmMetric_t {
    pub metricId: c_uint,
    pub nvmlReturn: Ret,
    pub value: f64,
    pub metricInfo: nvmlGpmMetricInfo,
}

/// `NVML_GPM_METRIC_MAX`: the length of `nvmlGpmMetricsGet_t::metrics`.
const METRIC_MAX: usize = 210;

#[repr(C)]
pub struct nvmlGpmMetricsGet_t {
    pub version: c_uint,
    pub numMetrics: c_uint,
    pub sample1: nvmlGpmSample_t,
    pub sample2: nvmlGpmSample_t,
    pub metrics: [nvmlGpmMetric_t; METRIC_MAX],
}

const _: () = assert!(size_of::<nvmlGpmMetric_t>() == 40);
const _: () = assert!(size_of::<nvmlGpmMetricsGet_t>() == 24 + 40 * METRIC_MAX);

const GPM_SUPPORT_VERSION: c_uint = 1;
const GPM_METRICS_GET_VERSION: c_uint = 1;

/// `NVML_GPM_METRIC_*` ids the fake computes.
const METRIC_SM_UTIL: c_uint = 2;
const METRIC_SM_OCCUPANCY: c_uint = 3;
const METRIC_ANY_TENSOR_UTIL: c_uint = 5;
const METRIC_DRAM_BW_UTIL: c_uint = 10;

/// The value (percent) of metric `id` between two samples, `None` for a metric the fake lacks.
fn metric(id: c_uint, a: &Gpm, b: &Gpm) -> Option<f64> {
    let pick = |g: &Gpm| match id {
        METRIC_SM_UTIL => Some(g.sm_active),
        METRIC_SM_OCCUPANCY => Some(g.sm_occupancy),
        METRIC_ANY_TENSOR_UTIL => Some(g.tensor_active),
        METRIC_DRAM_BW_UTIL => Some(g.dram_bandwidth),
        _ => None,
    };
    Some((f64::from(pick(a)?) + f64::from(pick(b)?)) / 2.0)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    gpmSupport: *mut nvmlGpmSupport_t,
) -> Ret {
    // A MIG device answers for its parent.
    with_any("nvmlGpmQueryDeviceSupport", device, |s, t| {
        if gpmSupport.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null, and NVML's contract says it points to a valid struct whose
        // `version` field the caller has set.
        let version = unsafe { addr_of!((*gpmSupport).version).read() };
        if version != GPM_SUPPORT_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let isSupportedDevice = c_uint::from(s.spec(t.device()).gpm.is_some());
        put(
            gpmSupport,
            nvmlGpmSupport_t {
                version,
                isSupportedDevice,
            },
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmSampleAlloc(gpmSample: *mut nvmlGpmSample_t) -> Ret {
    with_session("nvmlGpmSampleAlloc", |s| {
        if gpmSample.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let sample = s.live.borrow_mut().samples.add();
        put(gpmSample, sample.cast())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmSampleFree(gpmSample: nvmlGpmSample_t) -> Ret {
    with_session("nvmlGpmSampleFree", |s| {
        let freed = s.live.borrow_mut().samples.remove(gpmSample.cast());
        if freed { Ok(()) } else { Err(INVALID_ARGUMENT) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmSampleGet(device: nvmlDevice_t, gpmSample: nvmlGpmSample_t) -> Ret {
    with_device("nvmlGpmSampleGet", device, |s, i| {
        let sample: *const Sample = gpmSample.cast_const().cast();
        if s.live.borrow().samples.get(sample).is_none() {
            return Err(INVALID_ARGUMENT);
        }
        let values = s.gpm(i).ok_or(NOT_SUPPORTED)?;
        s.live.borrow_mut().fill_sample(sample, i, None, values);
        Ok(())
    })
}

/// A sample of GPU instance `gpuInstanceId` of a device in MIG mode: the instance's `gpm`
/// while one of its processes runs. A device not in MIG mode: `INVALID_ARGUMENT`; an unknown
/// instance: `NOT_FOUND`; an instance without `gpm`: `NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpuInstanceId: c_uint,
    gpmSample: nvmlGpmSample_t,
) -> Ret {
    with_device("nvmlGpmMigSampleGet", device, |s, i| {
        let sample: *const Sample = gpmSample.cast_const().cast();
        if s.live.borrow().samples.get(sample).is_none() || s.spec(i).mig.is_none() {
            return Err(INVALID_ARGUMENT);
        }
        let k = instance_of(s, i, gpuInstanceId).ok_or(NOT_FOUND)?;
        let values = s.instance_gpm(i, k).ok_or(NOT_SUPPORTED)?;
        s.live
            .borrow_mut()
            .fill_sample(sample, i, Some(gpuInstanceId), values);
        Ok(())
    })
}

/// The index among device `index`'s instances of GPU instance `gi`.
fn instance_of(s: &Session, index: u32, gi: c_uint) -> Option<u32> {
    let k = s
        .instances(index)
        .iter()
        .position(|m| m.gpu_instance_id == gi)?;
    Some(k as u32)
}

/// What a sample was taken of: its device, or the MIG device of its GPU instance.
fn sampled(s: &Session, taken: &Taken) -> Target {
    match taken
        .gpu_instance
        .and_then(|gi| instance_of(s, taken.device, gi))
    {
        Some(k) => Target::Mig(taken.device, k),
        None => Target::Gpu(taken.device),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmMetricsGet(metricsGet: *mut nvmlGpmMetricsGet_t) -> Ret {
    let name = "nvmlGpmMetricsGet";
    with_session(name, |s| {
        if metricsGet.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null, and NVML's contract says it points to a valid struct whose
        // `version` field the caller has set.
        let version = unsafe { addr_of!((*metricsGet).version).read() };
        if version != GPM_METRICS_GET_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        // SAFETY: the version matches, so the caller's struct has this layout.
        let (count, sample1, sample2) = unsafe {
            (
                addr_of!((*metricsGet).numMetrics).read(),
                addr_of!((*metricsGet).sample1).read(),
                addr_of!((*metricsGet).sample2).read(),
            )
        };
        if count as usize > METRIC_MAX {
            return Err(INVALID_ARGUMENT);
        }
        let live = s.live.borrow();
        let taken = |h: nvmlGpmSample_t| live.samples.get(h.cast_const().cast())?.taken;
        let (Some(first), Some(second)) = (taken(sample1), taken(sample2)) else {
            return Err(INVALID_ARGUMENT);
        };
        let source = |t: &Taken| (t.device, t.gpu_instance);
        if source(&first) != source(&second) || second.seq <= first.seq {
            return Err(INVALID_ARGUMENT);
        }
        drop(live);
        target_ok(s, sampled(s, &first), name)?;
        for k in 0..count as usize {
            // SAFETY: `k < numMetrics <= METRIC_MAX`, the length of the caller's array; the
            // place is only named, never turned into a reference.
            let slot = unsafe { addr_of_mut!((*metricsGet).metrics[k]) };
            // SAFETY: `slot` points to element `k` of the caller's array, whose id it set.
            let id = unsafe { addr_of!((*slot).metricId).read() };
            let (nvmlReturn, value) = match metric(id, &first.values, &second.values) {
                Some(v) => (SUCCESS, v),
                None => (NOT_SUPPORTED, 0.0),
            };
            let metricInfo = nvmlGpmMetricInfo {
                shortName: null_mut(),
                longName: null_mut(),
                unit: null_mut(),
            };
            put(
                slot,
                nvmlGpmMetric_t {
                    metricId: id,
                    nvmlReturn,
                    value,
                    metricInfo,
                },
            )?;
        }
        Ok(())
    })
}
