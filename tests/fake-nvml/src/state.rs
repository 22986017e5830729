//! Global library state: init reference count, the loaded scenario and live queries.

use crate::Ret;
use crate::live::Live;
use crate::scenario::{DeviceSpec, Gpm, InstanceSpec, ProcessSpec, Scenario};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, c_void};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The state of an initialized library (refcount > 0).
pub(crate) struct Session {
    pub refcount: u32,
    pub epoch: Instant,
    pub scenario: Scenario,
    /// One slot per device; a handle is the address of its slot (stable: the vector
    /// is never modified during a session).
    pub devices: Vec<Device>,
    /// One slot per MIG device of every device in MIG mode, handed out like `devices`.
    migs: Vec<MigSlot>,
    /// The scenario's `control_file`, open since init.
    _control: Option<OwnedFd>,
    /// Each device's `device_file`, open once its handle was handed out.
    device_fds: RefCell<Vec<Option<OwnedFd>>>,
    /// Calls of the scenario's `hang.call` so far.
    hang_calls: Cell<u64>,
    /// GPM samples, event sets and fault state.
    pub live: RefCell<Live>,
}

/// How long a call waits before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Not at all.
    No,
    /// This long.
    For(Duration),
    /// Never answers.
    Forever,
}

/// A device slot. Its address is the `nvmlDevice_t` handed out to callers.
pub(crate) struct Device {
    pub index: u32,
}

/// A MIG device slot. Its address is the `nvmlDevice_t` of that MIG device.
pub(crate) struct MigSlot {
    device: u32,
    instance: u32,
}

/// What a live device handle names: a GPU (its index), or a MIG device (its parent's index
/// and its index among the parent's instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Gpu(u32),
    Mig(u32, u32),
}

impl Target {
    /// The physical GPU: the device itself or the MIG device's parent.
    pub fn device(self) -> u32 {
        match self {
            Target::Gpu(d) | Target::Mig(d, _) => d,
        }
    }
}

/// A process currently matched on a device.
pub(crate) struct Matched {
    /// `None`: matched by the device's own entries; `Some(k)`: by its MIG instance `k`'s.
    pub instance: Option<u32>,
    pub pid: u32,
    pub used_memory: Option<u64>,
    /// Its command line contains the scenario's `fault_marker`.
    pub faulty: bool,
    /// It computes: its command line contains the scenario's `compute_marker`, or there is none.
    pub computes: bool,
}

/// `nvmlClocksThrottleReasonGpuIdle`.
pub(crate) const REASON_GPU_IDLE: u64 = 0x1;
/// What a fault throttles with: `HwSlowdown` | `SwThermalSlowdown` | `HwThermalSlowdown`.
pub(crate) const REASONS_FAULT: u64 = 0x8 | 0x20 | 0x40;

static STATE: Mutex<Option<Session>> = Mutex::new(None);

/// Locks the global state, recovering from poisoning.
pub(crate) fn lock() -> MutexGuard<'static, Option<Session>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens `path` read-only WITHOUT `O_CLOEXEC`, as a driver library may open its device files:
/// the descriptor survives `exec` in any child forked while it is open.
fn open_inheritable(path: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated path; open takes no other pointer.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened here and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Session {
    /// A session of `scenario`: opens its control file (an error names it).
    pub fn new(scenario: Scenario) -> Result<Self, String> {
        let devices = (0..scenario.devices.len() as u32)
            .map(|index| Device { index })
            .collect();
        let migs = (0..scenario.devices.len() as u32)
            .flat_map(|device| {
                // A slot for each index of either layout (see `reconfigure`).
                let count = scenario.devices[device as usize]
                    .mig
                    .as_ref()
                    .map_or(0, |m| {
                        let later = m.reconfigure.as_ref().map_or(0, |(_, i)| i.len());
                        m.instances.len().max(later) as u32
                    });
                (0..count).map(move |instance| MigSlot { device, instance })
            })
            .collect();
        let control = match &scenario.control_file {
            Some(p) => Some(
                open_inheritable(p).map_err(|e| format!("control_file {}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(Session {
            refcount: 1,
            epoch: Instant::now(),
            device_fds: RefCell::new((0..scenario.devices.len()).map(|_| None).collect()),
            live: RefCell::new(Live::new(&scenario.devices)),
            scenario,
            devices,
            migs,
            _control: control,
            hang_calls: Cell::new(0),
        })
    }

    /// Opens device `index`'s `device_file` the first time its handle is handed out.
    pub fn open_device_file(&self, index: u32) -> Result<(), String> {
        let Some(path) = &self.spec(index).device_file else {
            return Ok(());
        };
        let mut fds = self.device_fds.borrow_mut();
        let slot = &mut fds[index as usize];
        if slot.is_none() {
            *slot = Some(
                open_inheritable(path)
                    .map_err(|e| format!("device_file {}: {e}", path.display()))?,
            );
        }
        Ok(())
    }

    /// How long call `name` must wait now (counts the call towards `hang.after_calls`).
    pub fn stall(&self, name: &str) -> Stall {
        let mut stall = match self.scenario.delays.get(name) {
            Some(d) => Stall::For(*d),
            None => Stall::No,
        };
        if let Some(h) = self.scenario.hang.as_ref().filter(|h| h.call == name) {
            let before = self.hang_calls.get();
            self.hang_calls.set(before + 1);
            if before >= h.after_calls && self.elapsed_ms() >= h.after_ms {
                stall = match h.for_ms {
                    Some(ms) => Stall::For(Duration::from_millis(ms)),
                    None => Stall::Forever,
                };
            }
        }
        stall
    }

    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The handle of `target`.
    pub fn handle(&self, target: Target) -> *const c_void {
        match target {
            Target::Gpu(index) => (&raw const self.devices[index as usize]).cast(),
            Target::Mig(device, instance) => self
                .migs
                .iter()
                .find(|m| (m.device, m.instance) == (device, instance))
                .map_or(std::ptr::null(), |m| (&raw const *m).cast()),
        }
    }

    /// What `handle` names when it is the address of one of the slots (never dereferenced).
    pub fn target(&self, handle: *const c_void) -> Option<Target> {
        if let Some(d) = self
            .devices
            .iter()
            .find(|d| std::ptr::eq(*d, handle.cast()))
        {
            return Some(Target::Gpu(d.index));
        }
        // A MIG slot whose index the current layout has no instance at names nothing now.
        self.migs
            .iter()
            .find(|m| std::ptr::eq(*m, handle.cast()))
            .filter(|m| (m.instance as usize) < self.instances(m.device).len())
            .map(|m| Target::Mig(m.device, m.instance))
    }

    pub fn spec(&self, index: u32) -> &DeviceSpec {
        &self.scenario.devices[index as usize]
    }

    /// The MIG instances of device `index` now (none when it is not in MIG mode): the
    /// `reconfigure` layout once its time has come.
    pub fn instances(&self, index: u32) -> &[InstanceSpec] {
        let Some(mig) = self.spec(index).mig.as_ref() else {
            return &[];
        };
        match &mig.reconfigure {
            Some((at_ms, later)) if self.elapsed_ms() >= *at_ms => later,
            _ => &mig.instances,
        }
    }

    /// The errors injected for `target`: a MIG device has its own.
    pub fn errors(&self, target: Target) -> &BTreeMap<String, Ret> {
        match target {
            Target::Gpu(index) => &self.spec(index).errors,
            Target::Mig(index, k) => &self.instances(index)[k as usize].errors,
        }
    }

    pub fn is_lost(&self, index: u32) -> bool {
        self.spec(index)
            .lost_after_ms
            .is_some_and(|ms| self.elapsed_ms() >= ms)
    }

    /// Current (gpu, memory) utilization of device `index`: its timeline's, but 0 while no
    /// process of it (or of its MIG instances) computes where the scenario has a
    /// `compute_marker`, as a real GPU with no kernel running.
    pub fn utilization(&self, index: u32) -> (u32, u32) {
        if self.scenario.compute_marker.is_some()
            && !self.matched_all(index).iter().any(|m| m.computes)
        {
            return (0, 0);
        }
        let now = self.elapsed_ms();
        self.spec(index)
            .utilization
            .iter()
            .rev()
            .find(|u| u.at_ms <= now)
            .map_or((0, 0), |u| (u.gpu, u.memory))
    }

    /// Total energy in mJ of device `index`.
    pub fn energy_mj(&self, index: u32) -> u64 {
        let spec = self.spec(index);
        let extra = u128::from(spec.power_mw) * u128::from(self.elapsed_ms()) / 1000;
        spec.energy_base_mj
            .saturating_add(u64::try_from(extra).unwrap_or(u64::MAX))
    }

    /// (total, used, free) memory in bytes of `target`. A MIG device counts its own base and
    /// processes; a device in MIG mode counts its own and every instance's.
    pub fn memory(&self, target: Target) -> (u64, u64, u64) {
        let matched = self.matched_all(target.device());
        let spec = self.spec(target.device());
        let (total, base, of) = match target {
            Target::Gpu(index) => {
                let bases = self.instances(index).iter().map(|i| i.memory_used_base);
                let base = bases.fold(spec.memory_used_base, u64::saturating_add);
                (spec.memory_total, base, None)
            }
            Target::Mig(index, k) => {
                let i = &self.instances(index)[k as usize];
                (i.memory_total, i.memory_used_base, Some(k))
            }
        };
        let used = matched
            .iter()
            .filter(|m| of.is_none() || m.instance == of)
            .filter_map(|m| m.used_memory)
            .fold(base, u64::saturating_add);
        (total, used, total.saturating_sub(used))
    }
}

impl Session {
    /// The processes that currently match device `index`'s own entries (see `matched_all`).
    pub fn matched(&self, index: u32) -> Vec<Matched> {
        let mut all = self.matched_all(index);
        all.retain(|m| m.instance.is_none());
        all
    }

    /// The processes that currently match device `index`'s entries, then each of its MIG
    /// instances' entries; a faulty one the device has not noticed yet makes it fault now (see
    /// `Live::notice_fault`). Every call that looks at the device's processes, throttling,
    /// events or ECC goes through here first.
    pub fn matched_all(&self, index: u32) -> Vec<Matched> {
        let spec = self.spec(index);
        let markers = Markers {
            fault: self.scenario.fault_marker.as_deref(),
            compute: self.scenario.compute_marker.as_deref(),
        };
        let mut matched = matched_processes(&spec.processes, None, markers);
        for (k, i) in self.instances(index).iter().enumerate() {
            matched.extend(matched_processes(&i.processes, Some(k as u32), markers));
        }
        let mut live = self.live.borrow_mut();
        for m in matched.iter().filter(|m| m.faulty) {
            live.notice_fault(index, m.pid, spec.fault_throttle);
        }
        matched
    }

    /// Device `index`'s GPM metrics now: the scenario's while a process of it (or of one of its
    /// MIG instances) computes, else 0; `None` when the device has no GPM.
    pub fn gpm(&self, index: u32) -> Option<Gpm> {
        let gpm = self.spec(index).gpm?;
        Some(if self.matched_all(index).iter().any(|m| m.computes) {
            gpm
        } else {
            Gpm::default()
        })
    }

    /// The GPM metrics of device `index`'s MIG instance `k` now, as `gpm` but with the
    /// instance's values and processes.
    pub fn instance_gpm(&self, index: u32, k: u32) -> Option<Gpm> {
        let gpm = self.instances(index)[k as usize].gpm?;
        let busy = self
            .matched_all(index)
            .iter()
            .any(|m| m.instance == Some(k) && m.computes);
        Some(if busy { gpm } else { Gpm::default() })
    }

    /// Device `index`'s current clock throttle reasons.
    pub fn throttle_reasons(&self, index: u32) -> u64 {
        let idle = !self.matched_all(index).iter().any(|m| m.computes);
        if self.live.borrow().throttled(index) {
            REASONS_FAULT
        } else if idle {
            REASON_GPU_IDLE
        } else {
            0
        }
    }
}

/// The scenario's markers a matched process's command line is looked at for.
#[derive(Clone, Copy)]
struct Markers<'a> {
    fault: Option<&'a str>,
    compute: Option<&'a str>,
}

/// The processes that currently match `processes` (live scan), each tagged with `instance`,
/// marked `faulty` when its command line contains the fault marker, and `computes` when it
/// contains the compute marker (or there is none).
fn matched_processes(
    processes: &[ProcessSpec],
    instance: Option<u32>,
    markers: Markers,
) -> Vec<Matched> {
    let me = std::process::id();
    let needs_scan = processes
        .iter()
        .any(|p| p.cmdline_contains.is_some() || p.environ_contains.is_some());
    let scan = if needs_scan {
        scan()
    } else {
        Default::default()
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for p in processes {
        let pids: Vec<u32> = match (&p.cmdline_contains, p.pid) {
            (Some(needle), _) => scan
                .cmdlines
                .iter()
                .filter(|(pid, cmd)| *pid != me && cmd.contains(needle.as_str()))
                .map(|(pid, _)| *pid)
                .collect(),
            (None, Some(pid)) if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                vec![pid]
            }
            _ => Vec::new(),
        };
        let wanted = |pid: &u32| {
            p.environ_contains
                .as_deref()
                .is_none_or(|needle| scan.environ_has(*pid, needle))
        };
        for pid in pids.into_iter().filter(wanted) {
            if seen.insert(pid) {
                let has = |marker: &str| {
                    let cmdline = match scan.cmdlines.binary_search_by_key(&pid, |(p, _)| *p) {
                        Ok(at) => Some(scan.cmdlines[at].1.clone()),
                        Err(_) => read_cmdline(pid),
                    };
                    cmdline.is_some_and(|c| c.contains(marker))
                };
                out.push(Matched {
                    instance,
                    pid,
                    used_memory: p.used_memory,
                    faulty: markers.fault.is_some_and(has),
                    computes: markers.compute.is_none_or(has),
                });
            }
        }
    }
    out
}

/// How long one scan of `/proc` answers every call: the calls of one sample (a dozen per
/// device) share a scan, as the driver's answers come from one state, and a loaded test machine
/// is not slowed by a scan per call. A process started later is seen at most this much later.
const SCAN_FRESH: Duration = Duration::from_millis(20);

/// One scan of `/proc`: every visible process's command line, and the environments read so far.
#[derive(Default)]
struct Scan {
    /// (pid, command line with NULs turned into spaces), sorted by pid.
    cmdlines: Vec<(u32, String)>,
    /// Environments (`None`: unreadable) read while this scan is fresh, only of the pids an
    /// `environ_contains` entry asked about: most processes never need theirs read.
    environs: Mutex<BTreeMap<u32, Option<Vec<u8>>>>,
}

impl Scan {
    /// Whether one of `pid`'s environment entries contains `needle`; an unreadable environment
    /// contains nothing.
    fn environ_has(&self, pid: u32, needle: &str) -> bool {
        let mut environs = self.environs.lock().unwrap_or_else(|p| p.into_inner());
        let environ = environs
            .entry(pid)
            .or_insert_with(|| std::fs::read(format!("/proc/{pid}/environ")).ok());
        let needle = needle.as_bytes();
        environ.as_deref().is_some_and(|env| {
            env.split(|&b| b == 0)
                .any(|entry| entry.windows(needle.len()).any(|w| w == needle))
        })
    }
}

/// The latest scan and when it was taken.
static SCAN: Mutex<Option<(Instant, Arc<Scan>)>> = Mutex::new(None);

/// The latest scan of `/proc` while it is fresh, else a new one.
fn scan() -> Arc<Scan> {
    let mut scan = SCAN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, latest)) = scan.as_ref()
        && at.elapsed() < SCAN_FRESH
    {
        return Arc::clone(latest);
    }
    let latest = Arc::new(Scan {
        cmdlines: scan_cmdlines(),
        environs: Mutex::default(),
    });
    *scan = Some((Instant::now(), Arc::clone(&latest)));
    latest
}

fn scan_cmdlines() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((pid, read_cmdline(pid)?))
        })
        .collect();
    out.sort_unstable_by_key(|(pid, _)| *pid);
    out
}

/// The command line of `pid`, NUL separators turned into spaces.
fn read_cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    Some(text.trim_end().to_owned())
}
