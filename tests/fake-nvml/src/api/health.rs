//! Clock throttle (clock event) reasons and ECC error counters.

use super::{Res, nvmlDevice_t, put, with_device};
use crate::{INVALID_ARGUMENT, NOT_SUPPORTED, Ret};
use std::ffi::{c_uint, c_ulonglong};

/// Every reason bit NVML defines (`GpuIdle` .. `DisplayClockSetting`), as a recent GPU reports.
const SUPPORTED_REASONS: c_ulonglong = 0x1FF;

/// `nvmlMemoryErrorType_t`.
const MEMORY_ERROR_CORRECTED: c_uint = 0;
const MEMORY_ERROR_UNCORRECTED: c_uint = 1;
/// `nvmlEccCounterType_t`.
const VOLATILE_ECC: c_uint = 0;
const AGGREGATE_ECC: c_uint = 1;

fn current_reasons(name: &str, device: nvmlDevice_t, reasons: *mut c_ulonglong) -> Ret {
    with_device(name, device, |s, i| {
        if reasons.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        put(reasons, s.throttle_reasons(i))
    })
}

fn supported_reasons(name: &str, device: nvmlDevice_t, reasons: *mut c_ulonglong) -> Ret {
    with_device(name, device, |_, _| put(reasons, SUPPORTED_REASONS))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    clocksThrottleReasons: *mut c_ulonglong,
) -> Ret {
    current_reasons(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        device,
        clocksThrottleReasons,
    )
}

/// The newer name of `nvmlDeviceGetCurrentClocksThrottleReasons` (NVML 12.2): same answer.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    clocksEventReasons: *mut c_ulonglong,
) -> Ret {
    current_reasons(
        "nvmlDeviceGetCurrentClocksEventReasons",
        device,
        clocksEventReasons,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedClocksThrottleReasons(
    device: nvmlDevice_t,
    supportedClocksThrottleReasons: *mut c_ulonglong,
) -> Ret {
    supported_reasons(
        "nvmlDeviceGetSupportedClocksThrottleReasons",
        device,
        supportedClocksThrottleReasons,
    )
}

/// The newer name of `nvmlDeviceGetSupportedClocksThrottleReasons`: same answer.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedClocksEventReasons(
    device: nvmlDevice_t,
    supportedClocksEventReasons: *mut c_ulonglong,
) -> Ret {
    supported_reasons(
        "nvmlDeviceGetSupportedClocksEventReasons",
        device,
        supportedClocksEventReasons,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    errorType: c_uint,
    counterType: c_uint,
    eccCounts: *mut c_ulonglong,
) -> Ret {
    with_device("nvmlDeviceGetTotalEccErrors", device, |s, i| -> Res {
        let known_error = matches!(errorType, MEMORY_ERROR_CORRECTED | MEMORY_ERROR_UNCORRECTED);
        let known_counter = matches!(counterType, VOLATILE_ECC | AGGREGATE_ECC);
        if !known_error || !known_counter || eccCounts.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // A fault raised by a process of the device counts before the answer.
        s.matched(i);
        let (volatile, aggregate) = s.live.borrow().ecc(i).ok_or(NOT_SUPPORTED)?;
        let counts = if counterType == VOLATILE_ECC {
            volatile
        } else {
            aggregate
        };
        let count = if errorType == MEMORY_ERROR_CORRECTED {
            counts.corrected
        } else {
            counts.uncorrected
        };
        put(eccCounts, count)
    })
}
