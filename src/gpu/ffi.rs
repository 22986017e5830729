//! The NVML calls `nvml-wrapper` 0.13 loads but does not wrap: a MIG device's GPU instance and
//! compute instance ids, which Slurm uses (with the driver's `mig-minors` table) to name the
//! capability files of a MIG instance. The library's own symbol table is used, so a driver
//! without the call gives `FailedToLoadSymbol` like any other missing call.

use std::os::raw::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, Nvml};

/// `nvmlDeviceGetGpuInstanceId` and `nvmlDeviceGetComputeInstanceId` of a MIG device handle:
/// (GPU instance id, compute instance id). A GPU that is no MIG device gives `InvalidArg`.
pub fn mig_instance_ids(nvml: &Nvml, device: &Device) -> Result<(u32, u32), NvmlError> {
    let lib = nvml.lib();
    let gi_call = nvml_sym(lib.nvmlDeviceGetGpuInstanceId.as_ref())?;
    let ci_call = nvml_sym(lib.nvmlDeviceGetComputeInstanceId.as_ref())?;
    // SAFETY: the raw handle is only passed back to the library that made it, while `device`
    // (and so the library) is alive.
    let handle = unsafe { device.handle() };
    let mut gi: c_uint = 0;
    // SAFETY: `gi_call` is the loaded library's nvmlDeviceGetGpuInstanceId; `handle` is one of
    // its handles and `gi` a valid place for the one unsigned int it writes.
    nvml_try(unsafe { gi_call(handle, &mut gi) })?;
    let mut ci: c_uint = 0;
    // SAFETY: as above, for nvmlDeviceGetComputeInstanceId.
    nvml_try(unsafe { ci_call(handle, &mut ci) })?;
    Ok((gi, ci))
}
