//! Event sets: critical Xid errors of the devices registered on a set.

use super::{Res, ffi, nvmlDevice_t, put, with_device, with_session};
use crate::live::{Event, EventSet, XID_CRITICAL_EVENT};
use crate::state::Target;
use crate::state::{self, Session};
use crate::{
    GPU_IS_LOST, INVALID_ARGUMENT, NO_INSTANCE, NOT_SUPPORTED, Ret, SUCCESS, TIMEOUT, UNINITIALIZED,
};
use std::ffi::{c_uint, c_ulonglong};
use std::ptr::addr_of_mut;
use std::time::{Duration, Instant};

/// Opaque event set type; `nvmlEventSet_t` is a pointer to it.
#[repr(C)]
pub struct nvmlEventSet_st {
    _opaque: [u8; 0],
}
pub type nvmlEventSet_t = *mut nvmlEventSet_st;

/// `nvmlEventData_t` as `nvmlEventSetWait_v2` fills it. `nvmlEventSetWait` (v1) fills only
/// the first three fields, the whole struct before MIG.
#[repr(C)]
pub struct nvmlEventData_t {
    pub device: nvmlDevice_t,
    pub eventType: c_ulonglong,
    pub eventData: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

const _: () = assert!(size_of::<nvmlEventData_t>() == 32);

/// How often a waiting call looks at its set again (no lock is held in between).
const POLL: Duration = Duration::from_millis(10);

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> Ret {
    with_session("nvmlEventSetCreate", |s| {
        if set.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let created = s.live.borrow_mut().sets.add();
        put(set, created.cast())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> Ret {
    with_session("nvmlEventSetFree", |s| {
        let freed = s.live.borrow_mut().sets.remove(set.cast_const().cast());
        if freed { Ok(()) } else { Err(INVALID_ARGUMENT) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    eventTypes: *mut c_ulonglong,
) -> Ret {
    with_device("nvmlDeviceGetSupportedEventTypes", device, |_, _| {
        put(eventTypes, XID_CRITICAL_EVENT)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    eventTypes: c_ulonglong,
    set: nvmlEventSet_t,
) -> Ret {
    with_device("nvmlDeviceRegisterEvents", device, |s, i| {
        let handle: *const EventSet = set.cast_const().cast();
        if s.live.borrow_mut().sets.get_mut(handle).is_none() {
            return Err(INVALID_ARGUMENT);
        }
        if eventTypes & !XID_CRITICAL_EVENT != 0 {
            return Err(NOT_SUPPORTED);
        }
        s.live.borrow_mut().register(handle, i, eventTypes);
        // A faulty process already running faults now, so a set registered at the start of
        // a tracker sees it.
        s.matched(i);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeoutms: c_uint,
) -> Ret {
    wait("nvmlEventSetWait_v2", set, data, timeoutms, true)
}

/// The pre-MIG wait (still loaded by `nvml-wrapper`): fills `device`, `eventType` and
/// `eventData` only.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetWait(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeoutms: c_uint,
) -> Ret {
    wait("nvmlEventSetWait", set, data, timeoutms, false)
}

/// Waits up to `timeout_ms` for the next event of `set`, polling without holding the lock.
fn wait(
    name: &str,
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
    v2: bool,
) -> Ret {
    ffi(name, || {
        if data.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
        loop {
            let next = {
                let guard = state::lock();
                let session = guard.as_ref().ok_or(UNINITIALIZED)?;
                next_event(session, set.cast_const().cast(), name)?.map(|e| {
                    (
                        session.handle(Target::Gpu(e.device)).cast_mut().cast::<_>(),
                        e,
                    )
                })
            };
            if let Some((device, event)) = next {
                return write_event(data, device, event, v2);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TIMEOUT);
            }
            std::thread::sleep(left.min(POLL));
        }
    })
}

/// The next event of `set` after its devices have looked for faults; GPU_IS_LOST when there is
/// none and one of its devices is lost.
fn next_event(s: &Session, set: *const EventSet, name: &str) -> Result<Option<Event>, Ret> {
    let devices: Vec<u32> = {
        let mut live = s.live.borrow_mut();
        live.sets
            .get_mut(set)
            .ok_or(INVALID_ARGUMENT)?
            .devices()
            .collect()
    };
    let mut lost = false;
    for &device in &devices {
        if s.is_lost(device) {
            lost = true;
            continue;
        }
        match s.spec(device).errors.get(name) {
            Some(&code) if code != SUCCESS => return Err(code),
            _ => {}
        }
        s.matched(device);
    }
    let event = s
        .live
        .borrow_mut()
        .sets
        .get_mut(set)
        .ok_or(INVALID_ARGUMENT)?
        .pop();
    match event {
        None if lost => Err(GPU_IS_LOST),
        event => Ok(event),
    }
}

fn write_event(data: *mut nvmlEventData_t, device: nvmlDevice_t, event: Event, v2: bool) -> Res {
    if v2 {
        return put(
            data,
            nvmlEventData_t {
                device,
                eventType: XID_CRITICAL_EVENT,
                eventData: event.xid,
                gpuInstanceId: NO_INSTANCE,
                computeInstanceId: NO_INSTANCE,
            },
        );
    }
    // SAFETY: `data` is non-null (checked by the caller) and, per NVML's contract, points to
    // a writable event data struct of at least the three pre-MIG fields.
    unsafe {
        addr_of_mut!((*data).device).write(device);
        addr_of_mut!((*data).eventType).write(XID_CRITICAL_EVENT);
        addr_of_mut!((*data).eventData).write(event.xid);
    }
    Ok(())
}
