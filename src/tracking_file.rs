//! The per-sample tracking file (`--tf FILE.csv`), in `gpu_tracker`'s CSV layout so its analysis
//! code reads ours: a header and one row of static data (units, capacities, counts), then a
//! header and one row per sample.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::units::Units;

/// One row of the tracking file: the same columns as `gpu_tracker`'s, in the chosen units.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timepoint {
    /// Column values in `gpu_tracker`'s order (see [`Timepoint::COLUMNS`]).
    pub values: [f64; 22],
}

impl Timepoint {
    /// Column names, as `gpu_tracker` writes them.
    pub const COLUMNS: [&'static str; 22] = [
        "main_ram",
        "descendants_ram",
        "combined_ram",
        "system_ram",
        "main_gpu_ram",
        "descendants_gpu_ram",
        "combined_gpu_ram",
        "system_gpu_ram",
        "gpu_sum_utilization_percent",
        "gpu_hardware_utilization_percent",
        "main_n_threads",
        "descendants_n_threads",
        "combined_n_threads",
        "cpu_system_sum_utilization_percent",
        "cpu_system_hardware_utilization_percent",
        "cpu_main_sum_utilization_percent",
        "cpu_main_hardware_utilization_percent",
        "cpu_descendants_sum_utilization_percent",
        "cpu_descendants_hardware_utilization_percent",
        "cpu_combined_sum_utilization_percent",
        "cpu_combined_hardware_utilization_percent",
        "timestamp",
    ];
}

/// A failure to open or write the tracking file.
#[derive(Debug, thiserror::Error)]
pub enum TrackingFileError {
    /// Only CSV is written.
    #[error("tracking file {0}: only .csv is supported (SQLite is not)")]
    Extension(PathBuf),
    /// The file exists and overwriting was not asked for.
    #[error("tracking file {0} already exists; pass --overwrite to replace it")]
    Exists(PathBuf),
    /// I/O.
    #[error("tracking file {0}: {1}")]
    Io(PathBuf, #[source] io::Error),
}

/// Facts that do not change during a run: the first data row of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticData {
    /// Units.
    pub units: Units,
    /// Machine memory, in the RAM unit.
    pub ram_system_capacity: f64,
    /// All GPUs' memory, in the GPU RAM unit.
    pub gpu_ram_system_capacity: f64,
    /// CPUs online.
    pub system_core_count: u32,
    /// Expected cores.
    pub n_expected_cores: u32,
    /// GPUs on the machine.
    pub system_gpu_count: u32,
    /// Selected GPUs.
    pub n_expected_gpus: u32,
}

/// An open tracking file.
#[derive(Debug)]
pub struct TrackingFile {
    path: PathBuf,
    w: BufWriter<File>,
}

/// A number as Python's `repr` writes it (`0.0`, `104.7`).
fn num(v: f64) -> String {
    format!("{v:?}")
}

impl TrackingFile {
    /// Creates the file; refuses to replace one unless `overwrite`.
    pub fn create(path: &Path, overwrite: bool) -> Result<TrackingFile, TrackingFileError> {
        if path.extension().and_then(|e| e.to_str()) != Some("csv") {
            return Err(TrackingFileError::Extension(path.to_path_buf()));
        }
        let mut o = std::fs::OpenOptions::new();
        o.write(true);
        if overwrite {
            o.create(true).truncate(true);
        } else {
            o.create_new(true);
        }
        let f = o.open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                TrackingFileError::Exists(path.to_path_buf())
            } else {
                TrackingFileError::Io(path.to_path_buf(), e)
            }
        })?;
        Ok(TrackingFile {
            path: path.to_path_buf(),
            w: BufWriter::new(f),
        })
    }

    fn io(&self, e: io::Error) -> TrackingFileError {
        TrackingFileError::Io(self.path.clone(), e)
    }

    /// Writes the static header and row, then the sample header.
    pub fn write_static(&mut self, s: &StaticData) -> Result<(), TrackingFileError> {
        let text = format!(
            "ram_unit,gpu_ram_unit,time_unit,ram_system_capacity,gpu_ram_system_capacity,\
             system_core_count,n_expected_cores,system_gpu_count,n_expected_gpus\n\
             {},{},{},{},{},{},{},{},{}\n{}\n",
            s.units.ram,
            s.units.gpu_ram,
            s.units.time,
            num(s.ram_system_capacity),
            num(s.gpu_ram_system_capacity),
            s.system_core_count,
            s.n_expected_cores,
            s.system_gpu_count,
            s.n_expected_gpus,
            Timepoint::COLUMNS.join(",")
        );
        self.w.write_all(text.as_bytes()).map_err(|e| self.io(e))?;
        self.w.flush().map_err(|e| self.io(e))
    }

    /// Appends one sample and flushes it, so an interrupted run keeps its rows.
    pub fn write_row(&mut self, tp: &Timepoint) -> Result<(), TrackingFileError> {
        let cells: Vec<String> = tp
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if (10..=12).contains(&i) {
                    format!("{}", *v as u64) // thread counts are integers
                } else {
                    num(*v)
                }
            })
            .collect();
        writeln!(self.w, "{}", cells.join(",")).map_err(|e| self.io(e))?;
        self.w.flush().map_err(|e| self.io(e))
    }
}
