//! `gpu-tracker`'s command line, with the names and defaults of the `gpu_tracker` Python
//! package's, and how it becomes the tracker's options.

use std::path::PathBuf;

use clap::{ArgAction, Parser};

use crate::gpu::{GpuConfig, Vendor};
use crate::history::AlertRules;
use crate::history::mark::Inbox;
use crate::sampler::MemoryDetail;
use crate::tracker::{LogFn, TrackerOptions};
use crate::units::{
    MAX_EXPECTED_CORES, MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS, MemUnit, TimeUnit, Units,
};

/// Tracks the computational resource usage (RAM, GPU RAM, CPU utilization, GPU utilization and
/// compute time) of a shell command and its descendants. Peaks come from kernel high-water marks
/// and cgroup counters, so short spikes are not missed.
#[derive(Debug, Parser)]
#[command(name = "gpu-tracker", version, disable_version_flag = true)]
pub struct Args {
    /// The command to run, with its arguments, in quotes (run by `sh -c`), e.g. "ls -l -a".
    #[arg(short = 'e', long = "execute", value_name = "COMMAND")]
    pub execute: Option<String>,
    /// File to write the measurements to; printed to the screen if not set.
    #[arg(short = 'o', long = "output", value_name = "OUTPUT")]
    pub output: Option<PathBuf>,
    /// Format of the output: text or json.
    #[arg(short = 'f', long = "format", value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"])]
    pub format: String,
    /// Seconds between samples, from 0.1 to 86400 (1 day).
    #[arg(long = "st", value_name = "SLEEP_TIME", default_value_t = 1.0, value_parser = sleep_time)]
    pub st: f64,
    /// RAM unit: bytes, kilobytes, megabytes, gigabytes or terabytes (decimal).
    #[arg(long = "ru", value_name = "RAM_UNIT", default_value = "gigabytes")]
    pub ru: MemUnit,
    /// GPU RAM unit: bytes, kilobytes, megabytes, gigabytes or terabytes (decimal).
    #[arg(long = "gru", value_name = "GPU_RAM_UNIT", default_value = "gigabytes")]
    pub gru: MemUnit,
    /// Time unit: seconds, minutes, hours or days.
    #[arg(long = "tu", value_name = "TIME_UNIT", default_value = "hours")]
    pub tu: TimeUnit,
    /// Number of cores expected to be used, from 1 to 65536; all cores of the machine by default.
    #[arg(long = "nec", value_name = "NUM_CORES", value_parser = expected_cores)]
    pub nec: Option<u32>,
    /// Comma-separated UUIDs of the GPUs whose utilization to track; all GPUs by default.
    #[arg(long = "guuids", value_name = "GPU_UUIDS", value_delimiter = ',')]
    pub guuids: Option<Vec<String>>,
    /// Suppress warnings.
    #[arg(long = "disable-logs")]
    pub disable_logs: bool,
    /// CSV file to store every sample in (gpu_tracker's tracking-file layout).
    #[arg(long = "tf", value_name = "TRACKING_FILE")]
    pub tf: Option<PathBuf>,
    /// Replace the tracking file if it exists.
    #[arg(long = "overwrite")]
    pub overwrite: bool,
    /// The brand of GPU to track: nvidia or amd; by default every brand found (NVIDIA's first).
    #[arg(long = "gb", value_name = "GPU_BRAND", value_parser = gpu_brand)]
    pub gb: Option<Vendor>,
    /// The directory AMD's kernel files are read under, `/` by default: another one is a
    /// simulated node, for the project's tests only.
    #[arg(
        long = "amd-root",
        value_name = "DIR",
        env = "GPU_TRACKER_AMD_ROOT",
        hide = true
    )]
    pub amd_root: Option<PathBuf>,
    /// Path of libnvidia-ml.so.1 (default: the dynamic loader's search path).
    #[arg(long = "nvml-lib", value_name = "PATH", env = "GPU_TRACKER_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// Do not give the command a cgroup of its own (the combined peak is then sampled).
    #[arg(long = "no-cgroup")]
    pub no_cgroup: bool,
    /// Read the private/shared split from /proc/PID/statm only (cheaper on huge processes).
    #[arg(long = "cheap-memory-split")]
    pub cheap_memory_split: bool,
    /// Write the command's timeline (memory, CPU, each GPU over time, in bounded buckets) to
    /// FILE: .csv or .json.
    #[arg(long = "timeline", value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Write the command's events (start, exit, phase marks, alerts, lost GPUs) to FILE: .csv
    /// or .json.
    #[arg(long = "events", value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Draw memory, CPU and each GPU over time, with phases and events, to FILE: .svg or .png.
    #[arg(long = "plot", value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Print version.
    #[arg(short = 'V', short_alias = 'v', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,
}

impl Args {
    /// The command to run: `-e`'s, unless it is empty.
    pub fn command(&self) -> Option<&str> {
        self.execute.as_deref().filter(|c| !c.trim().is_empty())
    }

    /// Where warnings go: stderr, or nowhere (`--disable-logs`).
    pub fn log(&self) -> Option<LogFn> {
        if self.disable_logs {
            None
        } else {
            Some(std::sync::Arc::new(|m: &str| {
                eprintln!("gpu-tracker: warning: {m}")
            }))
        }
    }

    /// What is wrong with the names of `--timeline`, `--events` and `--plot`, whose endings
    /// say their formats.
    pub fn check_exports(&self) -> Result<(), String> {
        let export = |p: &Option<PathBuf>, exts: &[&str], what: &str| -> Result<(), String> {
            let Some(p) = p else { return Ok(()) };
            let ext = p
                .extension()
                .map(|e| e.to_string_lossy().to_ascii_lowercase())
                .unwrap_or_default();
            if !exts.contains(&ext.as_str()) {
                return Err(format!(
                    "{what} {}: the name must end in .{}",
                    p.display(),
                    exts.join(" or .")
                ));
            }
            Ok(())
        };
        export(&self.timeline, &["csv", "json"], "--timeline")?;
        export(&self.events, &["csv", "json"], "--events")?;
        export(&self.plot, &["svg", "png"], "--plot")
    }

    /// The tracker's options; phase marks come in through `marks`, warnings go to `log`.
    pub fn tracker_options(
        &self,
        marks: Option<std::sync::Arc<std::sync::Mutex<Inbox>>>,
        log: Option<LogFn>,
    ) -> TrackerOptions {
        TrackerOptions {
            sleep_time: self.st,
            units: Units {
                ram: self.ru,
                gpu_ram: self.gru,
                time: self.tu,
            },
            n_expected_cores: self.nec,
            gpu_uuids: self.guuids.clone(),
            memory_detail: if self.cheap_memory_split {
                MemoryDetail::Status
            } else {
                MemoryDetail::SmapsRollup
            },
            gpu: GpuConfig {
                nvml_lib: self.nvml_lib.clone(),
                disabled: false,
                mig: false,
                brand: self.gb,
                amd_root: self.amd_root.clone(),
            },
            tracking_file: None,
            overwrite: self.overwrite,
            log,
            alerts: AlertRules::default(),
            marks,
        }
    }
}

/// `--st`: seconds, from [`MIN_INTERVAL_SECONDS`] to [`MAX_INTERVAL_SECONDS`] (a longer one
/// would not fit the sampler's clock).
fn sleep_time(s: &str) -> Result<f64, String> {
    crate::cli::number_within(
        s,
        MIN_INTERVAL_SECONDS,
        MAX_INTERVAL_SECONDS,
        &format!(
            "the sleep time must be at least {MIN_INTERVAL_SECONDS} and at most {MAX_INTERVAL_SECONDS} seconds (1 day)"
        ),
    )
}

/// `--gb`: `nvidia` or `amd`, as gpu_tracker's `gpu_brand`.
fn gpu_brand(s: &str) -> Result<Vendor, String> {
    s.parse()
}

/// `--nec`: from 1 to [`MAX_EXPECTED_CORES`].
fn expected_cores(s: &str) -> Result<u32, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_EXPECTED_CORES).contains(n))
        .ok_or_else(|| {
            format!("the number of expected cores must be from 1 to {MAX_EXPECTED_CORES}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_time_is_from_a_tenth_of_a_second_to_a_day() {
        for (s, v) in [("0.1", 0.1), ("1", 1.0), ("86400", 86400.0)] {
            assert_eq!(sleep_time(s), Ok(v));
        }
        for s in ["0.09", "86400.5", "1e19", "1e300", "inf", "nan", "-1"] {
            let e = sleep_time(s).unwrap_err();
            assert!(
                e.contains("at least 0.1 and at most 86400 seconds"),
                "{s}: {e}"
            );
        }
        let a = Args::try_parse_from(["gpu-tracker", "-e", "true"]).unwrap();
        assert_eq!(a.st, 1.0);
    }

    #[test]
    fn expected_cores_are_from_1_to_65536() {
        assert_eq!(expected_cores("1"), Ok(1));
        assert_eq!(expected_cores("65536"), Ok(65536));
        for s in ["0", "65537", "4294967295", "4294967296", "-1", "2.5"] {
            let e = expected_cores(s).unwrap_err();
            assert!(e.contains("from 1 to 65536"), "{s}: {e}");
        }
    }
}
