//! MIG (Multi-Instance GPU): a device in MIG mode hands out a handle per MIG device, which
//! names its GPU and compute instance and leads back to its parent.

use super::{nvmlDevice_t, put, target_ok, with_any, with_device};
use crate::scenario::InstanceSpec;
use crate::state::Target;
use crate::{INVALID_ARGUMENT, NOT_FOUND, Ret};
use std::ffi::c_uint;

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    isMigDevice: *mut c_uint,
) -> Ret {
    with_any("nvmlDeviceIsMigDeviceHandle", device, |_, t| {
        put(isMigDevice, c_uint::from(matches!(t, Target::Mig(..))))
    })
}

/// 0 on a device not in MIG mode.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetMaxMigDeviceCount", device, |s, i| {
        put(count, s.spec(i).mig.as_ref().map_or(0, |m| m.max_instances))
    })
}

/// An index below the instance count gives that MIG device; one below `max_instances`, a slot
/// with no instance: `NOT_FOUND`; one beyond, `INVALID_ARGUMENT`. A device not in MIG mode has
/// no instance at any index (`NOT_FOUND`).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    migDevice: *mut nvmlDevice_t,
) -> Ret {
    let name = "nvmlDeviceGetMigDeviceHandleByIndex";
    with_device(name, device, |s, i| {
        if migDevice.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let mig = s.spec(i).mig.as_ref().ok_or(NOT_FOUND)?;
        if index as usize >= s.instances(i).len() {
            return Err(if index < mig.max_instances {
                NOT_FOUND
            } else {
                INVALID_ARGUMENT
            });
        }
        let target = Target::Mig(i, index);
        target_ok(s, target, name)?;
        put(migDevice, s.handle(target).cast_mut().cast())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    migDevice: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> Ret {
    let name = "nvmlDeviceGetDeviceHandleFromMigDeviceHandle";
    with_any(name, migDevice, |s, t| match t {
        Target::Mig(i, _) => put(device, s.handle(Target::Gpu(i)).cast_mut().cast()),
        Target::Gpu(_) => Err(INVALID_ARGUMENT),
    })
}

/// An id of a MIG device's instances; a GPU handle is `INVALID_ARGUMENT`.
fn instance_id(
    name: &str,
    device: nvmlDevice_t,
    id: *mut c_uint,
    pick: fn(&InstanceSpec) -> u32,
) -> Ret {
    with_any(name, device, |s, t| match t {
        Target::Mig(i, k) => put(id, pick(&s.instances(i)[k as usize])),
        Target::Gpu(_) => Err(INVALID_ARGUMENT),
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> Ret {
    instance_id("nvmlDeviceGetGpuInstanceId", device, id, |i| {
        i.gpu_instance_id
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> Ret {
    instance_id("nvmlDeviceGetComputeInstanceId", device, id, |i| {
        i.compute_instance_id
    })
}
