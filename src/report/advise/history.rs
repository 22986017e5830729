//! The user's history of finished jobs, from Slurm's database, kept in a cache in the user's
//! own home (`~/.cache/gpu-tracker/advice-<cluster>.json`, written by the user's own process).
//!
//! Slurm's database is asked for the user's own jobs only (`sacct -u <uid>`, rows of another
//! uid dropped), never more often than `advise.refresh_seconds` for one user, and only when the
//! cache is older than an hour or a job of the same name was submitted before (it may have
//! ended since):
//! after the first question of the day, each one asks only for the jobs that ended since the
//! last (`-S`). A failed question is not asked again for five minutes. Figures come only from
//! the stored summaries (`AdminComment`, which only Slurm's administrators and the site's
//! EpilogSlurmctld write); the cache is the user's, so a user who edits it misleads only
//! themselves.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Key, PastRun};
use crate::config::AdviseConfig;
use crate::report::figures::Summary;
use crate::report::slurmdb;
use crate::report::stored::Stored;

/// What `sacct` is asked for: the comment last (another tool's may hold the delimiter).
pub const FIELDS: &str =
    "JobIDRaw,JobID,UID,State,End,TimelimitRaw,JobName,WorkDir,SubmitLine,AdminComment";
/// `sacct`'s delimiter: a control character no name, path or command line is likely to hold.
pub const DELIMITER: &str = "\u{1f}";
/// Finished states whose figures size a job: completed, failed, out of time, out of memory
/// (cancelled and node-failed runs say little about what the job needs).
pub const STATES: &str = "CD,F,TO,OOM";
/// How long one question to Slurm's database may take in the background.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(60);
/// The cache's format.
pub const CACHE_VERSION: u32 = 1;
/// Most runs kept (the newest): a few MB at most.
pub const MAX_RUNS: usize = 5000;
/// Most submissions remembered.
pub const MAX_SUBMISSIONS: usize = 100;
/// A cache older than this is asked again whatever was submitted, seconds.
pub const MAX_AGE_SECONDS: i64 = 3600;
/// After a failed question, none for this long, seconds.
pub const FAILURE_BACKOFF_SECONDS: i64 = 300;
/// Each question asks again for this much before the last one (jobs whose summary was stored
/// a little after they ended), seconds.
pub const OVERLAP_SECONDS: i64 = 900;

/// The cache of one user's history on one cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    /// [`CACHE_VERSION`].
    pub version: u32,
    /// Whose.
    pub uid: u32,
    /// Which cluster.
    pub cluster: String,
    /// When Slurm's database last answered, Unix seconds (0: never).
    pub fetched: i64,
    /// The earliest end its runs cover, Unix seconds.
    pub covers_from: i64,
    /// When it was last asked, Unix seconds.
    pub attempted: i64,
    /// Why the last question failed; `None`: it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The user's finished runs with a stored summary.
    #[serde(default)]
    pub runs: Vec<PastRun>,
}

impl Cache {
    /// An empty cache of `uid` on `cluster`.
    pub fn new(uid: u32, cluster: &str) -> Cache {
        Cache {
            version: CACHE_VERSION,
            uid,
            cluster: cluster.to_string(),
            ..Cache::default()
        }
    }

    /// Why Slurm's database should be asked now for a submission of `key`, given the
    /// submissions noted ([`note_submission`]); `None`: the cache answers.
    pub fn due(
        &self,
        key: &Key,
        now: i64,
        cfg: &AdviseConfig,
        submitted: &[(String, i64)],
    ) -> Option<String> {
        let since_attempt = now - self.attempted;
        if self.failed.is_some() && since_attempt < FAILURE_BACKOFF_SECONDS {
            return None;
        }
        if (since_attempt as f64) < cfg.refresh_seconds {
            return None;
        }
        if self.fetched == 0 {
            return Some("no history fetched yet".into());
        }
        if now - self.fetched >= MAX_AGE_SECONDS {
            return Some("the history is over an hour old".into());
        }
        // A job of this name submitted before may have ended since the last answer: which
        // one the answer saw is not known (a submission is noted before Slurm gives its id).
        let id = key.id();
        if submitted.iter().any(|(k, _)| *k == id) {
            return Some("a job of this name was submitted before and may have ended".into());
        }
        None
    }

    /// Takes in the runs of a question over `[since, now]`: each replaces the run of its job
    /// id; runs that ended before `now - days` are dropped, then all but the newest
    /// [`MAX_RUNS`].
    pub fn merge(&mut self, runs: Vec<PastRun>, since: i64, now: i64, days: f64) {
        let ids: std::collections::HashSet<u32> = runs.iter().map(|r| r.job).collect();
        self.runs.retain(|r| !ids.contains(&r.job));
        self.runs.extend(runs);
        let oldest = now - (days * 86_400.0) as i64;
        self.runs.retain(|r| r.end >= oldest);
        self.runs.sort_by_key(|r| std::cmp::Reverse((r.end, r.job)));
        self.runs.truncate(MAX_RUNS);
        self.covers_from = if self.fetched == 0 {
            since
        } else {
            self.covers_from.min(since)
        }
        .max(oldest);
        self.fetched = now;
        self.failed = None;
    }

    /// Where the next question starts: the whole period for a cache that never had an
    /// answer, else a little before the last answer.
    pub fn since(&self, now: i64, days: f64) -> i64 {
        let oldest = now - (days * 86_400.0) as i64;
        if self.fetched == 0 || self.covers_from > oldest + OVERLAP_SECONDS {
            oldest
        } else {
            (self.fetched - OVERLAP_SECONDS).max(oldest)
        }
    }
}

/// The cache file of `uid` on `cluster`: under `XDG_CACHE_HOME` where it is an absolute path,
/// else under the user's home as the user database has it (not `HOME`: `runuser` and `sudo`
/// keep another user's).
pub fn cache_path(uid: u32, cluster: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| crate::sys::user_home(uid).map(|h| h.join(".cache")))?;
    Some(base.join("gpu-tracker").join(format!(
        "advice-{}.json",
        crate::step::record::file_safe(cluster)
    )))
}

/// The cache at `path`, when it is one of `uid` on `cluster` in this format.
pub fn load(path: &Path, uid: u32, cluster: &str) -> Option<Cache> {
    let text = crate::sys::read_small_file(path, 16 << 20, "the advice cache").ok()?;
    let c: Cache = serde_json::from_str(&text).ok()?;
    (c.version == CACHE_VERSION && c.uid == uid && c.cluster == cluster).then_some(c)
}

/// Writes `cache` to `path` whole ([`write_whole`]).
pub fn save(path: &Path, cache: &Cache) -> std::io::Result<()> {
    write_whole(
        path,
        serde_json::to_string(cache).unwrap_or_default().as_bytes(),
    )
}

/// Writes `bytes` to `path` whole (a new file, 0600, then a rename), making its directory
/// (0700).
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = make_dir(path)?;
    let tmp = dir.join(format!(
        ".{}.{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Makes the directory of `path` (0700) where it is missing; returns it.
fn make_dir(path: &Path) -> std::io::Result<&Path> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    Ok(dir)
}

/// The lock file beside the cache: `suffix` `lock` for a change of the cache, `refresh` for a
/// question in flight. `Ok(None)`: another process holds it.
pub fn lock(path: &Path, suffix: &str) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path.with_extension(suffix))?;
    Ok(crate::sys::try_lock(&f)?.then_some(f))
}

/// The file of the submissions noted beside the cache at `path`: a small one of its own, so
/// that noting one does not rewrite the history.
pub fn submissions_path(path: &Path) -> PathBuf {
    path.with_extension("submitted")
}

/// The submissions noted beside the cache at `path`: each key's [`Key::id`] and when.
pub fn submissions(path: &Path) -> Vec<(String, i64)> {
    crate::sys::read_small_file(&submissions_path(path), 1 << 20, "the submissions noted")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Notes a submission of `key` at `now` beside the cache at `path`, under the cache's lock;
/// the newest [`MAX_SUBMISSIONS`] are kept.
pub fn note_submission(path: &Path, key: &Key, now: i64) -> std::io::Result<()> {
    // The first submission's question makes the directory too, but in a process of its own
    // that a slow machine may not have started yet (a busy 26.05 guest took over 2 s).
    make_dir(path)?;
    let _held = wait_for_lock(path)?;
    let mut list = submissions(path);
    let id = key.id();
    list.retain(|(k, _)| *k != id);
    list.push((id, now));
    let extra = list.len().saturating_sub(MAX_SUBMISSIONS);
    list.drain(..extra);
    write_whole(
        &submissions_path(path),
        serde_json::to_string(&list).unwrap_or_default().as_bytes(),
    )
}

/// The cache's lock, waited for up to 200 ms.
fn wait_for_lock(path: &Path) -> std::io::Result<std::fs::File> {
    for _ in 0..20 {
        if let Some(f) = lock(path, "lock")? {
            return Ok(f);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::WouldBlock,
        "the advice cache is locked",
    ))
}

/// Changes the cache at `path` with `change` under its lock (waiting up to 200 ms for it):
/// read, changed, written whole. A missing or unusable cache starts empty.
pub fn update(
    path: &Path,
    uid: u32,
    cluster: &str,
    change: impl FnOnce(&mut Cache),
) -> std::io::Result<Cache> {
    let _held = wait_for_lock(path)?;
    let mut c = load(path, uid, cluster).unwrap_or_else(|| Cache::new(uid, cluster));
    change(&mut c);
    save(path, &c)?;
    Ok(c)
}

/// Asks Slurm's database for `uid`'s runs that ended from `since` (Unix seconds) to `now`
/// and takes them into the cache at `path`. Does nothing while another process asks
/// (`Ok(false)`). The question's failure is kept in the cache.
pub fn refresh(
    path: &Path,
    uid: u32,
    cluster: &str,
    cfg: &AdviseConfig,
    now: i64,
) -> Result<bool, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    make_dir(path).map_err(io)?;
    let Some(_asking) = lock(path, "refresh").map_err(io)? else {
        return Ok(false);
    };
    let before = update(path, uid, cluster, |c| c.attempted = now).map_err(io)?;
    let since = before.since(now, cfg.days);
    let mut runs = Vec::new();
    let asked = ask(uid, since, |line| {
        if let Some(r) = parse_row(line, uid) {
            runs.push(r);
        }
    });
    update(path, uid, cluster, |c| match &asked {
        Ok(()) => c.merge(runs, since, now, cfg.days),
        Err(e) => c.failed = Some(e.clone()),
    })
    .map_err(io)?;
    asked.map(|()| true)
}

/// Runs `sacct` for `uid`'s runs in [`STATES`] from `since` (Unix seconds) to now, handing
/// on each line.
fn ask(uid: u32, since: i64, line: impl FnMut(&str)) -> Result<(), String> {
    let ago = (chrono::Utc::now().timestamp() - since).max(0);
    let mut cmd = Command::new("sacct");
    cmd.env("SLURM_TIME_FORMAT", "%s").args([
        "-n",
        "-X",
        "-P",
        &format!("--delimiter={DELIMITER}"),
        "-u",
        &uid.to_string(),
        "-S",
        &format!("now-{ago}"),
        "-E",
        "now",
        "-s",
        STATES,
        "-o",
        FIELDS,
    ]);
    slurmdb::each_line(&mut cmd, QUERY_DEADLINE, line)
}

/// One line of `sacct` as [`ask`] runs it: a run of `uid` with a gpu-tracker summary stored
/// under its own job id; `None` for anything else.
pub fn parse_row(line: &str, uid: u32) -> Option<PastRun> {
    let f: Vec<&str> = line.splitn(10, DELIMITER).collect();
    let [
        raw,
        id,
        row_uid,
        state,
        end,
        limit,
        name,
        workdir,
        submit,
        comment,
    ] = f[..]
    else {
        return None;
    };
    let job: u32 = raw.trim().parse().ok()?;
    if row_uid.trim().parse::<u32>().ok()? != uid {
        return None;
    }
    let st = Stored::decode(comment).ok()?;
    if st.job != job || !st.complete {
        return None;
    }
    let array = id
        .split_once('_')
        .and_then(|(a, _)| a.trim().parse::<u32>().ok());
    let s = st.to_summary("", uid, Some(name));
    let state = state.split_whitespace().next().unwrap_or("").to_string();
    let mut run = of_summary(&s, &st);
    run.job = job;
    run.array = array;
    run.name = name.to_string();
    run.script = script_of(name, workdir, submit);
    run.end = end.trim().parse().ok()?;
    run.limit = limit.trim().parse::<u64>().ok().map(|m| m * 60);
    run.oom = run.oom || state.starts_with("OUT_OF_ME");
    run.state = state;
    Some(run)
}

/// The figures of a stored summary `st`, read back as `s`.
fn of_summary(s: &Summary, st: &Stored) -> PastRun {
    let gpus = u32::try_from(s.totals.gpus).unwrap_or(u32::MAX);
    let unused = st.gpu_use.map_or_else(
        || {
            s.gpus
                .iter()
                .filter(|g| crate::report::classes::gpu_unused(g))
                .count() as u32
        },
        |(u, _)| u,
    );
    PastRun {
        elapsed: s.elapsed_seconds,
        mem_needed: s
            .per_node
            .iter()
            .map(|n| n.sizing_bytes())
            .max()
            .unwrap_or(0),
        mem_peak: s.per_node.iter().map(|n| n.peak_bytes).max().unwrap_or(0),
        mem_asked: s
            .per_node
            .iter()
            .filter_map(|n| n.requested_bytes)
            .max()
            .unwrap_or(0),
        cpus: s.cpu.alloc_cpus,
        cores: s.cpu.max_cores,
        gpus,
        gpus_used: gpus.saturating_sub(unused),
        gpu_mem: s.gpus.iter().map(|g| g.job_peak_bytes).max().unwrap_or(0),
        gpu_size: s
            .gpus
            .iter()
            .map(|g| g.memory_total_bytes)
            .max()
            .unwrap_or(0),
        gpu_util: s
            .gpus
            .iter()
            .filter_map(|g| g.mean_utilization_percent)
            .reduce(f64::max)
            .or(s.totals.gpu_mean_utilization_percent),
        oom: st.oom_kills > 0,
        ..PastRun::default()
    }
}

/// The batch script of a job named `name` that has no name of its own: the first word of its
/// submission line (after the command) whose file name is the job's name, made absolute
/// against its working directory. `None` where no word is.
pub fn script_of(name: &str, workdir: &str, submit: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let word = submit
        .split_whitespace()
        .skip(1)
        .filter(|w| !w.starts_with('-'))
        .find(|w| Path::new(w).file_name().is_some_and(|f| f == name))?;
    absolute(Path::new(workdir), word)
}

/// `word` as an absolute path, against `dir` where it is relative, with `.` and `..` taken
/// out as words.
pub fn absolute(dir: &Path, word: &str) -> Option<String> {
    let joined = if word.starts_with('/') {
        PathBuf::from(word)
    } else if dir.is_absolute() {
        dir.join(word)
    } else {
        return None;
    };
    Some(
        crate::config::lexical(&joined)
            .to_string_lossy()
            .into_owned(),
    )
}
