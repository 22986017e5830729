//! The `[advise]` table of the settings file: the note `sbatch`, `salloc` and `srun` print at
//! submission from the user's own finished jobs (`slurm/cli_filter.lua`), and
//! `gpu-tracker-report --advise`.

use serde::Deserialize;

use crate::units::within;

/// Settings of the advice at submission.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdviseConfig {
    /// The note at submission, for the whole site; `gpu-tracker-report --advise` works either
    /// way.
    pub enabled: bool,
    /// Days of the user's finished jobs looked at (1 to 365).
    pub days: f64,
    /// Fewest matching past jobs for a note (1 to 100).
    pub min_jobs: u32,
    /// The suggested `--mem` is the largest memory a past job needed times this (1 to 10).
    pub mem_margin: f64,
    /// The suggested `--time` is the longest past run times this (1 to 10), ...
    pub time_margin: f64,
    /// ... and never under this many minutes (1 to 1440).
    pub min_time_minutes: f64,
    /// Seconds a submission waits for Slurm's database when the user's history must be asked
    /// for again (0.05 to 10); a slower answer is used by the next submission.
    pub wait_seconds: f64,
    /// Seconds between two questions to Slurm's database for one user, at least (5 to 86400).
    pub refresh_seconds: f64,
    /// GPUs and MIG profiles smaller than a full GPU that the site offers, for "a smaller GPU
    /// would have fitted".
    pub gpu_types: Vec<GpuType>,
}

/// A GPU type or MIG profile users can ask for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuType {
    /// What to ask for: the `--gres` value (`gpu:1g.10gb:1`).
    pub gres: String,
    /// Its memory, GiB.
    pub memory_gib: f64,
    /// Its share of a full GPU's compute, percent (a 1g MIG profile of seven: 14).
    pub compute_percent: f64,
}

impl Default for AdviseConfig {
    fn default() -> Self {
        AdviseConfig {
            enabled: true,
            days: 30.0,
            min_jobs: 2,
            mem_margin: 1.2,
            time_margin: 1.5,
            min_time_minutes: 10.0,
            wait_seconds: 0.5,
            refresh_seconds: 20.0,
            gpu_types: Vec::new(),
        }
    }
}

impl AdviseConfig {
    /// The first key with a value that cannot work, and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let ranges: [(&'static str, f64, f64, f64); 7] = [
            ("advise.days", self.days, 1.0, 365.0),
            ("advise.min_jobs", f64::from(self.min_jobs), 1.0, 100.0),
            ("advise.mem_margin", self.mem_margin, 1.0, 10.0),
            ("advise.time_margin", self.time_margin, 1.0, 10.0),
            (
                "advise.min_time_minutes",
                self.min_time_minutes,
                1.0,
                1440.0,
            ),
            ("advise.wait_seconds", self.wait_seconds, 0.05, 10.0),
            (
                "advise.refresh_seconds",
                self.refresh_seconds,
                5.0,
                86_400.0,
            ),
        ];
        for (key, v, min, max) in ranges {
            if !within(v, min, max) {
                return Err((key, format!("must be from {min} to {max}")));
            }
        }
        for t in &self.gpu_types {
            let gres_ok = !t.gres.is_empty()
                && t.gres.len() <= 64
                && t.gres
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c));
            if !gres_ok {
                return Err((
                    "advise.gpu_types",
                    "gres must be 1 to 64 of A-Z a-z 0-9 . _ : -".into(),
                ));
            }
            if !within(t.memory_gib, 0.1, 100_000.0) || !within(t.compute_percent, 1.0, 100.0) {
                return Err((
                    "advise.gpu_types",
                    "memory_gib must be from 0.1 to 100000, compute_percent from 1 to 100".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_each_bound_is_checked() {
        assert_eq!(AdviseConfig::default().check(), Ok(()));
        let bad = AdviseConfig {
            mem_margin: 0.9,
            ..AdviseConfig::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "advise.mem_margin");
        let bad = AdviseConfig {
            gpu_types: vec![GpuType {
                gres: "gpu:1g.10gb;rm".into(),
                memory_gib: 10.0,
                compute_percent: 14.0,
            }],
            ..AdviseConfig::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "advise.gpu_types");
    }
}
