//! Units for memory and time, with the same words and decimal factors as the `gpu_tracker`
//! Python package (1 gigabyte = 1e9 bytes), so figures and command lines carry over.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

// The bounds of every duration and count the settings file and the command lines take, in one
// place: the plugin, the commands, their messages and the tests all use these.

/// Seconds in a day.
pub const SECONDS_PER_DAY: f64 = 86_400.0;
/// The shortest sampling interval anything accepts (`min_interval`, `gpu-tracker --st`).
pub const MIN_INTERVAL_SECONDS: f64 = 0.1;
/// The longest sampling interval: `interval`, `min_interval`, `--gpu-track=SECONDS`,
/// `gpu-tracker --st`. A day: a step sampled less often has only its end figures.
pub const MAX_INTERVAL_SECONDS: f64 = SECONDS_PER_DAY;
/// The shortest `checkpoint_interval` other than 0 (0: the record is written only at the end).
pub const MIN_CHECKPOINT_SECONDS: f64 = 1.0;
/// The longest `checkpoint_interval`.
pub const MAX_CHECKPOINT_SECONDS: f64 = SECONDS_PER_DAY;
/// The longest age, in days: `retention_days`, `gpu-tracker-report --older-than` and the ages of
/// `--since`. 100 years of 365.25 days.
pub const MAX_AGE_DAYS: u32 = 36_525;
/// The first year `gpu-tracker-report --since DATE` accepts: nothing was tracked before 1970.
pub const FIRST_SINCE_YEAR: i32 = 1970;
/// The last year `--since DATE` accepts: the last a four-digit `YYYY` can give.
pub const LAST_SINCE_YEAR: i32 = 9999;
/// The most cores `gpu-tracker --nec` accepts (Linux builds for at most 8192 CPUs).
pub const MAX_EXPECTED_CORES: u32 = 65_536;

/// Cores busy on average over `seconds` of wall time in which `cpu_seconds` of CPU time were
/// used (a counter that went back, a process gone from the sum, counts as none). Both samplers
/// and the timeline turn CPU time into a rate here.
pub fn cores_busy(cpu_seconds: f64, seconds: f64) -> f64 {
    cpu_seconds.max(0.0) / seconds
}

/// Bytes in binary units, as the summaries print them: `512 B`, `12 KiB`, `5.4 MiB`, `1.00 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    let (k, m, g, t) = (
        1024.0,
        1024.0f64.powi(2),
        1024.0f64.powi(3),
        1024.0f64.powi(4),
    );
    if b >= t {
        format!("{:.2} TiB", b / t)
    } else if b >= g {
        format!("{:.2} GiB", b / g)
    } else if b >= m {
        format!("{:.1} MiB", b / m)
    } else if b >= k {
        format!("{:.0} KiB", b / k)
    } else {
        format!("{bytes} B")
    }
}

/// The sum of `values`, stopping at `u64::MAX` rather than wrapping: figures read from records
/// are added over nodes, steps and GPUs, and a record's numbers are not to be trusted to fit.
pub fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

/// Whether `value` lies in `min..=max`; never for NaN.
pub fn within(value: f64, min: f64, max: f64) -> bool {
    value >= min && value <= max
}

/// `seconds` as a [`Duration`]; `None` for a negative, NaN or too large value, where
/// `Duration::from_secs_f64` would panic.
pub fn checked_duration(seconds: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(seconds).ok()
}

/// `days` as a [`Duration`]; `None` where [`checked_duration`] gives none.
pub fn checked_days(days: f64) -> Option<Duration> {
    checked_duration(days * SECONDS_PER_DAY)
}

/// A unit of memory. Decimal, as in `gpu_tracker`: `kilobytes` is 1e3 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemUnit {
    /// 1 byte.
    Bytes,
    /// 1e3 bytes.
    Kilobytes,
    /// 1e6 bytes.
    Megabytes,
    /// 1e9 bytes (the default, as in `gpu_tracker`).
    Gigabytes,
    /// 1e12 bytes.
    Terabytes,
}

impl MemUnit {
    /// Every unit, smallest first.
    pub const ALL: [MemUnit; 5] = [
        MemUnit::Bytes,
        MemUnit::Kilobytes,
        MemUnit::Megabytes,
        MemUnit::Gigabytes,
        MemUnit::Terabytes,
    ];

    /// How many bytes one of this unit holds.
    pub fn bytes(self) -> f64 {
        match self {
            MemUnit::Bytes => 1.0,
            MemUnit::Kilobytes => 1e3,
            MemUnit::Megabytes => 1e6,
            MemUnit::Gigabytes => 1e9,
            MemUnit::Terabytes => 1e12,
        }
    }

    /// `bytes` expressed in this unit.
    pub fn from_bytes(self, bytes: u64) -> f64 {
        bytes as f64 / self.bytes()
    }

    /// The word used on the command line and in output.
    pub fn as_str(self) -> &'static str {
        match self {
            MemUnit::Bytes => "bytes",
            MemUnit::Kilobytes => "kilobytes",
            MemUnit::Megabytes => "megabytes",
            MemUnit::Gigabytes => "gigabytes",
            MemUnit::Terabytes => "terabytes",
        }
    }
}

/// A unit of time, as in `gpu_tracker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// 1 second.
    Seconds,
    /// 60 seconds.
    Minutes,
    /// 3600 seconds (the default, as in `gpu_tracker`).
    Hours,
    /// 86400 seconds.
    Days,
}

impl TimeUnit {
    /// Every unit, smallest first.
    pub const ALL: [TimeUnit; 4] = [
        TimeUnit::Seconds,
        TimeUnit::Minutes,
        TimeUnit::Hours,
        TimeUnit::Days,
    ];

    /// How many seconds one of this unit holds.
    pub fn seconds(self) -> f64 {
        match self {
            TimeUnit::Seconds => 1.0,
            TimeUnit::Minutes => 60.0,
            TimeUnit::Hours => 3600.0,
            TimeUnit::Days => 86400.0,
        }
    }

    /// `seconds` expressed in this unit.
    pub fn from_seconds(self, seconds: f64) -> f64 {
        seconds / self.seconds()
    }

    /// The word used on the command line and in output.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Minutes => "minutes",
            TimeUnit::Hours => "hours",
            TimeUnit::Days => "days",
        }
    }
}

/// A unit word that is not one of the accepted ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{given}\" is not a valid {kind} unit; valid values are {valid}")]
pub struct UnitError {
    given: String,
    kind: &'static str,
    valid: String,
}

fn parse_word<T: Copy>(
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    kind: &'static str,
) -> Result<T, UnitError> {
    all.iter()
        .copied()
        .find(|u| name(*u) == s)
        .ok_or_else(|| UnitError {
            given: s.to_string(),
            kind,
            valid: all.iter().map(|u| name(*u)).collect::<Vec<_>>().join(", "),
        })
}

impl FromStr for MemUnit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_word(s, &MemUnit::ALL, MemUnit::as_str, "memory")
    }
}

impl FromStr for TimeUnit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_word(s, &TimeUnit::ALL, TimeUnit::as_str, "time")
    }
}

impl fmt::Display for MemUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The units a report is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    /// Unit of host memory figures (`--ru`).
    pub ram: MemUnit,
    /// Unit of GPU memory figures (`--gru`).
    pub gpu_ram: MemUnit,
    /// Unit of time figures (`--tu`).
    pub time: TimeUnit,
}

impl Default for Units {
    fn default() -> Self {
        Units {
            ram: MemUnit::Gigabytes,
            gpu_ram: MemUnit::Gigabytes,
            time: TimeUnit::Hours,
        }
    }
}

/// A percentage as every summary prints it: whole percent, `37%`.
pub fn percent(p: f64) -> String {
    format!("{p:.0}%")
}

/// [`percent`], or `none` where there is no figure.
pub fn percent_or(p: Option<f64>, none: &str) -> String {
    p.map_or_else(|| none.to_string(), percent)
}

/// A length of time as Slurm's `--time` takes it and `sacct` prints elapsed times:
/// `[D-]HH:MM:SS`.
pub fn slurm_time(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// A length of time as Slurm prints time limits (`squeue -o %l`): `M:SS` under an hour,
/// `H:MM:SS` under a day, else `D-HH:MM:SS`.
pub fn slurm_duration(seconds: f64) -> String {
    let s = seconds.round().clamp(0.0, 1e12) as u64;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{sec:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{sec:02}")
    } else {
        format!("{m}:{sec:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_percents_read_as_slurm_and_the_summaries_print_them() {
        assert_eq!(slurm_time(59), "00:00:59");
        assert_eq!(slurm_time(90_061), "1-01:01:01");
        assert_eq!(slurm_duration(2.4), "0:02");
        assert_eq!(slurm_duration(60.0), "1:00");
        assert_eq!(slurm_duration(7200.0), "2:00:00");
        assert_eq!(slurm_duration(90_061.0), "1-01:01:01");
        assert_eq!(percent(37.4), "37%");
        assert_eq!(percent_or(None, "n/a"), "n/a");
    }

    #[test]
    fn words_round_trip_and_factors_are_decimal() {
        for u in MemUnit::ALL {
            assert_eq!(u.as_str().parse::<MemUnit>().unwrap(), u);
        }
        for u in TimeUnit::ALL {
            assert_eq!(u.as_str().parse::<TimeUnit>().unwrap(), u);
        }
        assert_eq!(MemUnit::Megabytes.from_bytes(256_000_000), 256.0);
        assert_eq!(MemUnit::Gigabytes.from_bytes(1_500_000_000), 1.5);
        assert_eq!(TimeUnit::Minutes.from_seconds(90.0), 1.5);
    }

    #[test]
    fn durations_out_of_range_are_none_not_a_panic() {
        for s in [1e300, 1e20, f64::MAX, f64::INFINITY, f64::NAN, -1.0, -1e-9] {
            assert_eq!(checked_duration(s), None, "{s}");
        }
        assert_eq!(checked_duration(1.5), Some(Duration::from_millis(1500)));
        assert_eq!(checked_duration(0.0), Some(Duration::ZERO));
        assert_eq!(checked_days(1e300), None);
        assert_eq!(checked_days(f64::NAN), None);
        assert_eq!(checked_days(0.5), Some(Duration::from_secs(43_200)));
        let most = checked_days(f64::from(MAX_AGE_DAYS)).unwrap();
        assert_eq!(most.as_secs(), 36_525 * 86_400);
        assert!(checked_duration(MAX_INTERVAL_SECONDS).is_some());
    }

    #[test]
    fn within_is_inclusive_and_refuses_nan() {
        assert!(within(0.1, 0.1, 86_400.0) && within(86_400.0, 0.1, 86_400.0));
        assert!(!within(86_400.1, 0.1, 86_400.0) && !within(0.09, 0.1, 86_400.0));
        assert!(!within(f64::NAN, 0.0, f64::INFINITY));
        assert!(!within(f64::INFINITY, 0.0, f64::MAX));
    }

    #[test]
    fn unknown_word_names_the_valid_ones() {
        let e = "mebibytes".parse::<MemUnit>().unwrap_err().to_string();
        assert!(
            e.contains("\"mebibytes\" is not a valid memory unit"),
            "{e}"
        );
        assert!(e.contains("bytes, kilobytes, megabytes, gigabytes, terabytes"));
        assert!("weeks".parse::<TimeUnit>().is_err());
    }
}
