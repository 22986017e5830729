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
//! reads its scenario: the file `fake-nvml-scenario.json` in the directory of the loaded
//! library when there is one (so a test can give each copy of the library a scenario of its
//! own without touching the environment), else the JSON file named by the environment
//! variable `FAKE_NVML_SCENARIO`. If neither is there the fake behaves like a machine with
//! 0 GPUs and init succeeds. If the file cannot be read or is invalid, init returns
//! `NVML_ERROR_UNKNOWN` and prints one line to stderr saying why. Unknown fields
//! are rejected. All fields except `uuid`, `name` and `memory_total` (and an instance's
//! `uuid`, `profile`, ids and `memory_total`) are optional.
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
//!       "temperature_c": 41,           // nvmlDeviceGetTemperature (NVML_TEMPERATURE_GPU);
//!                                      // absent: NOT_SUPPORTED, a device without the sensor
//!       "processes": [
//!         {"cmdline_contains": "gpu-hold-marker", "used_memory": 1073741824},
//!         {"pid": 4242, "used_memory": null},
//!         {"cmdline_contains": "python", "environ_contains": "SLURM_JOB_ID=7"}
//!       ],
//!       "lost_after_ms": null,         // after this many ms since init: GPU_IS_LOST everywhere
//!       "errors": {"nvmlDeviceGetUtilizationRates": "NOT_SUPPORTED"},
//!       "device_file": "/tmp/t/nvidia0", // opened when the handle is first handed out
//!       "gpm": {"sm_active": 55, "sm_occupancy": 30,   // GPM metrics (percent, 0..=100, each
//!               "tensor_active": 20, "dram_bandwidth": 15}, // default 0); absent: no GPM
//!       "ecc": {"corrected": 0, "uncorrected": 0},     // ECC counts at init; absent: no ECC
//!       "fault_throttle_ms": 2000,     // how long a fault throttles the clocks (default 2000)
//!       "mig": {                       // present: the device is in MIG mode
//!         "max_instances": 7,          // nvmlDeviceGetMaxMigDeviceCount, default 7
//!         "instances": [{              // the MIG devices, in handle index order
//!           "uuid": "MIG-aaaaaaaa-1111-2222-3333-444444444444",
//!           "profile": "1g.10gb",      // name: "<device name> MIG <profile>"
//!           "gpu_instance_id": 1,      // unique on the device (one compute instance per GI)
//!           "compute_instance_id": 0,
//!           "memory_total": 10468982784,
//!           "memory_used_base": 0,     // default 0
//!           "gpm": {"sm_active": 40},  // as the device's; absent: no GPM sample of this GI
//!           "processes": [{"cmdline_contains": "x", "environ_contains": "MARK=1",
//!                          "used_memory": 1073741824}],
//!           "errors": {"nvmlDeviceGetMemoryInfo_v2": "UNKNOWN"}  // calls on this MIG device
//!         }],
//!         "reconfigure": {             // absent: the instances never change
//!           "at_ms": 1500,             // from this many ms since init on, the instances are
//!           "instances": [...]         // these (as above; may keep uuids of the first list)
//!         }
//!       }
//!     }
//!   ],
//!   "fault_marker": "SIMGPU_XID",      // a device's process with this in its command line
//!                                      // makes the device fault (default: none)
//!   "compute_marker": "SIMGPU_COMPUTE", // a device is busy only while a process of it with
//!                                      // this in its command line is on it (default: none)
//!   "control_file": "/tmp/t/nvidiactl", // opened at init
//!   "delays_ms": {"nvmlDeviceGetUtilizationRates": 30},   // every call sleeps this long
//!   "hang": {"call": "nvmlDeviceGetUtilizationRates",     // this call stops answering
//!            "after_ms": 1000,          // once this long since init has passed (default 0)
//!            "after_calls": 0,          // and it has been called this many times before
//!            "for_ms": null}            // for this long; absent or null: for ever
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
//! * Processes are matched at each call against a scan of `/proc` at most 20 ms old (the calls
//!   of one sample share a scan: a scan per call slowed a loaded test machine's samplers into
//!   lengthening their interval), so a process that starts or ends is seen within 20 ms: a
//!   `cmdline_contains` entry matches every
//!   process (except the caller itself) whose `/proc/<pid>/cmdline`, NUL separators
//!   turned into spaces, contains the string; a `pid` entry matches if `/proc/<pid>`
//!   exists. An entry with `environ_contains` matches only those of these processes with the
//!   string in one of the NUL-separated entries of `/proc/<pid>/environ` (unreadable: no
//!   match); environments are read only for such entries, once per scan.
//!   `used_memory: null` (or absent) is reported as `NVML_VALUE_NOT_AVAILABLE`.
//!   Device memory used = `memory_used_base` + the sum of the matched processes'
//!   known `used_memory`; free = total − used (saturating).
//! * `nvmlDeviceGetProcessUtilization` reports one sample per matched process with
//!   `smUtil`/`memUtil` equal to the device's current utilization (0 for a process that does
//!   not compute, see `compute_marker`), timestamped with
//!   the current time in µs since the Unix epoch; `NOT_FOUND` when there is none newer
//!   than `lastSeenTimeStamp`. Graphics processes are always empty.
//! * **Computing.** A matched process *computes* when its command line contains the
//!   scenario's `compute_marker`, or when the scenario has none. GPM (below) follows the
//!   processes that compute, and the throttle reason `GpuIdle` their absence. With a
//!   `compute_marker`, utilization does too, as on a real GPU, which reads 0 % with no kernel
//!   running however much memory its processes hold: `nvmlDeviceGetUtilizationRates` answers
//!   the `utilization` timeline while a process of the device (or of one of its MIG instances)
//!   computes, else 0/0 (such calls look at processes, see faults). Without one, utilization
//!   follows the timeline alone, processes or none.
//! * A lost device returns `GPU_IS_LOST` from every device call, handle lookups included.
//!
//! * Like the real driver library, the fake holds files open while initialized:
//!   `control_file` from init, each device's `device_file` from the first time a handle of
//!   that device is handed out (`nvmlDeviceGetHandleByIndex_v2` / `ByUUID`), all closed at
//!   the last `nvmlShutdown`. They are opened read-only and WITHOUT `O_CLOEXEC`, so a child
//!   forked and exec'd meanwhile inherits them unless the caller marks them close-on-exec.
//!   A `control_file` that cannot be opened fails init with `DRIVER_NOT_LOADED`; a
//!   `device_file` that cannot be opened fails the handle lookup with `NO_PERMISSION`.
//! * `delays_ms` and `hang` name any exported function. A delayed call sleeps before it
//!   answers; a hung one blocks its calling thread (holding no lock of the fake) for `for_ms`,
//!   or for ever. A hang or delay on `nvmlInit_v2` applies once the scenario is loaded.
//!
//! * **GPM** (`nvmlGpmQueryDeviceSupport`, `nvmlGpmSampleAlloc`/`Free`, `nvmlGpmSampleGet`,
//!   `nvmlGpmMetricsGet`): a device with `gpm` reports `isSupportedDevice` = 1, one without
//!   reports 0 (as a pre-Hopper GPU does) and `NOT_SUPPORTED` from `nvmlGpmSampleGet`. A
//!   sample stores the device and its metrics at that moment: the `gpm` values while at least
//!   one process matched by the device's `processes` entries computes ("the SMs follow the
//!   load"), else 0.
//!   `nvmlGpmMetricsGet` answers `NVML_GPM_METRIC_SM_UTIL` (2) from `sm_active`, `SM_OCCUPANCY`
//!   (3), `ANY_TENSOR_UTIL` (5) from `tensor_active` and `DRAM_BW_UTIL` (10) from
//!   `dram_bandwidth`, each the mean of the two samples' values; any other metric gets
//!   `NOT_SUPPORTED` in its own `nvmlReturn`; metric names are null. Both samples must be
//!   filled, of one device, the second taken after the first, else `INVALID_ARGUMENT`.
//!   `nvmlGpmMigSampleGet`: see MIG below. Sample handles are checked against the
//!   live ones (a foreign or freed handle is `INVALID_ARGUMENT`); samples left are freed at the
//!   last `nvmlShutdown`. Versioned structs with another version: `ARGUMENT_VERSION_MISMATCH`.
//! * **Faults.** A live process matched by one of a device's `processes` entries whose command
//!   line also contains `fault_marker` makes the device fault, once per pid. The device
//!   notices it at its next call that looks at processes (memory, process lists, process
//!   utilization, GPM samples, utilization with a `compute_marker`), throttle reasons, events
//!   (registration, waits) or ECC. The
//!   fault starts a throttle period of `fault_throttle_ms` and adds 1 to the volatile and
//!   aggregate corrected ECC counts when the device has `ecc`, and queues one critical Xid
//!   **79** event on every event set registered for the device's Xids. A set registered later
//!   gets that Xid too, at its registration, as long as the process still runs (so a tracker
//!   that registers at its start never misses it, whatever it asked before); the Xid of a
//!   process that has ended before a set was registered never reaches that set, as NVML
//!   delivers only events after registration.
//! * **Events**: only `nvmlEventTypeXidCriticalError` (0x8) is supported; registering any
//!   other bit is `NOT_SUPPORTED`. `nvmlEventSetWait_v2` delivers the oldest queued event of a
//!   device registered on the set (`eventData` = the Xid, instance ids `0xFFFFFFFF`), polling
//!   every 10 ms without holding the fake's lock, and answers `TIMEOUT` when none came within
//!   `timeoutms` (0: at once) or `GPU_IS_LOST` when none is queued and a registered device is
//!   lost. The pre-MIG `nvmlEventSetWait` fills only `device`, `eventType` and `eventData`.
//! * **Throttle reasons** (`nvmlDeviceGetCurrentClocksThrottleReasons`, and the same answer
//!   from `...ClocksEventReasons`): during a throttle period `HwSlowdown | SwThermalSlowdown
//!   | HwThermalSlowdown` (0x68), else `GpuIdle` (0x1) when no process of the device computes,
//!   else 0. The supported reasons are every defined bit (0x1FF).
//! * **ECC** (`nvmlDeviceGetTotalEccErrors`): `INVALID_ARGUMENT` for an unknown error or
//!   counter type or a null pointer, else `NOT_SUPPORTED` without `ecc`, else the count;
//!   volatile and aggregate counts both start at the scenario's values at init.
//! * `errors` may name every device function above and the MIG ones below. `nvmlGpmMetricsGet`
//!   takes the injection of its samples' device (of a MIG sample: its instance's),
//!   `nvmlEventSetWait_v2`/`nvmlEventSetWait` that of any device registered on the set;
//!   `nvmlGpmSampleAlloc`/`Free` and `nvmlEventSetCreate`/`Free` have no device, so only
//!   `delays_ms` and `hang` can name them.
//!
//! # MIG
//!
//! Codes marked *real* are what an H100 with driver 580 answered; the others are assumptions.
//! `nvmlDeviceGetCount_v2` and `nvmlDeviceGetHandleByIndex_v2` see the physical GPUs only;
//! `nvmlDeviceGetHandleByUUID` with an instance's uuid gives its MIG device handle (and opens the
//! parent's `device_file`). MIG handles are distinct addresses looked up like device handles
//! (a foreign pointer is `INVALID_ARGUMENT`). A lost parent makes its MIG devices
//! `GPU_IS_LOST` too; a MIG device's `errors` apply to calls on it and to the lookups of it
//! (`nvmlDeviceGetHandleByUUID`, `nvmlDeviceGetMigDeviceHandleByIndex`).
//!
//! A `reconfigure` stands for the GPU's MIG layout changed by an administrator (instances
//! destroyed and made) while NVML is initialized: from `at_ms` on, every call sees the new
//! instances at their indices, an old instance's uuid is `NOT_FOUND` unless the new list keeps
//! it, and an index the new list leaves empty is an empty slot. A MIG handle names the
//! instance at its index now (assumed); one whose index is empty now is `INVALID_ARGUMENT`.
//!
//! Answers (functions without their `nvml`/`nvmlDevice` prefix) on a GPU without `mig`, on a
//! GPU with `mig` (its "parent"), and on a MIG device:
//!
//! * `GetMigMode`: `NOT_SUPPORTED` (real; but see `errors` above) / current = pending = 1
//!   (real) / `NOT_SUPPORTED`.
//! * `IsMigDeviceHandle`: 0 (real) / 0 (real) / 1 (real).
//! * `GetMaxMigDeviceCount`: 0 / `max_instances` (real) / `NOT_SUPPORTED`.
//! * `GetMigDeviceHandleByIndex(i)`: `NOT_FOUND` (real for 0, assumed for any i) / below the
//!   instance count the handle, below `max_instances` `NOT_FOUND`, else `INVALID_ARGUMENT`
//!   (real) / `NOT_SUPPORTED`. A null output pointer: `INVALID_ARGUMENT`.
//! * `GetGpuInstanceId`, `GetComputeInstanceId`, `GetDeviceHandleFromMigDeviceHandle`:
//!   `INVALID_ARGUMENT` (real) / `INVALID_ARGUMENT` (real) / its ids, its parent (real).
//! * `GetUUID`, `GetName`: as ever / as ever / its uuid, "<parent name> MIG <profile>" (real).
//! * `GetMemoryInfo`, `_v2`: as ever / used = its own base and processes plus every instance's
//!   used / the instance's total, used = its base + its processes.
//! * `GetComputeRunningProcesses_v3`: ids `0xFFFFFFFF` / its own entries' (`0xFFFFFFFF`) and
//!   every instance's processes with that instance's ids / its own with its ids (real).
//!   `GetGraphicsRunningProcesses_v3`: always empty.
//! * `GetUtilizationRates`, `GetProcessUtilization`: as ever / as ever (own processes) /
//!   `NOT_SUPPORTED` (real).
//! * `GpmQueryDeviceSupport`: as ever / as ever / the parent's.
//! * `GpmSampleGet`: as ever / device-wide: `gpm` while a process of it or of an instance
//!   computes / `NOT_SUPPORTED`.
//! * `GpmMigSampleGet(gi)`: `INVALID_ARGUMENT` (real) / the `gpm` of the instance with that
//!   `gpu_instance_id` while one of its processes computes, else 0; `NOT_SUPPORTED` when it has
//!   no `gpm`, `NOT_FOUND` for an unknown gi / `NOT_SUPPORTED`.
//! * Every other device call (minor number, index, energy, power, clocks, ECC, events): as
//!   ever / as ever / `NOT_SUPPORTED`.
//!
//! `nvmlGpmMetricsGet` takes two samples of the same device and GPU instance (or both of the
//! device), else `INVALID_ARGUMENT`. Throttle reasons and faults of a GPU in MIG mode count its
//! instances' processes too (a fault is the parent's: throttling, ECC, its Xid events).
//!
//! If the environment variable `FAKE_NVML_LOG` names a file, one line with the
//! function name is appended to it for every exported call.

mod api;
mod live;
mod scenario;
mod state;

/// `nvmlReturn_t`.
pub(crate) type Ret = std::os::raw::c_uint;

pub(crate) const SUCCESS: Ret = 0;
pub(crate) const UNINITIALIZED: Ret = 1;
pub(crate) const INVALID_ARGUMENT: Ret = 2;
pub(crate) const NOT_SUPPORTED: Ret = 3;
pub(crate) const NO_PERMISSION: Ret = 4;
pub(crate) const NOT_FOUND: Ret = 6;
pub(crate) const INSUFFICIENT_SIZE: Ret = 7;
pub(crate) const DRIVER_NOT_LOADED: Ret = 9;
pub(crate) const TIMEOUT: Ret = 10;
pub(crate) const GPU_IS_LOST: Ret = 15;
pub(crate) const ARGUMENT_VERSION_MISMATCH: Ret = 25;
pub(crate) const UNKNOWN: Ret = 999;

/// `gpuInstanceId`/`computeInstanceId` of what concerns no MIG instance (`0xFFFFFFFF`).
pub(crate) const NO_INSTANCE: std::os::raw::c_uint = 0xFFFF_FFFF;

/// The file this library was loaded from (`dladdr` of one of its own functions).
pub(crate) fn own_path() -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: all-zero bytes are a valid `Dl_info` (null pointers) for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = own_path as fn() -> Option<std::path::PathBuf> as *const libc::c_void;
    // SAFETY: `addr` is an address inside this library and `info` is a valid, writable Dl_info.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr succeeded, so `dli_fname` points to the loader's NUL-terminated name of
    // the object, which lives as long as the object is loaded.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::ffi::OsStr::from_bytes(name.to_bytes()).into())
}

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
