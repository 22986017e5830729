//! Units for memory and time, with the same words and decimal factors as the `gpu_tracker`
//! Python package (1 gigabyte = 1e9 bytes), so figures and command lines carry over.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

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
