//! `gpu_tracker._core`: the native half of the Python package. A [`Session`] runs the library's
//! [`Tracker`] on its sampler thread; Python only maps arguments and builds the result's
//! dataclasses from the JSON this returns. No figure is computed in Python.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use gpu_tracker::gpu::Vendor;
use gpu_tracker::tracker::{Sources, TrackerError};
use gpu_tracker::tracking_file::TrackingFileError;
use gpu_tracker::units::{MemUnit, TimeUnit, Units};
use gpu_tracker::{Tracker, TrackerOptions};
use pyo3::exceptions::{PyFileExistsError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The library's error as the Python exception `gpu_tracker` raises for the same misuse.
fn py_err(e: TrackerError) -> PyErr {
    match e {
        TrackerError::InvalidOption(m) => PyValueError::new_err(m),
        TrackerError::TrackingFile(TrackingFileError::Exists(p)) => {
            PyFileExistsError::new_err(format!(
                "File {} already exists. Set overwrite to True to overwrite the existing file.",
                p.display()
            ))
        }
        TrackerError::TrackingFile(TrackingFileError::Extension(p)) => {
            PyValueError::new_err(format!(
                "Invalid file name: \"{}\". Valid file extensions are \".csv\" and \".sqlite\".",
                p.display()
            ))
        }
        TrackerError::TrackingFile(e @ TrackingFileError::Io(..)) => {
            PyOSError::new_err(e.to_string())
        }
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

fn mem_unit(s: &str, what: &str) -> PyResult<MemUnit> {
    s.parse().map_err(|_| {
        PyValueError::new_err(format!(
            "\"{s}\" is not a valid {what} unit. Valid values are bytes, gigabytes, kilobytes, megabytes, terabytes"
        ))
    })
}

/// One tracking session: its options and opened sources (GPUs, tracking file) until
/// `start()`, then the running tracker.
///
/// A child forked while it runs (`os.fork()`, multiprocessing's fork start method) has a copy of
/// it but not the sampler thread, and a lock that thread held at the fork stays held for ever in
/// the child. So in any process but the one that started it, nothing here joins the thread or
/// takes a lock: `stop()` raises, and dropping the session leaks the tracker.
#[pyclass(module = "gpu_tracker._core")]
struct Session {
    opts: TrackerOptions,
    process_id: Option<u32>,
    sources: Mutex<Option<Sources>>,
    running: Mutex<Option<Tracker>>,
    /// The process that started the sampler thread; 0 until `start()`.
    started_in: AtomicU32,
}

impl Session {
    /// The process that started this session when it is not this one (a forked child).
    /// Reads an atomic and calls `getpid`: no lock.
    fn started_elsewhere(&self) -> Option<u32> {
        let pid = self.started_in.load(Ordering::Acquire);
        (pid != 0 && pid != std::process::id()).then_some(pid)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.started_elsewhere().is_some() {
            // A forked child's copy: the thread is not here to join, and the tracker's own Drop
            // would lock and join. `get_mut` takes no lock.
            if let Some(tracker) = self
                .running
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                std::mem::forget(tracker);
            }
        }
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (sleep_time, ram_unit, gpu_ram_unit, time_unit, n_expected_cores, gpu_uuids,
        disable_logs, process_id, gpu_brand, tracking_file, overwrite))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        sleep_time: f64,
        ram_unit: &str,
        gpu_ram_unit: &str,
        time_unit: &str,
        n_expected_cores: Option<u32>,
        gpu_uuids: Option<Vec<String>>,
        disable_logs: bool,
        process_id: Option<u32>,
        gpu_brand: Option<&str>,
        tracking_file: Option<PathBuf>,
        overwrite: bool,
    ) -> PyResult<Session> {
        // Every check the library makes is made here, so that a bad argument raises in
        // `Tracker(...)` as in `gpu_tracker`.
        if !sleep_time.is_finite() || sleep_time < gpu_tracker::tracker::MIN_SLEEP_TIME {
            return Err(PyValueError::new_err(format!(
                "Sleep time of {sleep_time} is invalid. Must be at least {} seconds.",
                gpu_tracker::tracker::MIN_SLEEP_TIME
            )));
        }
        let units = Units {
            ram: mem_unit(ram_unit, "RAM")?,
            gpu_ram: mem_unit(gpu_ram_unit, "GPU RAM")?,
            time: time_unit.parse::<TimeUnit>().map_err(|_| {
                PyValueError::new_err(format!(
                    "\"{time_unit}\" is not a valid time unit. Valid values are days, hours, minutes, seconds"
                ))
            })?,
        };
        let mut opts = TrackerOptions::default()
            .sleep_time(sleep_time)
            .units(units);
        opts.n_expected_cores = n_expected_cores;
        opts.gpu_uuids = gpu_uuids;
        opts.gpu.brand = match gpu_brand {
            None => None,
            Some("nvidia") => Some(Vendor::Nvidia),
            Some("amd") => Some(Vendor::Amd),
            Some(b) => {
                return Err(PyValueError::new_err(format!(
                    "\"{b}\" is not a valid GPU brand. Supported values are \"nvidia\" and \"amd\"."
                )));
            }
        };
        opts.tracking_file = tracking_file;
        opts.overwrite = overwrite;
        if disable_logs {
            opts = opts.disable_logs();
        }
        // As gpu_tracker's constructor: the tracking file is made and the GPUs named by UUID
        // are checked now.
        let sources = py.detach(|| Sources::open(&opts)).map_err(py_err)?;
        Ok(Session {
            opts,
            process_id: process_id.filter(|p| *p != std::process::id()),
            sources: Mutex::new(Some(sources)),
            running: Mutex::new(None),
            started_in: AtomicU32::new(0),
        })
    }

    /// Starts the sampler thread.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this session has already started"))?;
        let opts = self.opts.clone();
        let pid = self.process_id;
        let tracker = py
            .detach(move || Tracker::start_opened(opts, pid, sources))
            .map_err(py_err)?;
        self.started_in.store(std::process::id(), Ordering::Release);
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(tracker);
        Ok(())
    }

    /// Stops the sampler thread (without the GIL while it takes its last sample and ends) and
    /// returns the figures as the library's JSON document. In a forked child it raises before
    /// anything is locked.
    fn stop(&self, py: Python<'_>) -> PyResult<String> {
        if let Some(pid) = self.started_elsewhere() {
            return Err(PyRuntimeError::new_err(format!(
                "this Tracker was started in process {pid}; a forked child cannot stop it"
            )));
        }
        let tracker = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this session is not running"))?;
        let usage = py.detach(move || tracker.stop()).map_err(py_err)?;
        Ok(usage.to_json_pretty())
    }
}

/// The text report of a usage tree given as JSON: `gpu-tracker -e`'s layout.
#[pyfunction]
fn render_text(tree_json: &str) -> PyResult<String> {
    let v: serde_json::Value =
        serde_json::from_str(tree_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(gpu_tracker::usage::render_text(&v))
}

/// Sends a phase mark to the tracker of the running job step (as `gpu-tracker mark NAME`).
/// `(True, "")` when a tracker took it, else `(False, why)`; never raises.
#[pyfunction]
fn mark(py: Python<'_>, name: String) -> (bool, String) {
    py.detach(move || match gpu_tracker::history::mark::send(&name) {
        Ok(n) if n > 0 => (true, String::new()),
        Ok(_) => (false, "no tracker took the mark".into()),
        Err(e) => (false, e.to_string()),
    })
}

/// The library's version.
#[pyfunction]
fn library_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_function(wrap_pyfunction!(render_text, m)?)?;
    m.add_function(wrap_pyfunction!(mark, m)?)?;
    m.add_function(wrap_pyfunction!(library_version, m)?)?;
    Ok(())
}
