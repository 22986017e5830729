//! A **fake `libnvidia-ml.so.1`** (NVIDIA Management Library) for tests.
//!
//! This crate builds a `cdylib` (`libnvidia_ml.so`, SONAME `libnvidia-ml.so.1`) that
//! exports the subset of the NVML C API called by `nvml-wrapper` 0.13, so that the
//! real NVML code path (`nvml-wrapper` → `dlopen` → this library) can be exercised
//! on machines without a GPU. It follows real NVML's return-code rules
//! (reference-counted init, `UNINITIALIZED`, `INVALID_ARGUMENT` for null pointers
//! and foreign handles, `INSUFFICIENT_SIZE` count protocols, versioned structs, ...).
//!
//! **For tests only. It must never be installed into a plugin directory, a library
//! path, or anywhere the dynamic loader could pick it up instead of the real NVML.**
//!
//! # Scenario file
//!
//! At `nvmlInit_v2` (when the init reference count goes from 0 to 1) the library
//! reads the JSON file named by the environment variable `FAKE_NVML_SCENARIO`.
//! If the variable is unset (or empty) the fake behaves like a machine with 0 GPUs
//! and init succeeds. If the file cannot be read or is invalid, init returns
//! `NVML_ERROR_UNKNOWN` and prints one line to stderr saying why. Unknown fields
//! are rejected. All fields except `uuid`, `name` and `memory_total` are optional.
//!
//! ```json
//! {
//!   "init_error": null,                // e.g. "DRIVER_NOT_LOADED": nvmlInit_v2 returns that code
//!   "driver_version": "550.54.15",     // default "550.54.15-fake"
//!   "devices": [
//!     {
//!       "uuid": "GPU-11111111-2222-3333-4444-555555555555",
//!       "name": "Simulated GPU 80GB",
//!       "minor": 0,                    // default: the device index
//!       "memory_total": 85899345920,   // bytes
//!       "memory_used_base": 536870912, // bytes used by others/the driver, default 0
//!       "utilization": [               // step function of ms since init, default 0/0
//!         {"at_ms": 0, "gpu": 40, "memory": 10},
//!         {"at_ms": 500, "gpu": 90, "memory": 30}
//!       ],
//!       "power_mw": 250000,            // nvmlDeviceGetPowerUsage, default 0
//!       "energy_base_mj": 1000000,     // energy (mJ) = energy_base_mj + power_mw * elapsed_ms / 1000
//!       "processes": [
//!         {"cmdline_contains": "gpu-hold-marker", "used_memory": 1073741824},
//!         {"pid": 4242, "used_memory": null}
//!       ],
//!       "lost_after_ms": null,         // after this many ms since init: GPU_IS_LOST everywhere
//!       "errors": {"nvmlDeviceGetUtilizationRates": "NOT_SUPPORTED"}
//!     }
//!   ]
//! }
//! ```
//!
//! * Times ("since init") are measured from the init that loaded the scenario
//!   (reference count 0 → 1).
//! * Error names are the NVML names without the `NVML_ERROR_` prefix (the prefix is
//!   accepted too), e.g. `NOT_SUPPORTED`, `GPU_IS_LOST`, `DRIVER_NOT_LOADED`, `UNKNOWN`.
//! * `errors` maps an exported device function name (including
//!   `nvmlDeviceGetHandleByIndex_v2` / `nvmlDeviceGetHandleByUUID`) to the error it
//!   returns for this device. `nvmlDeviceGetMigMode` returns `NOT_SUPPORTED` unless
//!   injected; injecting `"SUCCESS"` for it reports MIG disabled (current = pending = 0).
//! * Processes are matched live at each call: a `cmdline_contains` entry matches every
//!   process (except the caller itself) whose `/proc/<pid>/cmdline`, NUL separators
//!   turned into spaces, contains the string; a `pid` entry matches if `/proc/<pid>`
//!   exists. `used_memory: null` (or absent) is reported as `NVML_VALUE_NOT_AVAILABLE`.
//!   Device memory used = `memory_used_base` + the sum of the matched processes'
//!   known `used_memory`; free = total − used (saturating).
//! * `nvmlDeviceGetProcessUtilization` reports one sample per matched process with
//!   `smUtil`/`memUtil` equal to the device's current utilization, timestamped with
//!   the current time in µs since the Unix epoch; `NOT_FOUND` when there is none newer
//!   than `lastSeenTimeStamp`. Graphics processes are always empty.
//! * A lost device returns `GPU_IS_LOST` from every device call, handle lookups included.
//!
//! If the environment variable `FAKE_NVML_LOG` names a file, one line with the
//! function name is appended to it for every exported call.

mod api;
mod scenario;
mod state;

/// `nvmlReturn_t`.
pub(crate) type Ret = std::os::raw::c_uint;

pub(crate) const SUCCESS: Ret = 0;
pub(crate) const UNINITIALIZED: Ret = 1;
pub(crate) const INVALID_ARGUMENT: Ret = 2;
pub(crate) const NOT_SUPPORTED: Ret = 3;
pub(crate) const NOT_FOUND: Ret = 6;
pub(crate) const INSUFFICIENT_SIZE: Ret = 7;
pub(crate) const GPU_IS_LOST: Ret = 15;
pub(crate) const ARGUMENT_VERSION_MISMATCH: Ret = 25;
pub(crate) const UNKNOWN: Ret = 999;

/// Every NVML return code: value, name (without `NVML_ERROR_`), `nvmlErrorString` text.
pub(crate) const CODES: &[(Ret, &str, &std::ffi::CStr)] = &[
    (0, "SUCCESS", c"Success"),
    (1, "UNINITIALIZED", c"Uninitialized"),
    (2, "INVALID_ARGUMENT", c"Invalid Argument"),
    (3, "NOT_SUPPORTED", c"Not Supported"),
    (4, "NO_PERMISSION", c"Insufficient Permissions"),
    (5, "ALREADY_INITIALIZED", c"Already Initialized"),
    (6, "NOT_FOUND", c"Not Found"),
    (7, "INSUFFICIENT_SIZE", c"Insufficient Size"),
    (8, "INSUFFICIENT_POWER", c"Insufficient External Power"),
    (9, "DRIVER_NOT_LOADED", c"Driver Not Loaded"),
    (10, "TIMEOUT", c"Timeout"),
    (11, "IRQ_ISSUE", c"Interrupt Request Issue"),
    (12, "LIBRARY_NOT_FOUND", c"NVML Shared Library Not Found"),
    (13, "FUNCTION_NOT_FOUND", c"Function Not Found"),
    (14, "CORRUPTED_INFOROM", c"Corrupted infoROM"),
    (15, "GPU_IS_LOST", c"GPU is lost"),
    (16, "RESET_REQUIRED", c"GPU requires restart"),
    (
        17,
        "OPERATING_SYSTEM",
        c"The operating system has blocked the request.",
    ),
    (
        18,
        "LIB_RM_VERSION_MISMATCH",
        c"RM has detected an NVML/RM version mismatch.",
    ),
    (19, "IN_USE", c"In use by another client"),
    (20, "MEMORY", c"Insufficient Memory"),
    (21, "NO_DATA", c"No data"),
    (
        22,
        "VGPU_ECC_NOT_SUPPORTED",
        c"The requested vgpu operation is not available on target device, because ECC is enabled",
    ),
    (
        23,
        "INSUFFICIENT_RESOURCES",
        c"Insufficient resources for request",
    ),
    (24, "FREQ_NOT_SUPPORTED", c"Frequency not supported"),
    (
        25,
        "ARGUMENT_VERSION_MISMATCH",
        c"Argument version mismatch",
    ),
    (26, "DEPRECATED", c"Deprecated"),
    (27, "NOT_READY", c"Not ready"),
    (28, "GPU_NOT_FOUND", c"GPU not found"),
    (29, "INVALID_STATE", c"Invalid state"),
    (30, "RESET_TYPE_NOT_SUPPORTED", c"Reset type not supported"),
    (999, "UNKNOWN", c"Unknown Error"),
];
