//! `gpu_tracker._core`: the native half of the Python package. A [`Session`] runs the library's
//! [`Tracker`] on its sampler thread; Python only maps arguments and builds the result's
//! dataclasses from the JSON this returns. No figure is computed in Python.

use std::path::PathBuf;
use std::sync::Mutex;

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
#[pyclass(module = "gpu_tracker._core")]
struct Session {
    opts: TrackerOptions,
    process_id: Option<u32>,
    sources: Mutex<Option<Sources>>,
    running: Mutex<Option<Tracker>>,
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
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(tracker);
        Ok(())
    }

    /// Stops the sampler thread (without the GIL while it takes its last sample and ends) and
    /// returns the figures as the library's JSON document.
    fn stop(&self, py: Python<'_>) -> PyResult<String> {
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
