//! The site's settings for the Slurm plugin (`gpu-tracker.toml`, named in `plugstack.conf` as
//! `config=/etc/slurm/gpu-tracker.toml`), and the user's `--gpu-track[=SECONDS|off]` option.
//!
//! Bad settings never fail a job: the plugin logs the error (which names the key) and leaves
//! tracking off. Every key is optional; an empty file gives the defaults below.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::sampler::MemoryDetail;

pub use admin_comment::{AdminCommentConfig, CommentFormat, OtherComment};
pub use advise::{AdviseConfig, GpuType};
pub use mail::{MailConfig, MailerKind, SummaryMailType, mail_table_of};
pub use paths::lexical;

use crate::units::{
    MAX_AGE_DAYS, MAX_CHECKPOINT_SECONDS, MAX_INTERVAL_SECONDS, MIN_CHECKPOINT_SECONDS,
    MIN_INTERVAL_SECONDS, within,
};

/// Where the plugin's settings file usually is.
pub const DEFAULT_PATH: &str = "/etc/slurm/gpu-tracker.toml";

/// Kinds of job step that can be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// The batch script's step.
    Batch,
    /// Steps started by `srun` (inside a batch job or an allocation).
    Srun,
    /// The step of `salloc`/`srun --pty` interactive sessions.
    Interactive,
    /// The extern step (processes adopted by `pam_slurm_adopt`).
    Extern,
}

impl StepKind {
    /// The name used in settings and records.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Batch => "batch",
            StepKind::Srun => "srun",
            StepKind::Interactive => "interactive",
            StepKind::Extern => "extern",
        }
    }
}

/// The plugin's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Directory of the records: `<spool_dir>/<cluster>/<jobid>/<node>.<step>.json`. Must be an absolute
    /// path on a root-owned, local filesystem.
    pub spool_dir: PathBuf,
    /// Seconds between samples when a job asks for tracking without a value: from
    /// `min_interval` to [`MAX_INTERVAL_SECONDS`] (a day).
    pub interval: f64,
    /// Shortest interval a user may ask for with `--gpu-track=SECONDS`: from
    /// [`MIN_INTERVAL_SECONDS`] (0.1) to [`MAX_INTERVAL_SECONDS`] (a day).
    pub min_interval: f64,
    /// Track every job; users opt out with `--gpu-track=off`.
    pub track_all: bool,
    /// Path or name of the NVIDIA management library; empty turns GPU tracking off.
    pub nvml_library: String,
    /// Which steps are tracked.
    pub steps: Vec<StepKind>,
    /// Seconds between rewrites of a running step's (incomplete) record; 0 writes only at the end.
    /// Otherwise from [`MIN_CHECKPOINT_SECONDS`] (1) to [`MAX_CHECKPOINT_SECONDS`] (a day).
    pub checkpoint_interval: f64,
    /// How the private/shared memory split is read.
    pub memory_detail: MemoryDetail,
    /// Append the job's summary to the output of tracked batch jobs, and print a step's summary
    /// on the terminal of `srun --gpu-track` outside batch jobs.
    pub summary: bool,
    /// Days `gpu-tracker-report --purge` keeps records, up to [`MAX_AGE_DAYS`] (100 years); 0
    /// keeps them for ever.
    pub retention_days: f64,
    /// Numbered steps of a job whose records are written: steps numbered this and above are
    /// not tracked, and the job's directory says so. From 1 to [`MAX_RECORDS_SETTING`].
    pub max_step_records: u32,
    /// Step records of a job that its summary reads (at the end of a batch job, in
    /// `gpu-tracker-report`): the batch, interactive and extern steps first, then the numbered
    /// steps in order; the summary says how many were left out. From 1 to
    /// [`MAX_RECORDS_SETTING`].
    pub max_summary_records: u32,
    /// Slurm's gres.conf, which gives the order of the node's GPUs; empty: the one beside
    /// slurmstepd's `SLURM_CONF`, else `/etc/slurm/gres.conf`, else `/run/slurm/conf/gres.conf`.
    pub gres_conf: String,
    /// The NVIDIA driver's table of MIG capability minors, which turns a MIG instance's
    /// capability files in gres.conf into the instance.
    pub mig_minors_file: String,
    /// The directory AMD's kernel files are read under (`sys/class/kfd`, `sys/class/drm`):
    /// `/` on every real node. Another directory (root's, not writable by others) is a
    /// simulated node, for tests only.
    pub amd_root: String,
    /// Directory of the phase-mark sockets (`gpu-tracker mark`): root-owned, not writable by
    /// others, on a local filesystem (`/run`); made when missing. `""` turns marks off.
    pub mark_dir: String,
    /// Directory of the running steps' live state files, which `gpu-tracker-exporter` serves
    /// to Prometheus (docs/EXPORTER.md): root-owned, not writable by others, on a node-local
    /// filesystem (`/run`); made when missing. `""` turns live state off.
    pub live_dir: String,
    /// The group (a name, or a number) that may read the live state files (the exporter's);
    /// `""`: root only.
    pub live_group: String,
    /// Seconds between rewrites of a running step's live state file (after a sample, at most
    /// this often): from [`MIN_LIVE_SECONDS`] to [`MAX_LIVE_SECONDS`].
    pub live_interval_seconds: f64,
    /// Alert when a step's memory reaches this percent of its limit; 0 turns it off.
    pub alert_memory_percent: f64,
    /// Alert when an allocated GPU stays idle this many seconds in a row; 0 turns it off.
    pub alert_gpu_idle_seconds: f64,
    /// Utilization (percent) below which a GPU counts as idle, for the idle figures and alert.
    pub gpu_idle_percent: f64,
    /// Write one line to the job's stderr when an alert fires in the batch step (the job's
    /// memory near its limit, a GPU idle), while the job runs. Off unless the admin turns it on.
    pub warn_user: bool,
    /// Grams of CO2 per kWh of the site's electricity: the summary adds the emissions of the
    /// job's GPU energy. 0 (the default): no emissions line.
    pub co2_grams_per_kwh: f64,
    /// Job classes (docs/SUMMARY.md): `gpu-unused` when at least this many allocated GPUs had
    /// no process of the job; 0 turns the class off.
    pub class_gpu_unused_gpus: u32,
    /// `gpu-low` when a GPU's mean utilization is under this percent; 0 turns the class off.
    pub class_gpu_low_percent: f64,
    /// ... or, where SM activity was measured (GPM), its mean is under this percent; 0 leaves
    /// SM activity out.
    pub class_gpu_low_sm_percent: f64,
    /// `gpu-idle-tail` when a GPU that was busy then stayed idle to the end this many seconds;
    /// 0 turns the class off.
    pub class_gpu_idle_tail_seconds: f64,
    /// `mem-over` when a node's peak memory is under this fraction of `--mem` (and at least
    /// 1 GiB under it); 0 turns the class off.
    pub class_mem_over_ratio: f64,
    /// `time-over` when a completed job ran under this fraction of its time limit (and at
    /// least an hour under it); 0 turns the class off. Evaluated where Slurm's time limit is
    /// known: the site report, from Slurm's database.
    pub class_time_over_ratio: f64,
    /// `cpu-low` when the job's CPU efficiency is under this percent; 0 turns the class off.
    pub class_cpu_low_percent: f64,
    /// `oom` when at least this many processes were killed for memory; 0 turns the class off.
    pub class_oom_kills: u64,
    /// `failed` when at least this many tasks exited non-zero or were killed; 0 turns the
    /// class off.
    pub class_failed_tasks: u32,
    /// `cpu-starved` when some task of the job waited for a core at least this percent of the
    /// time (cgroup v2's pressure stall figures); 0 turns the class off.
    pub class_cpu_starved_percent: f64,
    /// `io-bound` when some task waited for I/O at least this percent of the time; 0: off.
    pub class_io_bound_percent: f64,
    /// `memory-throttled` when some task stalled on memory at least this percent of the time;
    /// 0: off.
    pub class_memory_throttled_percent: f64,
    /// The advice at submission (`[advise]`).
    pub advise: AdviseConfig,
    /// The summary stored in Slurm's database (`[admin_comment]`).
    pub admin_comment: AdminCommentConfig,
    /// The summary in Slurm's end-of-job mail (`[mail]`, `gpu-tracker-mail`).
    pub mail: MailConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            spool_dir: PathBuf::from("/var/spool/gpu-tracker"),
            interval: 1.0,
            min_interval: 0.5,
            track_all: false,
            nvml_library: "libnvidia-ml.so.1".into(),
            steps: vec![StepKind::Batch, StepKind::Srun, StepKind::Interactive],
            checkpoint_interval: 60.0,
            memory_detail: MemoryDetail::Status,
            summary: true,
            retention_days: 180.0,
            max_step_records: DEFAULT_MAX_STEP_RECORDS,
            max_summary_records: DEFAULT_MAX_SUMMARY_RECORDS as u32,
            gres_conf: String::new(),
            mig_minors_file: crate::gres::mig::DEFAULT_MIG_MINORS.into(),
            amd_root: "/".into(),
            mark_dir: "/run/gpu-tracker".into(),
            live_dir: DEFAULT_LIVE_DIR.into(),
            live_group: String::new(),
            live_interval_seconds: 5.0,
            alert_memory_percent: 90.0,
            alert_gpu_idle_seconds: 600.0,
            gpu_idle_percent: 5.0,
            warn_user: false,
            co2_grams_per_kwh: 0.0,
            class_gpu_unused_gpus: 1,
            class_gpu_low_percent: 10.0,
            class_gpu_low_sm_percent: 25.0,
            class_gpu_idle_tail_seconds: 1800.0,
            class_mem_over_ratio: 0.5,
            class_time_over_ratio: 0.25,
            class_cpu_low_percent: 25.0,
            class_oom_kills: 1,
            class_failed_tasks: 1,
            class_cpu_starved_percent: 40.0,
            class_io_bound_percent: 30.0,
            class_memory_throttled_percent: 10.0,
            advise: AdviseConfig::default(),
            admin_comment: AdminCommentConfig::default(),
            mail: MailConfig::default(),
        }
    }
}

/// A settings file that cannot be used. The message names the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    /// The file is not valid TOML, or has an unknown key or a value of the wrong type.
    #[error("{0}: {1}")]
    Syntax(PathBuf, String),
    /// A key has a value that cannot work.
    #[error("{0}: `{1}` {2}")]
    Value(PathBuf, &'static str, String),
}

/// Highest grams of CO2 per kWh accepted (coal is about 1000).
pub const MAX_CO2_GRAMS_PER_KWH: f64 = 2000.0;

/// Where the live state files go by default: not `mark_dir`, whose sockets every user must
/// reach, while the live files are for root and `live_group` only.
pub const DEFAULT_LIVE_DIR: &str = "/run/gpu-tracker-live";

/// `max_step_records` by default: numbered steps of a job whose records are written. Slurm
/// allows 40,000 steps a job by default (`MaxStepCount`).
pub const DEFAULT_MAX_STEP_RECORDS: u32 = 1000;
/// `max_summary_records` by default: step records of a job that its summary reads.
pub const DEFAULT_MAX_SUMMARY_RECORDS: usize = 1000;
/// Largest `max_step_records` and `max_summary_records`.
pub const MAX_RECORDS_SETTING: u32 = 1_000_000;

/// Shortest `live_interval_seconds`.
pub const MIN_LIVE_SECONDS: f64 = 1.0;
/// Longest `live_interval_seconds` (an hour).
pub const MAX_LIVE_SECONDS: f64 = 3600.0;

/// Whether `name` can be a `live_group`: a group name as `groupadd` takes it (letters, digits,
/// `.`, `_`, `-`, at most 32 characters, not starting with `-`), or a group id.
pub fn is_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Largest settings file read (a real one is a few hundred bytes).
pub const MAX_SETTINGS_BYTES: u64 = 1 << 20;

impl Config {
    /// Reads and checks the settings file at `path`. Only a regular file of at most
    /// [`MAX_SETTINGS_BYTES`] is read ([`crate::sys::read_small_file`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = crate::sys::read_small_file(path, MAX_SETTINGS_BYTES, "a settings file")
            .map_err(|e| ConfigError::Io(path.to_path_buf(), e))?;
        Config::parse(&text, path)
    }

    /// Parses and checks settings text; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Syntax(path.to_path_buf(), syntax_error(text, &e)))?;
        let bad = |key: &'static str, why: String| {
            let at = key_line(text, key).map_or_else(String::new, |l| format!(" (line {l})"));
            Err(ConfigError::Value(path.into(), key, format!("{why}{at}")))
        };
        if !c.spool_dir.is_absolute() {
            return bad("spool_dir", "must be an absolute path".into());
        }
        if !c.gres_conf.is_empty() && !Path::new(&c.gres_conf).is_absolute() {
            return bad("gres_conf", "must be \"\" or an absolute path".into());
        }
        if !Path::new(&c.mig_minors_file).is_absolute() {
            return bad("mig_minors_file", "must be an absolute path".into());
        }
        if !Path::new(&c.amd_root).is_absolute() {
            return bad("amd_root", "must be an absolute path".into());
        }
        // No value is shown: the file may be one the caller cannot read (the report runs as
        // root for EpilogSlurmctld). The line number says where it is.
        if !within(c.min_interval, MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS) {
            return bad(
                "min_interval",
                format!(
                    "must be from {MIN_INTERVAL_SECONDS} to {MAX_INTERVAL_SECONDS} seconds (1 day)"
                ),
            );
        }
        if !within(c.interval, c.min_interval, MAX_INTERVAL_SECONDS) {
            return bad(
                "interval",
                format!("must be from min_interval to {MAX_INTERVAL_SECONDS} seconds (1 day)"),
            );
        }
        if !(c.checkpoint_interval == 0.0
            || within(
                c.checkpoint_interval,
                MIN_CHECKPOINT_SECONDS,
                MAX_CHECKPOINT_SECONDS,
            ))
        {
            return bad(
                "checkpoint_interval",
                format!(
                    "must be 0 (only at the end) or from {MIN_CHECKPOINT_SECONDS} to {MAX_CHECKPOINT_SECONDS} seconds (1 day)"
                ),
            );
        }
        if !within(c.retention_days, 0.0, f64::from(MAX_AGE_DAYS)) {
            return bad(
                "retention_days",
                format!("must be from 0 (keep for ever) to {MAX_AGE_DAYS} days (100 years)"),
            );
        }
        for (key, v) in [
            ("max_step_records", c.max_step_records),
            ("max_summary_records", c.max_summary_records),
        ] {
            if !(1..=MAX_RECORDS_SETTING).contains(&v) {
                return bad(key, format!("must be from 1 to {MAX_RECORDS_SETTING}"));
            }
        }
        if !c.mark_dir.is_empty() && !Path::new(&c.mark_dir).is_absolute() {
            return bad("mark_dir", "must be \"\" or an absolute path".into());
        }
        if !c.live_dir.is_empty() && !Path::new(&c.live_dir).is_absolute() {
            return bad("live_dir", "must be \"\" or an absolute path".into());
        }
        if !c.live_group.is_empty() && !is_group_name(&c.live_group) {
            return bad(
                "live_group",
                "must be \"\" (root only), a group name or a group id".into(),
            );
        }
        if !within(c.live_interval_seconds, MIN_LIVE_SECONDS, MAX_LIVE_SECONDS) {
            return bad(
                "live_interval_seconds",
                format!("must be from {MIN_LIVE_SECONDS} to {MAX_LIVE_SECONDS} seconds (1 hour)"),
            );
        }
        if !within(c.co2_grams_per_kwh, 0.0, MAX_CO2_GRAMS_PER_KWH) {
            return bad(
                "co2_grams_per_kwh",
                format!("must be from 0 (off) to {MAX_CO2_GRAMS_PER_KWH} grams per kWh"),
            );
        }
        if !within(c.alert_memory_percent, 0.0, 100.0) {
            return bad(
                "alert_memory_percent",
                "must be from 0 (off) to 100 percent".into(),
            );
        }
        if !within(c.alert_gpu_idle_seconds, 0.0, MAX_INTERVAL_SECONDS) {
            return bad(
                "alert_gpu_idle_seconds",
                format!("must be from 0 (off) to {MAX_INTERVAL_SECONDS} seconds (1 day)"),
            );
        }
        if !within(c.gpu_idle_percent, 0.0, 100.0) {
            return bad("gpu_idle_percent", "must be from 0 to 100 percent".into());
        }
        // The classes' thresholds: 0 turns each off.
        for (key, v, max, unit) in [
            (
                "class_gpu_low_percent",
                c.class_gpu_low_percent,
                100.0,
                " percent",
            ),
            (
                "class_gpu_low_sm_percent",
                c.class_gpu_low_sm_percent,
                100.0,
                " percent",
            ),
            (
                "class_gpu_idle_tail_seconds",
                c.class_gpu_idle_tail_seconds,
                MAX_INTERVAL_SECONDS,
                " seconds (1 day)",
            ),
            ("class_mem_over_ratio", c.class_mem_over_ratio, 1.0, ""),
            ("class_time_over_ratio", c.class_time_over_ratio, 1.0, ""),
            (
                "class_cpu_low_percent",
                c.class_cpu_low_percent,
                100.0,
                " percent",
            ),
            (
                "class_cpu_starved_percent",
                c.class_cpu_starved_percent,
                100.0,
                " percent",
            ),
            (
                "class_io_bound_percent",
                c.class_io_bound_percent,
                100.0,
                " percent",
            ),
            (
                "class_memory_throttled_percent",
                c.class_memory_throttled_percent,
                100.0,
                " percent",
            ),
        ] {
            if !within(v, 0.0, max) {
                return bad(key, format!("must be from 0 (off) to {max}{unit}"));
            }
        }
        if let Err((key, why)) = c.advise.check() {
            return bad(key, why);
        }
        if let Err((key, why)) = c.admin_comment.check() {
            return bad(key, why);
        }
        if let Err((key, why)) = c.mail.check() {
            return bad(key, why);
        }
        if c.steps.is_empty() {
            return bad(
                "steps",
                "must name at least one of batch, srun, interactive, extern".into(),
            );
        }
        Ok(c)
    }

    /// The alert rules these settings give.
    pub fn alert_rules(&self) -> crate::history::AlertRules {
        crate::history::AlertRules {
            memory_percent: self.alert_memory_percent,
            gpu_idle_seconds: self.alert_gpu_idle_seconds,
            gpu_idle_percent: self.gpu_idle_percent,
        }
    }

    /// Whether steps of `kind` are tracked.
    pub fn tracks(&self, kind: StepKind) -> bool {
        self.steps.contains(&kind)
    }

    /// What the job gets: `option` is the value of `--gpu-track` (`None` when the job did not
    /// give it, `Some("")` for the bare flag).
    pub fn decide(&self, option: Option<&str>) -> Result<Tracking, String> {
        match option.map(parse_track_option).transpose()? {
            None if self.track_all => Ok(Tracking::On {
                interval: self.interval,
            }),
            None => Ok(Tracking::Off),
            Some(TrackOption::Off) => Ok(Tracking::Off),
            Some(TrackOption::Default) => Ok(Tracking::On {
                interval: self.interval,
            }),
            Some(TrackOption::Every(s)) if s < self.min_interval => Err(format!(
                "--gpu-track={s}: the shortest interval this site allows is {} s",
                self.min_interval
            )),
            Some(TrackOption::Every(s)) => Ok(Tracking::On { interval: s }),
        }
    }
}

/// The settings file that the plugin's arguments in plugstack.conf name, as the plugin reads
/// them: the last `config=PATH`; `None` without one (the plugin then reads [`DEFAULT_PATH`]).
pub fn config_argument<S: AsRef<str>>(args: &[S]) -> Option<PathBuf> {
    args.iter()
        .filter_map(|a| match a.as_ref().split_once('=') {
            Some(("config", p)) => Some(PathBuf::from(p)),
            _ => None,
        })
        .next_back()
}

/// Whether a job is tracked, and how often it is sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tracking {
    /// Not tracked.
    Off,
    /// Tracked, sampled every `interval` seconds.
    On {
        /// Seconds between samples.
        interval: f64,
    },
}

/// The value of `--gpu-track`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrackOption {
    /// `--gpu-track`: on, at the site's interval.
    Default,
    /// `--gpu-track=SECONDS`.
    Every(f64),
    /// `--gpu-track=off` (or `no`, `false`): not tracked, even where the site tracks every job.
    Off,
}

/// Parses the value of `--gpu-track`: empty, `on`/`yes` (the site's interval), `off`/`no`, or a
/// number of seconds, more than 0 and at most [`MAX_INTERVAL_SECONDS`] (a day). The site's
/// `min_interval` is applied later, by [`Config::decide`]. The error is the one line `sbatch`
/// and `srun` print when they refuse the submission (and slurmd logs, for a step's value): the
/// value in it has its control characters replaced and is cut to [`SHOWN_OPTION_CHARS`].
pub fn parse_track_option(value: &str) -> Result<TrackOption, String> {
    let v = value.trim().to_ascii_lowercase();
    let shown = || crate::text::clean_text(value, SHOWN_OPTION_CHARS);
    match v.as_str() {
        "" | "on" | "yes" | "true" => Ok(TrackOption::Default),
        "off" | "no" | "false" => Ok(TrackOption::Off),
        _ => match v.parse::<f64>() {
            Ok(s) if s > 0.0 && s <= MAX_INTERVAL_SECONDS => Ok(TrackOption::Every(s)),
            Ok(_) => Err(format!(
                "--gpu-track={}: the sampling interval must be more than 0 and at most {MAX_INTERVAL_SECONDS} seconds (1 day)",
                shown()
            )),
            Err(_) => Err(format!(
                "--gpu-track={}: expected a number of seconds (more than 0, at most {MAX_INTERVAL_SECONDS}), \"on\" or \"off\"",
                shown()
            )),
        },
    }
}

/// Most characters of a refused `--gpu-track` value that its error shows.
pub const SHOWN_OPTION_CHARS: usize = 64;

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What `toml` found wrong in settings `text`, in words that hold none of the file's text (it
/// may be a file the caller cannot read, given to the report running as root): the line, and
/// the kind of fault. Keys, values and the line itself stay out: an unknown key, a value of
/// the wrong kind (with what was expected, which is ours), or the TOML rule broken (`toml`'s
/// syntax messages are fixed words and the tokens it expected).
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let m = one_line(e.message());
    let wrong_value = [
        "invalid type",
        "invalid value",
        "invalid length",
        "unknown variant",
    ];
    let what = if m.starts_with("unknown field") {
        "an unknown key".to_string()
    } else if wrong_value.iter().any(|p| m.starts_with(p)) {
        match m.rsplit_once(", expected ") {
            Some((_, x)) => format!("a value of the wrong kind (expected {x})"),
            None => "a value of the wrong kind".into(),
        }
    } else if m.starts_with("missing field") || m.starts_with("duplicate field") {
        // These name one of our keys.
        m
    } else {
        format!("not valid TOML: {m}")
    };
    match e.span() {
        Some(s) => format!("line {}: {what}", line_at(text, s.start)),
        None => what,
    }
}

/// The line (from 1) that byte `at` of `text` is on.
fn line_at(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    1 + text.as_bytes()[..at]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// The line (from 1) of `text` that sets `key` (`key = ...` or `"key" = ...`), if any.
fn key_line(text: &str, key: &str) -> Option<usize> {
    let quoted = format!("\"{key}\"");
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            [key, quoted.as_str()].iter().any(|k| {
                l.strip_prefix(k)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
        })
        .map(|i| i + 1)
}

pub mod admin_comment;
pub(crate) mod advise;
pub mod discover;
pub(crate) mod mail;
mod paths;
pub(crate) mod plugstack;
pub mod slurmconf;
#[cfg(test)]
mod tests;
