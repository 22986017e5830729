//! One rule for every `--mem` and `--time` gpu-tracker suggests: the end-of-job advice, the
//! array summary's "Next time", the note at submission and `gpu-tracker-report --advise` all
//! size here, with the site's margins (`[advise] mem_margin`, `time_margin`,
//! `min_time_minutes`).
//!
//! A run's figures say what it needed only where it was not stopped: a run killed for memory
//! at its limit, or stopped at its time limit, needed more than that limit, by an amount
//! nobody measured. So the evidence of a set of runs ([`Evidence`]) keeps apart the most a
//! run that was not stopped needed and the highest limit a stopped run hit. From measured
//! needs alone the request is a fit (the need times the margin); where some run was stopped it
//! is a guess ([`Sized::guess`]): [`GUESS_FACTOR`] times the limit hit (the highest, where runs
//! hit several), or the fit of
//! the other runs where that is more. A guess is always above every limit a run hit.

use serde::Serialize;

use crate::config::AdviseConfig;

/// A guess for a run stopped at its limit asks for this many times the limit it hit.
pub const GUESS_FACTOR: f64 = 2.0;

/// The rule of a guess, for people.
pub const GUESS_RULE: &str = "twice the limit hit";

/// The site's margins, as the settings give them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizing {
    /// `--mem` is the most memory a run needed times this.
    pub mem_margin: f64,
    /// `--time` is the longest run times this, ...
    pub time_margin: f64,
    /// ... and never under this many seconds.
    pub min_time_seconds: u64,
}

impl Sizing {
    /// The margins of the settings' `[advise]` table.
    pub fn of(cfg: &AdviseConfig) -> Sizing {
        Sizing {
            mem_margin: cfg.mem_margin,
            time_margin: cfg.time_margin,
            min_time_seconds: (cfg.min_time_minutes * 60.0).ceil().clamp(60.0, 1e9) as u64,
        }
    }

    /// The memory margin as a percentage over the need (`20` for 1.2).
    pub fn mem_percent(&self) -> f64 {
        (self.mem_margin - 1.0) * 100.0
    }

    /// The time margin as a percentage over the run (`50` for 1.5).
    pub fn time_percent(&self) -> f64 {
        (self.time_margin - 1.0) * 100.0
    }

    /// The smallest time suggested, whole minutes.
    pub fn min_time_minutes(&self) -> u64 {
        self.min_time_seconds.div_ceil(60)
    }

    /// The `--mem` for evidence `e` (bytes per node): `None` with no figure at all.
    pub fn mem(&self, e: &Evidence) -> Option<Sized> {
        let fit = (e.measured > 0.0).then(|| scaled(e.measured, self.mem_margin));
        let guess = (e.stopped > 0 && e.at_least > 0.0).then(|| scaled(e.at_least, GUESS_FACTOR));
        let bytes = fit.into_iter().chain(guess).max()?;
        let option = mem_option(bytes);
        Some(Sized {
            value: mem_option_bytes(&option),
            option,
            guess: e.stopped > 0,
        })
    }

    /// The `--time` for evidence `e` (seconds): whole minutes, at least
    /// [`Sizing::min_time_seconds`]; `None` with no figure at all.
    pub fn time(&self, e: &Evidence) -> Option<Sized> {
        let fit = (e.measured > 0.0).then(|| scaled(e.measured, self.time_margin));
        let guess = (e.stopped > 0 && e.at_least > 0.0).then(|| scaled(e.at_least, GUESS_FACTOR));
        let seconds = fit.into_iter().chain(guess).max()?;
        let seconds = (seconds.div_ceil(60) * 60).max(self.min_time_seconds);
        Some(Sized {
            option: crate::units::slurm_time(seconds),
            value: seconds,
            guess: e.stopped > 0,
        })
    }
}

impl Default for Sizing {
    /// The built-in settings' margins.
    fn default() -> Self {
        Sizing::of(&AdviseConfig::default())
    }
}

/// `x × factor`, rounded up, as a whole number.
fn scaled(x: f64, factor: f64) -> u64 {
    (x * factor).ceil().clamp(0.0, u64::MAX as f64) as u64
}

/// What a set of runs says about one resource's need: bytes of memory, or seconds of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// Runs looked at.
    pub runs: usize,
    /// Of them, runs stopped at their limit (killed for memory, out of time): what they
    /// needed is not known, only that it was more than [`Evidence::at_least`].
    pub stopped: usize,
    /// The most a run that was not stopped needed; 0: none.
    pub measured: f64,
    /// The highest limit a stopped run hit; 0: none, or not known.
    pub at_least: f64,
}

impl Evidence {
    /// A run that was not stopped, which needed `need`.
    pub fn measured(&mut self, need: f64) {
        self.runs += 1;
        if need.is_finite() {
            self.measured = self.measured.max(need);
        }
    }

    /// A run stopped at `limit` (0: not known).
    pub fn stopped_at(&mut self, limit: f64) {
        self.runs += 1;
        self.stopped += 1;
        if limit.is_finite() {
            self.at_least = self.at_least.max(limit);
        }
    }

    /// The evidence of one run that needed `need`.
    pub fn of_need(need: f64) -> Evidence {
        let mut e = Evidence::default();
        e.measured(need);
        e
    }

    /// The evidence of one run stopped at `limit`.
    pub fn of_limit(limit: f64) -> Evidence {
        let mut e = Evidence::default();
        e.stopped_at(limit);
        e
    }
}

/// A suggested request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sized {
    /// As the option takes it: `512M`, `00:10:00`.
    pub option: String,
    /// Bytes, or seconds.
    pub value: u64,
    /// Some run was stopped at its limit: a guess ([`GUESS_RULE`]), not a fit.
    pub guess: bool,
}

/// A `--mem` value Slurm takes, at least `bytes`: multiples of 256 MiB up to 4 GiB, whole GiB
/// above.
pub fn mem_option(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes <= 4 * GIB {
        let m = bytes.div_ceil(256 * MIB).max(1) * 256;
        if m % 1024 == 0 {
            format!("{}G", m / 1024)
        } else {
            format!("{m}M")
        }
    } else {
        format!("{}G", bytes.div_ceil(GIB))
    }
}

/// The bytes of a [`mem_option`] text (`256M`, `3G`); 0 for anything else.
pub fn mem_option_bytes(text: &str) -> u64 {
    let (num, unit) = text.split_at(text.len().saturating_sub(1));
    let n: u64 = num.parse().unwrap_or(0);
    match unit {
        "M" => n << 20,
        "G" => n << 30,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
