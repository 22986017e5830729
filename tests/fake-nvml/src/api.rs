//! The exported NVML C functions.
#![allow(non_camel_case_types, non_snake_case)]

use crate::state::{self, Session, Stall, Target};
use crate::{
    ARGUMENT_VERSION_MISMATCH, CODES, DRIVER_NOT_LOADED, GPU_IS_LOST, INSUFFICIENT_SIZE,
    INVALID_ARGUMENT, NO_INSTANCE, NO_PERMISSION, NOT_FOUND, NOT_SUPPORTED, Ret, SUCCESS,
    UNINITIALIZED, UNKNOWN, scenario,
};
use std::ffi::{CStr, c_char, c_uint, c_ulonglong};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};

mod events;
mod gpm;
mod health;
mod mig;

/// Opaque device type; `nvmlDevice_t` is a pointer to it.
#[repr(C)]
pub struct nvmlDevice_st {
    _opaque: [u8; 0],
}
pub type nvmlDevice_t = *mut nvmlDevice_st;

#[repr(C)]
pub struct nvmlMemory_t {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_t` (= `nvmlProcessInfo_v2_t`), used by the `_v3` process queries.
#[repr(C)]
pub struct nvmlProcessInfo_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

#[repr(C)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: c_ulonglong,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

const _: () = assert!(size_of::<nvmlMemory_t>() == 24);
const _: () = assert!(size_of::<nvmlMemory_v2_t>() == 40);
const _: () = assert!(size_of::<nvmlProcessInfo_t>() == 24);
const _: () = assert!(size_of::<nvmlProcessUtilizationSample_t>() == 32);

const MEMORY_V2_VERSION: c_uint = (size_of::<nvmlMemory_v2_t>() | (2 << 24)) as c_uint;
const VALUE_NOT_AVAILABLE: c_ulonglong = c_ulonglong::MAX;

type Res = Result<(), Ret>;

/// Appends `name` to the `FAKE_NVML_LOG` file, if set. Errors are ignored.
fn log_call(name: &str) {
    if let Some(path) = std::env::var_os("FAKE_NVML_LOG").filter(|p| !p.is_empty()) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut file) = file {
            let _ = file.write_all(format!("{name}\n").as_bytes());
        }
    }
}

/// Waits as the scenario's `delays_ms` and `hang` say for call `name` (no lock held meanwhile).
fn stall(name: &str) {
    let stall = state::lock().as_ref().map_or(Stall::No, |s| s.stall(name));
    match stall {
        Stall::No => {}
        Stall::For(d) => std::thread::sleep(d),
        Stall::Forever => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
    }
}

/// Runs an exported call: logs it, stalls it as the scenario says, converts the result, turns
/// panics into UNKNOWN.
fn ffi(name: &str, body: impl FnOnce() -> Res) -> Ret {
    call(name, true, body)
}

fn call(name: &str, stalls: bool, body: impl FnOnce() -> Res) -> Ret {
    catch_unwind(AssertUnwindSafe(|| {
        log_call(name);
        if stalls {
            stall(name);
        }
        body().err().unwrap_or(SUCCESS)
    }))
    .unwrap_or(UNKNOWN)
}

/// Runs an initialized-library call.
fn with_session(name: &str, body: impl FnOnce(&Session) -> Res) -> Ret {
    ffi(name, || body(state::lock().as_ref().ok_or(UNINITIALIZED)?))
}

/// Checks that `target`'s GPU (a MIG device's parent) is not lost and that `target` has no
/// error injected for `name`.
fn target_ok(session: &Session, target: Target, name: &str) -> Res {
    if session.is_lost(target.device()) {
        return Err(GPU_IS_LOST);
    }
    match session.errors(target).get(name) {
        Some(&code) if code != SUCCESS => Err(code),
        _ => Ok(()),
    }
}

/// Runs a call that answers on GPU and MIG device handles alike: validates the handle, lost
/// state and injections.
fn with_any(name: &str, handle: nvmlDevice_t, body: impl FnOnce(&Session, Target) -> Res) -> Ret {
    with_session(name, |session| {
        let target = session
            .target(handle.cast_const().cast())
            .ok_or(INVALID_ARGUMENT)?;
        target_ok(session, target, name)?;
        body(session, target)
    })
}

/// Runs a call on a GPU handle: as `with_any`, but a MIG device gets `NOT_SUPPORTED`, as real
/// NVML answers most device queries on a MIG device.
fn with_device(name: &str, handle: nvmlDevice_t, body: impl FnOnce(&Session, u32) -> Res) -> Ret {
    with_any(name, handle, |session, target| match target {
        Target::Gpu(index) => body(session, index),
        Target::Mig(..) => Err(NOT_SUPPORTED),
    })
}

/// Opens the device's `device_file` when its handle is first handed out; a file that cannot be
/// opened gives `NO_PERMISSION`, as a device node the caller may not open does.
fn open_device_file(session: &Session, index: u32) -> Res {
    session.open_device_file(index).map_err(|why| {
        let _ = writeln!(std::io::stderr(), "fake-nvml: {why}");
        NO_PERMISSION
    })
}

/// Writes `value` through a caller-provided output pointer.
fn put<T>(ptr: *mut T, value: T) -> Res {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: NVML's contract: a non-null output pointer points to a valid, aligned,
    // writable `T` owned by the caller.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Reads a caller-provided in/out count.
fn get_count(ptr: *mut c_uint) -> Result<c_uint, Ret> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and NVML's contract says it points to a valid `unsigned int`.
    Ok(unsafe { ptr.read() })
}

/// Copies `s` and its NUL into a caller buffer of `length` bytes.
fn put_str(buf: *mut c_char, length: c_uint, s: &CStr) -> Res {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = s.to_bytes_with_nul();
    if bytes.len() > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` is non-null and, per NVML's contract, valid for `length` bytes,
    // which we checked is at least `bytes.len()`; the regions cannot overlap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, bytes.len()) };
    Ok(())
}

/// Fills `items` into a caller array using NVML's `*count` protocol.
fn put_array<T>(count: *mut c_uint, array: *mut T, items: Vec<T>) -> Res {
    let capacity = get_count(count)?;
    let needed = c_uint::try_from(items.len()).map_err(|_| UNKNOWN)?;
    if needed > 0 && (array.is_null() || capacity < needed) {
        put(count, needed)?;
        return Err(INSUFFICIENT_SIZE);
    }
    for (i, item) in items.into_iter().enumerate() {
        // SAFETY: `array` is non-null (needed > 0) and, per NVML's contract, valid for
        // `capacity >= needed > i` elements of `T`.
        unsafe { array.add(i).write(item) };
    }
    put(count, needed)
}

fn init(name: &str) -> Ret {
    let r = call(name, false, || {
        let mut guard = state::lock();
        if let Some(session) = guard.as_mut() {
            session.refcount += 1;
            return Ok(());
        }
        let scenario = scenario::load().map_err(|why| {
            let _ = writeln!(std::io::stderr(), "fake-nvml: nvmlInit failed: {why}");
            UNKNOWN
        })?;
        if let Some(code) = scenario.init_error {
            return Err(code);
        }
        let session = Session::new(scenario).map_err(|why| {
            let _ = writeln!(std::io::stderr(), "fake-nvml: nvmlInit failed: {why}");
            DRIVER_NOT_LOADED
        })?;
        *guard = Some(session);
        Ok(())
    });
    // The session (and its `hang`/`delays_ms`) exists only once init succeeded: stall after.
    if r == SUCCESS {
        let _ = catch_unwind(|| stall(name));
    }
    r
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> Ret {
    init("nvmlInit_v2")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    init("nvmlInitWithFlags")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> Ret {
    ffi("nvmlShutdown", || {
        let mut guard = state::lock();
        let session = guard.as_mut().ok_or(UNINITIALIZED)?;
        session.refcount -= 1;
        if session.refcount == 0 {
            *guard = None;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    let mut text = c"Unknown Error".as_ptr();
    ffi("nvmlErrorString", || {
        if let Some((_, _, s)) = CODES.iter().find(|(code, _, _)| *code == result) {
            text = s.as_ptr();
        }
        Ok(())
    });
    text
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> Ret {
    with_session("nvmlSystemGetDriverVersion", |s| {
        put_str(version, length, &s.scenario.driver_version)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(deviceCount: *mut c_uint) -> Ret {
    with_session("nvmlDeviceGetCount_v2", |s| {
        put(deviceCount, s.devices.len() as c_uint)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> Ret {
    let name = "nvmlDeviceGetHandleByIndex_v2";
    with_session(name, |s| {
        if index as usize >= s.devices.len() || device.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        target_ok(s, Target::Gpu(index), name)?;
        open_device_file(s, index)?;
        put(device, s.handle(Target::Gpu(index)).cast_mut().cast())
    })
}

/// A MIG device's uuid gives that MIG device, after its parent's `device_file` is open.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> Ret {
    let name = "nvmlDeviceGetHandleByUUID";
    with_session(name, |s| {
        if uuid.is_null() || device.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null, and NVML's contract says it is a NUL-terminated string.
        let wanted = unsafe { CStr::from_ptr(uuid) };
        let target = (0..s.devices.len() as u32)
            .find_map(|i| {
                if s.spec(i).uuid.as_c_str() == wanted {
                    return Some(Target::Gpu(i));
                }
                let k = s
                    .instances(i)
                    .iter()
                    .position(|m| m.uuid.as_c_str() == wanted)?;
                Some(Target::Mig(i, k as u32))
            })
            .ok_or(NOT_FOUND)?;
        target_ok(s, target, name)?;
        open_device_file(s, target.device())?;
        put(device, s.handle(target).cast_mut().cast())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> Ret {
    with_any("nvmlDeviceGetUUID", device, |s, t| {
        let id = match t {
            Target::Gpu(i) => &s.spec(i).uuid,
            Target::Mig(i, k) => &s.instances(i)[k as usize].uuid,
        };
        put_str(uuid, length, id)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> Ret {
    with_any("nvmlDeviceGetName", device, |s, t| {
        let text = match t {
            Target::Gpu(i) => &s.spec(i).name,
            Target::Mig(i, k) => &s.instances(i)[k as usize].name,
        };
        put_str(name, length, text)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetIndex", device, |_, i| put(index, i))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minorNumber: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetMinorNumber", device, |s, i| {
        put(minorNumber, s.spec(i).minor)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> Ret {
    with_any("nvmlDeviceGetMemoryInfo", device, |s, t| {
        let (total, used, free) = s.memory(t);
        put(memory, nvmlMemory_t { total, free, used })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> Ret {
    with_any("nvmlDeviceGetMemoryInfo_v2", device, |s, t| {
        if memory.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null, and NVML's contract says it points to a valid struct whose
        // `version` field the caller has set.
        let version = unsafe { std::ptr::addr_of!((*memory).version).read() };
        if version != MEMORY_V2_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used, free) = s.memory(t);
        let reserved = 0;
        put(
            memory,
            nvmlMemory_v2_t {
                version,
                total,
                reserved,
                free,
                used,
            },
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> Ret {
    with_device("nvmlDeviceGetUtilizationRates", device, |s, i| {
        let (gpu, memory) = s.utilization(i);
        put(utilization, nvmlUtilization_t { gpu, memory })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    infoCount: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> Ret {
    with_any("nvmlDeviceGetComputeRunningProcesses_v3", device, |s, t| {
        let instances = s.instances(t.device());
        let items = s
            .matched_all(t.device())
            .into_iter()
            .filter(|m| match t {
                Target::Gpu(_) => true,
                Target::Mig(_, k) => m.instance == Some(k),
            })
            .map(|m| {
                let ids = m.instance.map(|k| &instances[k as usize]);
                nvmlProcessInfo_t {
                    pid: m.pid,
                    usedGpuMemory: m.used_memory.unwrap_or(VALUE_NOT_AVAILABLE),
                    gpuInstanceId: ids.map_or(NO_INSTANCE, |i| i.gpu_instance_id),
                    computeInstanceId: ids.map_or(NO_INSTANCE, |i| i.compute_instance_id),
                }
            })
            .collect();
        put_array(infoCount, infos, items)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    infoCount: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> Ret {
    with_any(
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        device,
        |_, _| put_array(infoCount, infos, Vec::new()),
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> Ret {
    with_device("nvmlDeviceGetTotalEnergyConsumption", device, |s, i| {
        put(energy, s.energy_mj(i))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetPowerUsage", device, |s, i| {
        put(power, s.spec(i).power_mw)
    })
}

/// NVML_TEMPERATURE_GPU, the only sensor NVML defines.
const TEMPERATURE_GPU: c_uint = 0;

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensorType: c_uint,
    temp: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetTemperature", device, |s, i| {
        if sensorType != TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        match s.spec(i).temperature_c {
            Some(c) => put(temp, c),
            None => Err(NOT_SUPPORTED),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    processSamplesCount: *mut c_uint,
    lastSeenTimeStamp: c_ulonglong,
) -> Ret {
    with_device("nvmlDeviceGetProcessUtilization", device, |s, i| {
        get_count(processSamplesCount)?;
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let matched = s.matched(i);
        if matched.is_empty() || now_us <= lastSeenTimeStamp {
            return Err(NOT_FOUND);
        }
        let (sm, mem) = s.utilization(i);
        // A process that does not compute has no share of the SMs.
        let items = matched
            .into_iter()
            .map(|m| nvmlProcessUtilizationSample_t {
                pid: m.pid,
                timeStamp: now_us,
                smUtil: if m.computes { sm } else { 0 },
                memUtil: if m.computes { mem } else { 0 },
                encUtil: 0,
                decUtil: 0,
            })
            .collect();
        put_array(processSamplesCount, utilization, items)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    currentMode: *mut c_uint,
    pendingMode: *mut c_uint,
) -> Ret {
    let name = "nvmlDeviceGetMigMode";
    with_device(name, device, |s, i| {
        let spec = s.spec(i);
        if spec.mig.is_none() && spec.errors.get(name) != Some(&SUCCESS) {
            return Err(NOT_SUPPORTED);
        }
        if pendingMode.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let mode = c_uint::from(spec.mig.is_some());
        put(currentMode, mode)?;
        put(pendingMode, mode)
    })
}
