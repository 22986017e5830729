//! The note at submission: `slurm/cli_filter.lua` runs `gpu-tracker-report --advise-submission`
//! with the submission's options as `name=value` arguments, as `sbatch`, `salloc` or `srun`
//! has them after reading the script's `#SBATCH` lines, which prints on the user's terminal
//! what [`at_submission`] says, before the job id. (Arguments, not a pipe: a write to a pipe
//! whose reader is gone would kill `sbatch` with SIGPIPE.)
//!
//! Nothing here can refuse, fail or hold a submission for long: every failure is a reason for
//! no note, and Slurm's database is asked at most `advise.wait_seconds` long (by a process of
//! its own, whose answer the next submission uses when it comes later).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::history::{self, Cache, Place};
use super::{Key, Request};
use crate::config::{Config, Tracking};

/// The options as `name=value` arguments; later ones win, others are skipped.
pub fn parse_fields(args: &[String]) -> BTreeMap<String, String> {
    args.iter()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .collect()
}

/// Whether the user silenced the note: `GPU_TRACKER_ADVICE=off` (one submission, or every
/// one where the shell exports it), or `off` in `~/.config/gpu-tracker/advice` (for good,
/// `gpu-tracker-report --advice off`).
pub fn silenced(env_value: Option<&str>, setting_file: Option<&Path>) -> Option<&'static str> {
    if env_value.is_some_and(|v| v.trim().eq_ignore_ascii_case("off")) {
        return Some("GPU_TRACKER_ADVICE=off");
    }
    let file = setting_file?;
    let text = crate::sys::read_small_file(file, 4096, "the advice setting").ok()?;
    (text.trim() == "off").then_some("~/.config/gpu-tracker/advice says off")
}

/// Whether the user asked for the note wherever stderr goes (`GPU_TRACKER_ADVICE=always`, or
/// `why`, which also says why there is none); otherwise it is printed only on a terminal, so
/// that a script reading `sbatch --parsable`'s output with its stderr gets the job id alone.
pub fn asked_for(env_value: Option<&str>) -> bool {
    env_value.is_some_and(|v| {
        let v = v.trim();
        v.eq_ignore_ascii_case("always") || v.eq_ignore_ascii_case("why")
    })
}

/// The name of the user's own setting file in [`setting_dir`].
pub const SETTING_FILE: &str = "advice";

/// The directory of the user's own setting file: `XDG_CONFIG_HOME` (an absolute path) or
/// `~/.config`, then `gpu-tracker`.
pub fn setting_dir(uid: u32) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| crate::sys::user_home(uid).map(|h| h.join(".config")))?;
    Some(base.join("gpu-tracker"))
}

/// The user's own setting file: [`SETTING_FILE`] in [`setting_dir`].
pub fn setting_file(uid: u32) -> Option<PathBuf> {
    setting_dir(uid).map(|d| d.join(SETTING_FILE))
}

/// Whether the plugin will track the job: its `--gpu-track` (`gpu_track`: `set` for the bare
/// flag, as Slurm's Lua hands it) under the site's `track_all`.
pub fn tracked(fields: &BTreeMap<String, String>, cfg: &Config) -> bool {
    let option = fields
        .get("gpu_track")
        .map(|v| if v == "set" { "" } else { v.as_str() });
    matches!(cfg.decide(option), Ok(Tracking::On { .. }))
}

/// What the user would call this job: its name where the submission gives one, else the
/// batch script's path (against `cwd`); for `srun` and `salloc` with no name, the command's
/// file name (Slurm's name for the job). `None`: a script on stdin, no command.
pub fn key_of(fields: &BTreeMap<String, String>, cwd: &Path) -> Option<Key> {
    if let Some(n) = fields.get("job-name").filter(|n| !n.is_empty()) {
        return Some(Key::Name(n.clone()));
    }
    let first = fields.get("argv1").filter(|a| !a.is_empty())?;
    if fields.get("type").map(String::as_str) == Some("sbatch") {
        return history::absolute(cwd, first).map(Key::Script);
    }
    let name = Path::new(first).file_name()?.to_string_lossy().into_owned();
    Some(Key::Name(name))
}

/// Megabytes with Slurm's suffixes (`4096`, `4G`, `512M`, `1T`) as bytes.
fn mem_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], 1u64 << 10),
        'M' | 'm' => (&v[..v.len() - 1], 1 << 20),
        'G' | 'g' => (&v[..v.len() - 1], 1 << 30),
        'T' | 't' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1 << 20),
    };
    num.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(mult))
}

/// A Slurm duration (`M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`) as seconds, read as the
/// run file reads time limits; `None` for `UNLIMITED`, 0 and anything else.
pub fn duration_seconds(v: &str) -> Option<u64> {
    crate::step::run::parse_time_limit(v)
        .ok()
        .flatten()
        .filter(|s| *s > 0)
}

/// GPUs in a `--gres` or `--gpus` value: `gres:gpu:2`, `gres/gpu:a100:2`, `gpu`, `a100:2`,
/// `2`, lists of them.
fn gpu_count(v: &str, gres: bool) -> Option<u32> {
    let mut n = 0;
    let mut any = false;
    for item in v.split(',') {
        let item = item
            .trim()
            .trim_start_matches("gres:")
            .trim_start_matches("gres/");
        let mut parts = item.split(':');
        if gres && parts.next() != Some("gpu") {
            continue;
        }
        any = true;
        let count = item.rsplit(':').next().and_then(|c| c.parse::<u32>().ok());
        n += match count {
            Some(c) if item.contains(':') || !gres => c,
            _ => 1,
        };
    }
    any.then_some(n)
}

/// What the submission asks for, where its options say it.
pub fn request_of(fields: &BTreeMap<String, String>) -> Request {
    let num = |k: &str| {
        fields
            .get(k)
            .and_then(|v| v.split('-').next()?.trim().parse::<u32>().ok())
            .filter(|n| *n > 0)
    };
    let tasks = num("ntasks");
    let per_task = num("cpus-per-task");
    let cpus = match (tasks, per_task) {
        (None, None) => None,
        (t, c) => Some(t.unwrap_or(1).saturating_mul(c.unwrap_or(1))),
    };
    let nodes = num("nodes").unwrap_or(1);
    let mem = fields.get("mem").and_then(|v| mem_bytes(v)).or_else(|| {
        let per_cpu = fields.get("mem-per-cpu").and_then(|v| mem_bytes(v))?;
        per_cpu.checked_mul(u64::from(per_task.unwrap_or(1)))
    });
    let gpus = fields
        .get("gpus")
        .and_then(|v| gpu_count(v, false))
        .or_else(|| {
            let per_node = fields
                .get("gres")
                .and_then(|v| gpu_count(v, true))
                .or_else(|| {
                    fields
                        .get("gpus-per-node")
                        .and_then(|v| gpu_count(v, false))
                })?;
            Some(per_node.saturating_mul(nodes))
        });
    Request {
        mem,
        time: fields.get("time").and_then(|v| duration_seconds(v)),
        cpus,
        gpus,
    }
}

/// What the submission prints: the note, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The note, lines ending in newlines.
    Note(String),
    /// No note, and why (shown with `GPU_TRACKER_ADVICE=why`).
    Quiet(String),
}

/// Everything a submission's note depends on besides the options.
pub struct Context<'a> {
    /// The site's settings.
    pub cfg: &'a Config,
    /// The cluster (Slurm's name).
    pub cluster: &'a str,
    /// The submitting user.
    pub uid: u32,
    /// The directory the submission was made in.
    pub cwd: &'a Path,
    /// Where the user's cache is kept; `Err`: why none is (no home, a directory another
    /// user could get at, root).
    pub cache: Result<&'a Place, &'a str>,
    /// Now, Unix seconds.
    pub now: i64,
    /// The name `gpu-tracker-report` is run by, for the note's last line.
    pub report: &'a str,
}

/// The note for a submission with options `fields`. `ask` asks Slurm's database in the
/// background and says whether its answer came within `advise.wait_seconds`.
pub fn at_submission(
    fields: &BTreeMap<String, String>,
    ctx: &Context<'_>,
    ask: impl FnOnce(Duration) -> Result<bool, String>,
) -> Outcome {
    let cfg = &ctx.cfg.advise;
    if !cfg.enabled {
        return Outcome::Quiet("the site turned the advice off (advise.enabled)".into());
    }
    if !tracked(fields, ctx.cfg) {
        return Outcome::Quiet("the job is not tracked (no --gpu-track)".into());
    }
    let Some(key) = key_of(fields, ctx.cwd) else {
        return Outcome::Quiet("no job name and no script to match past jobs by".into());
    };
    let place = match ctx.cache {
        Ok(p) => p,
        Err(why) => return Outcome::Quiet(format!("no history is kept: {why}")),
    };
    let mut cache = history::load(place, ctx.uid, ctx.cluster);
    let mut said = String::new();
    let due = match &cache {
        Some(c) => c.due(&key, ctx.now, cfg, &history::submissions(place)),
        None => Some("no history kept yet".into()),
    };
    if let Some(why) = due {
        let wait = crate::units::checked_duration(cfg.wait_seconds).unwrap_or_default();
        match ask(wait) {
            Ok(true) => {}
            Ok(false) => {
                said = format!(
                    "Slurm's database did not answer within {} s ({why})",
                    cfg.wait_seconds
                );
            }
            Err(e) => said = format!("Slurm's database could not be asked ({why}): {e}"),
        }
        cache = history::load(place, ctx.uid, ctx.cluster);
    }
    // The submission is noted for the next one (a job of this name may end before it).
    let noted = history::note_submission(place, &key, ctx.now);
    let cache = cache.unwrap_or_else(|| Cache::new(ctx.uid, ctx.cluster));
    if let Some(f) = cache.failed.as_deref() {
        said = format!("Slurm's database did not answer last time: {f}");
    }
    if let Err(e) = noted {
        said.push_str(&format!("; the history could not be kept: {e}"));
    }
    let runs = super::matching(&cache.runs, &key);
    let jobs = {
        let mut ids: Vec<u32> = runs.iter().map(|r| r.array.unwrap_or(r.job)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    };
    let why_not = |what: String| {
        Outcome::Quiet(if said.is_empty() {
            what
        } else {
            format!("{what} ({said})")
        })
    };
    // Each run is evidence: a job, or one task of an array.
    if runs.len() < cfg.min_jobs as usize {
        return why_not(format!(
            "{jobs} finished tracked job(s) {} in the last {} days, {} run(s) (an array's tasks each one); a note needs {}",
            key.describe(),
            cfg.days,
            runs.len(),
            cfg.min_jobs
        ));
    }
    let req = request_of(fields);
    let Some(advice) = super::advise(&key, &runs, &req, cfg) else {
        return why_not("no past runs".into());
    };
    if advice.changes.is_empty() {
        return why_not(format!(
            "your request fits your {} past job(s) {}: nothing to change",
            advice.jobs,
            key.describe()
        ));
    }
    Outcome::Note(super::note::submission_note(&advice, cfg, ctx.report))
}

/// For a submission whose note nobody would see (stderr no terminal, and not asked for):
/// only notes it where [`at_submission`] would, so that the next submission of the name knows
/// it may have ended; nothing is asked of Slurm's database.
pub fn note_only(fields: &BTreeMap<String, String>, ctx: &Context<'_>) {
    if !ctx.cfg.advise.enabled || !tracked(fields, ctx.cfg) {
        return;
    }
    if let (Some(key), Ok(place)) = (key_of(fields, ctx.cwd), ctx.cache) {
        let _ = history::note_submission(place, &key, ctx.now);
    }
}

/// Runs `gpu-tracker-report --advise-refresh` (this program, `exe`) as a process of its own
/// (its own process group, no terminal) and waits up to `wait` for it: `Ok(true)` when it
/// ended in time and well. Past `wait` it goes on alone, and its answer is in the cache for
/// the next submission.
pub fn ask_in_background(exe: &Path, wait: Duration) -> Result<bool, String> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new(exe)
        .arg("--advise-refresh")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let until = Instant::now() + wait;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status.success()),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => return Ok(false),
            Err(e) => return Err(e.to_string()),
        }
    }
}
