//! Drives the fake `libnvidia-ml.so` through `nvml-wrapper`, exactly as the tracker
//! does on a GPU node, plus a few raw C-API checks.
//!
//! The fake reads `FAKE_NVML_SCENARIO` at init and keeps a process-wide init
//! reference count, so every test holds `LOCK` for its whole duration.

mod compute;
mod faults;
mod gpm;
mod mig;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use std::ffi::{CStr, c_char, c_uint, c_ulonglong, c_void};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

static LOCK: Mutex<()> = Mutex::new(());

const UUID0: &str = "GPU-11111111-2222-3333-4444-555555555555";
const UUID1: &str = "GPU-66666666-7777-8888-9999-000000000000";
const GIB: u64 = 1 << 30;

/// The fake built for this test run. `cargo test` builds the package's lib (cdylib +
/// rlib) as a dependency of this test, next to it in `target/<profile>/deps/`;
/// `cargo build` puts it one level up.
fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary in target/<profile>/deps");
    [deps.to_path_buf(), deps.join("..")]
        .into_iter()
        .map(|dir| dir.join("libnvidia_ml.so"))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("libnvidia_ml.so not found near {}", exe.display()))
}

/// Holds `LOCK` and a scenario file named by `FAKE_NVML_SCENARIO`.
struct Scenario {
    _guard: MutexGuard<'static, ()>,
    path: PathBuf,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fake-nvml-{}-{name}", std::process::id()))
}

fn set_env(key: &str, value: Option<&std::ffi::OsStr>) {
    // SAFETY: every test in this binary holds LOCK while touching the environment or
    // the library (the only reader of these variables), so there is no concurrent access.
    unsafe {
        match value {
            Some(v) => std::env::set_var(key, v),
            None => std::env::remove_var(key),
        }
    }
}

fn scenario(name: &str, json: &str) -> Scenario {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = temp_file(&format!("{name}.json"));
    std::fs::write(&path, json).expect("write scenario");
    set_env("FAKE_NVML_SCENARIO", Some(path.as_os_str()));
    Scenario {
        _guard: guard,
        path,
    }
}

fn init() -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(lib_path().as_os_str()).init()
}

fn two_devices(extra0: &str, extra1: &str) -> String {
    format!(
        r#"{{"driver_version": "550.54.15", "devices": [
            {{"uuid": "{UUID0}", "name": "Simulated GPU 80GB", "memory_total": {total},
              "memory_used_base": 536870912 {extra0}}},
            {{"uuid": "{UUID1}", "name": "Simulated GPU 40GB", "minor": 7,
              "memory_total": {half} {extra1}}}
        ]}}"#,
        total = 80 * GIB,
        half = 40 * GIB,
    )
}

/// A `sleep` child whose command line carries a unique marker.
fn sleeper(seconds: u32) -> (Child, String) {
    let marker = format!("{seconds}.{}", std::process::id());
    let child = Command::new("sleep")
        .arg(&marker)
        .spawn()
        .expect("spawn sleep");
    wait_for_cmdline(&child, &marker);
    (child, marker)
}

/// Waits until `child`'s command line shows `marker`. spawn returns once the child has begun
/// its exec, which can be before the kernel has set up its new arguments: until then
/// /proc/PID/cmdline reads empty and no cmdline_contains entry can match it.
fn wait_for_cmdline(child: &Child, marker: &str) {
    let cmdline = format!("/proc/{}/cmdline", child.id());
    let started = std::time::Instant::now();
    while !std::fs::read(&cmdline)
        .unwrap_or_default()
        .windows(marker.len())
        .any(|w| w == marker.as_bytes())
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{marker}: no cmdline"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    settle();
}

/// Waits until the fake's scan of /proc (at most 20 ms old) has seen processes start or end.
fn settle() {
    std::thread::sleep(Duration::from_millis(30));
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
    settle();
}

#[test]
fn identity_and_memory() {
    let _s = scenario("identity", &two_devices("", ""));
    let nvml = init().expect("init");
    assert_eq!(nvml.device_count().unwrap(), 2);
    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");

    let d0 = nvml.device_by_index(0).unwrap();
    assert_eq!(d0.uuid().unwrap(), UUID0);
    assert_eq!(d0.name().unwrap(), "Simulated GPU 80GB");
    assert_eq!(d0.index().unwrap(), 0);
    assert_eq!(d0.minor_number().unwrap(), 0);
    let mem = d0.memory_info().unwrap();
    assert_eq!(mem.total, 80 * GIB);
    assert_eq!(mem.used, 512 << 20);
    assert_eq!(mem.free, 80 * GIB - (512 << 20));
    assert!(matches!(d0.mig_mode(), Err(NvmlError::NotSupported)));
    assert!(d0.running_compute_processes().unwrap().is_empty());
    assert!(d0.running_graphics_processes().unwrap().is_empty());
    assert!(matches!(
        d0.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(d0.total_energy_consumption().unwrap(), 0);
    let util = d0.utilization_rates().unwrap();
    assert_eq!((util.gpu, util.memory), (0, 0));

    let d1 = nvml.device_by_uuid(UUID1).unwrap();
    assert_eq!(d1.index().unwrap(), 1);
    assert_eq!(d1.minor_number().unwrap(), 7);
    assert_eq!(d1.memory_info().unwrap().used, 0);

    assert!(matches!(
        nvml.device_by_index(2),
        Err(NvmlError::InvalidArg)
    ));
    assert!(matches!(
        nvml.device_by_uuid("GPU-nope"),
        Err(NvmlError::NotFound)
    ));
    nvml.shutdown().unwrap();
}

#[test]
fn processes_are_matched_live() {
    let (marked, marker) = sleeper(30);
    let (by_pid, _) = sleeper(31);
    let own_exe = std::env::current_exe().unwrap();
    let own_name = own_exe.file_name().unwrap().to_str().unwrap();
    let processes = format!(
        r#", "utilization": [{{"at_ms": 0, "gpu": 55, "memory": 20}}], "processes": [
            {{"cmdline_contains": "sleep {marker}", "used_memory": {GIB}}},
            {{"pid": {pid}, "used_memory": null}},
            {{"cmdline_contains": "{own_name}", "used_memory": 1}}]"#,
        pid = by_pid.id(),
    );
    let _s = scenario("processes", &two_devices(&processes, ""));
    let nvml = init().expect("init");
    let d0 = nvml.device_by_index(0).unwrap();

    let mut procs = d0.running_compute_processes().unwrap();
    procs.sort_by_key(|p| p.pid);
    let mut expected = vec![
        (marked.id(), UsedGpuMemory::Used(GIB)),
        (by_pid.id(), UsedGpuMemory::Unavailable),
    ];
    expected.sort_by_key(|p| p.0);
    let got: Vec<_> = procs
        .iter()
        .map(|p| (p.pid, p.used_gpu_memory.clone()))
        .collect();
    assert_eq!(got, expected);
    assert!(
        procs
            .iter()
            .all(|p| p.gpu_instance_id.is_none() && p.compute_instance_id.is_none())
    );
    assert_eq!(d0.memory_info().unwrap().used, (512 << 20) + GIB);

    let samples = d0.process_utilization_stats(None).unwrap();
    assert_eq!(samples.len(), 2);
    assert!(
        samples
            .iter()
            .all(|s| s.sm_util == 55 && s.mem_util == 20 && s.timestamp > 0)
    );
    let future = samples[0].timestamp + 3_600_000_000;
    assert!(matches!(
        d0.process_utilization_stats(future),
        Err(NvmlError::NotFound)
    ));

    stop(marked);
    stop(by_pid);
    assert!(d0.running_compute_processes().unwrap().is_empty());
    assert_eq!(d0.memory_info().unwrap().used, 512 << 20);
    assert!(matches!(
        d0.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));
}

#[test]
fn utilization_timeline_and_energy() {
    let extra = r#", "power_mw": 250000, "energy_base_mj": 1000000,
        "utilization": [{"at_ms": 0, "gpu": 40, "memory": 10},
                        {"at_ms": 1500, "gpu": 90, "memory": 30}]"#;
    let _s = scenario("timeline", &two_devices(extra, ""));
    let nvml = init().expect("init");
    let d0 = nvml.device_by_index(0).unwrap();
    let u = d0.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (40, 10));
    assert_eq!(d0.power_usage().unwrap(), 250000);
    let e1 = d0.total_energy_consumption().unwrap();
    assert!(e1 >= 1_000_000);
    std::thread::sleep(Duration::from_millis(1600));
    let u = d0.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (90, 30));
    let e2 = d0.total_energy_consumption().unwrap();
    // At least 1.5 s at 250 W more.
    assert!(
        e2 >= e1 + 250_000 && e2 >= 1_000_000 + 375_000,
        "{e1} -> {e2}"
    );
}

#[test]
fn temperature_where_the_device_has_the_sensor() {
    let _s = scenario("temperature", &two_devices(r#", "temperature_c": 41"#, ""));
    let nvml = init().expect("init");
    let d0 = nvml.device_by_index(0).unwrap();
    assert_eq!(d0.temperature(TemperatureSensor::Gpu).unwrap(), 41);
    // A device without the sensor: NOT_SUPPORTED, never a made-up 0.
    let d1 = nvml.device_by_index(1).unwrap();
    assert!(matches!(
        d1.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::NotSupported)
    ));
}

#[test]
fn injected_errors_and_lost_device() {
    let errors = r#", "errors": {"nvmlDeviceGetUtilizationRates": "NOT_SUPPORTED",
        "nvmlDeviceGetPowerUsage": "NVML_ERROR_NO_PERMISSION", "nvmlDeviceGetMigMode": "SUCCESS"}"#;
    let _s = scenario("errors", &two_devices(errors, r#", "lost_after_ms": 300"#));
    let nvml = init().expect("init");
    let d0 = nvml.device_by_index(0).unwrap();
    assert!(matches!(
        d0.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(d0.power_usage(), Err(NvmlError::NoPermission)));
    let mig = d0.mig_mode().unwrap();
    assert_eq!((mig.current, mig.pending), (0, 0));
    assert_eq!(d0.uuid().unwrap(), UUID0);

    let d1 = nvml.device_by_index(1).unwrap();
    assert_eq!(d1.uuid().unwrap(), UUID1);
    std::thread::sleep(Duration::from_millis(400));
    assert!(matches!(d1.uuid(), Err(NvmlError::GpuLost)));
    assert!(matches!(d1.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        d1.running_compute_processes(),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::GpuLost)));
    assert!(matches!(
        nvml.device_by_uuid(UUID1),
        Err(NvmlError::GpuLost)
    ));
    assert_eq!(nvml.device_count().unwrap(), 2);
    assert_eq!(d0.memory_info().unwrap().total, 80 * GIB);
}

#[test]
fn init_errors() {
    {
        let _s = scenario("init-error", r#"{"init_error": "DRIVER_NOT_LOADED"}"#);
        assert!(matches!(init(), Err(NvmlError::DriverNotLoaded)));
    }
    {
        let _s = scenario("invalid", r#"{"devices": [{"uuid": "x"}]}"#);
        assert!(matches!(init(), Err(NvmlError::Unknown)));
    }
    {
        let s = scenario("missing", "{}");
        std::fs::remove_file(&s.path).unwrap();
        assert!(matches!(init(), Err(NvmlError::Unknown)));
        set_env("FAKE_NVML_SCENARIO", None);
        let nvml = init().expect("init without a scenario");
        assert_eq!(nvml.device_count().unwrap(), 0);
    }
}

#[repr(C)]
struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

type Handle = *mut c_void;

/// The fake opened again for raw C calls: the library instance (and state) that
/// `nvml-wrapper` loaded, as the loader hands out one instance per file.
fn raw_lib() -> libloading::Library {
    // SAFETY: loading the fake only runs Rust static initialisation.
    unsafe { libloading::Library::new(lib_path()) }.expect("dlopen")
}

/// Function `name` of `lib`.
///
/// # Safety
///
/// `T` must be the function's C prototype from nvml.h.
unsafe fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> T {
    // SAFETY: the caller vouches for the prototype.
    *unsafe { lib.get::<T>(name.as_bytes()) }.expect(name)
}

#[test]
fn raw_c_api_rules() {
    let _s = scenario("raw", &two_devices("", ""));
    let log = temp_file("calls.log");
    let _ = std::fs::remove_file(&log);
    set_env("FAKE_NVML_LOG", Some(log.as_os_str()));

    // SAFETY: loading the fake only runs Rust static initialisation.
    let lib = unsafe { libloading::Library::new(lib_path()) }.expect("dlopen");
    macro_rules! sym {
        ($name:literal: $ty:ty) => {
            // SAFETY: the type is the function's C prototype from nvml.h.
            *unsafe { lib.get::<$ty>($name.as_bytes()) }.expect($name)
        };
    }
    let init = sym!("nvmlInit_v2": unsafe extern "C" fn() -> c_uint);
    let shutdown = sym!("nvmlShutdown": unsafe extern "C" fn() -> c_uint);
    let error_string = sym!("nvmlErrorString": unsafe extern "C" fn(c_uint) -> *const c_char);
    let count = sym!("nvmlDeviceGetCount_v2": unsafe extern "C" fn(*mut c_uint) -> c_uint);
    let by_index = sym!("nvmlDeviceGetHandleByIndex_v2":
        unsafe extern "C" fn(c_uint, *mut Handle) -> c_uint);
    let by_uuid = sym!("nvmlDeviceGetHandleByUUID":
        unsafe extern "C" fn(*const c_char, *mut Handle) -> c_uint);
    let get_uuid = sym!("nvmlDeviceGetUUID":
        unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> c_uint);
    let driver = sym!("nvmlSystemGetDriverVersion":
        unsafe extern "C" fn(*mut c_char, c_uint) -> c_uint);
    let memory_v2 = sym!("nvmlDeviceGetMemoryInfo_v2":
        unsafe extern "C" fn(Handle, *mut MemoryV2) -> c_uint);
    let procs = sym!("nvmlDeviceGetComputeRunningProcesses_v3":
        unsafe extern "C" fn(Handle, *mut c_uint, *mut c_void) -> c_uint);

    // SAFETY: the functions have the prototypes above and every pointer passed is
    // either null or points to a live local of the right type and size.
    unsafe {
        let mut n: c_uint = 99;
        let mut h: Handle = std::ptr::null_mut();
        let mut buf = [0 as c_char; 96];
        assert_eq!(count(&mut n), 1, "before init: UNINITIALIZED");
        assert_eq!(shutdown(), 1);
        assert_eq!(CStr::from_ptr(error_string(15)), c"GPU is lost");
        assert_eq!(CStr::from_ptr(error_string(0)), c"Success");

        assert_eq!(init(), 0);
        assert_eq!(init(), 0);
        assert_eq!(count(std::ptr::null_mut()), 2);
        assert_eq!(count(&mut n), 0);
        assert_eq!(n, 2);
        assert_eq!(by_index(2, &mut h), 2);
        assert_eq!(by_index(0, std::ptr::null_mut()), 2);
        assert_eq!(by_uuid(c"GPU-nope".as_ptr(), &mut h), 6);
        assert_eq!(
            by_uuid(c"GPU-66666666-7777-8888-9999-000000000000".as_ptr(), &mut h),
            0
        );
        assert_eq!(by_index(0, &mut h), 0);

        assert_eq!(
            get_uuid(h, buf.as_mut_ptr(), 40),
            7,
            "40 bytes: no room for NUL"
        );
        assert_eq!(get_uuid(h, buf.as_mut_ptr(), 41), 0);
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), UUID0);
        assert_eq!(get_uuid(h, std::ptr::null_mut(), 96), 2);
        let mut bogus = 0u64;
        assert_eq!(get_uuid((&raw mut bogus).cast(), buf.as_mut_ptr(), 96), 2);
        assert_eq!(driver(buf.as_mut_ptr(), 3), 7);

        let mut mem = MemoryV2 {
            version: 0,
            total: 0,
            reserved: 9,
            free: 0,
            used: 0,
        };
        assert_eq!(memory_v2(h, &mut mem), 25);
        mem.version = (size_of::<MemoryV2>() | (2 << 24)) as c_uint;
        assert_eq!(memory_v2(h, &mut mem), 0);
        assert_eq!(
            (mem.total, mem.reserved, mem.used),
            (80 * GIB, 0, 512 << 20)
        );
        assert_eq!(memory_v2(h, std::ptr::null_mut()), 2);

        n = 0;
        assert_eq!(procs(h, &mut n, std::ptr::null_mut()), 0);
        assert_eq!(n, 0);
        assert_eq!(procs(h, std::ptr::null_mut(), std::ptr::null_mut()), 2);

        assert_eq!(shutdown(), 0);
        assert_eq!(count(&mut n), 0, "still initialized once");
        assert_eq!(shutdown(), 0);
        assert_eq!(count(&mut n), 1, "after the last shutdown: UNINITIALIZED");
        assert_eq!(get_uuid(h, buf.as_mut_ptr(), 96), 1);
        assert_eq!(shutdown(), 1);
    }
    set_env("FAKE_NVML_LOG", None);
    let calls = std::fs::read_to_string(&log).expect("call log");
    let _ = std::fs::remove_file(&log);
    assert_eq!(calls.lines().next(), Some("nvmlDeviceGetCount_v2"));
    assert_eq!(calls.lines().filter(|l| *l == "nvmlInit_v2").count(), 2);
    assert_eq!(calls.lines().last(), Some("nvmlShutdown"));
}

/// A copy of the fake in a directory of its own, with `json` beside it as its scenario: a
/// library instance (and state) of its own, whatever `FAKE_NVML_SCENARIO` says.
fn private_copy(name: &str, json: &str) -> PathBuf {
    let dir = temp_file(&format!("{name}.d"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    std::fs::copy(lib_path(), &lib).unwrap();
    std::fs::write(dir.join("fake-nvml-scenario.json"), json).unwrap();
    lib
}

/// Where descriptor `fd` of this process points, and whether it is close-on-exec.
fn fd_state(fd: &str) -> Option<(PathBuf, bool)> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())?;
    Some((target, flags & libc::O_CLOEXEC as u32 != 0))
}

/// This process's descriptors open on `path`, with their close-on-exec flag.
fn open_on(path: &std::path::Path) -> Vec<bool> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| fd_state(e.file_name().to_str()?))
        .filter(|(t, _)| t == path)
        .map(|(_, cloexec)| cloexec)
        .collect()
}

#[test]
fn device_files_are_held_open_without_cloexec_until_shutdown() {
    let dir = temp_file("files.d");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (ctl, d0, d1) = (dir.join("ctl"), dir.join("dev0"), dir.join("dev1"));
    for f in [&ctl, &d0, &d1] {
        std::fs::write(f, "").unwrap();
    }
    let json = format!(
        r#"{{"control_file": "{}", "devices": [
            {{"uuid": "{UUID0}", "name": "A", "memory_total": 1, "device_file": "{}"}},
            {{"uuid": "{UUID1}", "name": "B", "memory_total": 1, "device_file": "{}"}}]}}"#,
        ctl.display(),
        d0.display(),
        d1.display()
    );
    let _s = scenario("files", &json);
    let nvml = init().expect("init");
    assert_eq!(open_on(&ctl), vec![false], "control file open, inheritable");
    assert!(open_on(&d0).is_empty() && open_on(&d1).is_empty());
    nvml.device_by_index(0).unwrap();
    assert_eq!(open_on(&d0), vec![false]);
    assert!(open_on(&d1).is_empty(), "no handle of device 1 yet");
    // A handle looked up again does not open the file twice.
    nvml.device_by_index(0).unwrap();
    nvml.device_by_uuid(UUID1).unwrap();
    assert_eq!((open_on(&d0).len(), open_on(&d1).len()), (1, 1));
    nvml.shutdown().unwrap();
    assert!(open_on(&ctl).is_empty() && open_on(&d0).is_empty() && open_on(&d1).is_empty());

    // A device file that cannot be opened refuses its handle; a missing control file, init.
    std::fs::remove_file(&d1).unwrap();
    let nvml = init().expect("init");
    assert!(matches!(
        nvml.device_by_index(1),
        Err(NvmlError::NoPermission)
    ));
    nvml.device_by_index(0).unwrap();
    nvml.shutdown().unwrap();
    std::fs::remove_file(&ctl).unwrap();
    assert!(matches!(init(), Err(NvmlError::DriverNotLoaded)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn delayed_and_hung_calls() {
    let json = format!(
        r#"{{"delays_ms": {{"nvmlDeviceGetPowerUsage": 150}},
            "hang": {{"call": "nvmlDeviceGetUtilizationRates", "after_calls": 1, "for_ms": 400}},
            "devices": [{{"uuid": "{UUID0}", "name": "A", "memory_total": 1}}]}}"#
    );
    let _s = scenario("delays", &json);
    let nvml = init().expect("init");
    let d = nvml.device_by_index(0).unwrap();
    let t = std::time::Instant::now();
    d.power_usage().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    let t = std::time::Instant::now();
    d.utilization_rates().unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "the first call answers"
    );
    let t = std::time::Instant::now();
    d.utilization_rates().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    let t = std::time::Instant::now();
    d.uuid().unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "other calls do not wait"
    );
}

#[test]
fn a_call_can_hang_for_ever_in_a_copy_with_its_own_scenario() {
    // Beside the copy: its own scenario, whatever FAKE_NVML_SCENARIO names. The hung thread
    // keeps that copy initialized for the rest of the run, so no other test may share it.
    let json = format!(
        r#"{{"hang": {{"call": "nvmlDeviceGetMemoryInfo_v2", "after_ms": 200}},
            "devices": [{{"uuid": "{UUID1}", "name": "Own", "memory_total": 5}}]}}"#
    );
    let lib = private_copy("hang", &json);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let nvml = Nvml::builder().lib_path(lib.as_os_str()).init().unwrap();
        let d = nvml.device_by_index(0).unwrap();
        tx.send(d.uuid().unwrap()).unwrap();
        tx.send(format!("{}", d.memory_info().unwrap().total))
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let _ = d.memory_info();
        tx.send("answered after the hang began".into()).unwrap();
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), UUID1);
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "5");
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "the call after 200 ms never answers"
    );
}
