//! The user's history of finished jobs, from Slurm's database, kept in a cache in the user's
//! own home (`~/.cache/gpu-tracker/advice-<cluster>.json`, written by the user's own process,
//! in a directory no other user can get at: [`Place`]; none for root).
//!
//! Slurm's database is asked for the user's own jobs only (`sacct -u <uid>`, rows of another
//! uid dropped), one question at a time for one user, and only when the cache is older than
//! an hour or a submission of the same name has not been seen to end ([`Cache::unseen_why`]).
//! A submission whose job the last answer cannot hold (that answer began before the job
//! reached Slurm) makes the next submission of its name ask at once (from [`SHORTEST_JOB_SECONDS`]
//! after it), at most one question per submission; one the last answer could have held (the job had not ended by then) is asked
//! about again no sooner than `advise.refresh_seconds` after the last question. After the
//! first question of the day, each one asks only for the jobs that ended since the last
//! (`-S`). A failed question is not asked again for five minutes. Figures come only from
//! the stored summaries (`AdminComment`, which only Slurm's administrators and the site's
//! EpilogSlurmctld write); the cache is the user's, so a user who edits it misleads only
//! themselves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::own_dir::OwnDir;
use super::{Key, PastRun};
use crate::config::AdviseConfig;
use crate::report::figures::Summary;
use crate::report::stored::Stored;
use crate::slurm::past_runs;

/// The cache's format (2: runs carry their submission time).
pub const CACHE_VERSION: u32 = 2;
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
/// A run submitted this long before a submission was noted may still be that submission's
/// (the clocks of the login node and Slurm's controller differ a little), seconds.
pub const SUBMIT_SLACK_SECONDS: i64 = 30;
/// A submission reaches Slurm at most `advise.wait_seconds` (rounded up) and this long after
/// it was noted, seconds: an answer that began before then cannot hold its job.
pub const NOTED_TO_SUBMITTED_SECONDS: i64 = 2;
/// An answer that began this long after the last seen task of an array ended holds every
/// task that ended with it (the EpilogSlurmctld stores each summary within seconds), seconds.
pub const ARRAY_SETTLE_SECONDS: i64 = 60;
/// A job noted less than this long ago has not run, ended and had its summary stored yet:
/// the next submission does not ask at once for it (a script that submits a name many times a
/// second asks once per refresh_seconds, as before), seconds.
pub const SHORTEST_JOB_SECONDS: i64 = 2;

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

    /// The times of the submissions of `key` noted ([`note_submission`]) whose job the cache
    /// has not seen end, oldest first ([`Cache::unseen_why`]).
    #[cfg(test)]
    pub fn unseen(&self, key: &Key, submitted: &[(String, i64)]) -> Vec<i64> {
        self.unseen_why(key, submitted)
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    }

    /// The submissions of `key` whose job the cache has not seen end, oldest first: when each
    /// was noted, and whether the cache holds some of its array's tasks but its last answer
    /// began under [`ARRAY_SETTLE_SECONDS`] after the last of them ended (the others may have
    /// ended with it, their summaries stored a little later). Each job of `key` in the cache
    /// (an array once, with its tasks' submission time) accounts for the earliest noted
    /// submission it can be: one noted at most [`SUBMIT_SLACK_SECONDS`] after the job was
    /// submitted.
    pub fn unseen_why(&self, key: &Key, submitted: &[(String, i64)]) -> Vec<(i64, bool)> {
        let id = key.id();
        let mut noted: Vec<i64> = submitted
            .iter()
            .filter(|(k, _)| *k == id)
            .map(|(_, t)| *t)
            .collect();
        noted.sort_unstable();
        // Each job: (its submission, whether the answer may lack some of its tasks).
        let mut jobs: std::collections::BTreeMap<u32, (i64, i64, bool)> =
            std::collections::BTreeMap::new();
        for r in self.runs.iter().filter(|r| key.matches(r)) {
            let j = jobs.entry(r.array.unwrap_or(r.job)).or_insert((
                r.submit,
                r.end,
                r.array.is_some(),
            ));
            (j.0, j.1) = (j.0.min(r.submit), j.1.max(r.end));
        }
        let mut seen: Vec<(i64, bool)> = jobs
            .into_values()
            .map(|(submit, end, array)| {
                (submit, array && self.fetched < end + ARRAY_SETTLE_SECONDS)
            })
            .collect();
        seen.sort_unstable();
        let mut next = seen.into_iter().peekable();
        let mut out = Vec::new();
        for t in noted {
            while next
                .next_if(|(s, _)| *s < t - SUBMIT_SLACK_SECONDS)
                .is_some()
            {}
            match next.next() {
                None => out.push((t, false)),
                Some((_, true)) => out.push((t, true)),
                Some((_, false)) => {}
            }
        }
        out
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
        let unseen = self.unseen_why(key, submitted);
        // The last answer began before this job reached Slurm, or too soon after some tasks of
        // its array ended to hold the others: it cannot hold it. Asked at once, whatever
        // refresh_seconds says: at most one question per submission.
        let reach = cfg.wait_seconds.ceil() as i64 + NOTED_TO_SUBMITTED_SECONDS;
        let cannot_hold = |(t, partly): &(i64, bool)| {
            (*partly || self.fetched <= t + reach) && now - t >= SHORTEST_JOB_SECONDS
        };
        if self.fetched > 0 && unseen.iter().any(cannot_hold) {
            return Some(if unseen.iter().any(|(_, partly)| *partly) {
                "some tasks of an array of this name ended just before the history was last asked for".into()
            } else {
                "a job of this name was submitted after the history was last asked for".into()
            });
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
        if !unseen.is_empty() {
            return Some("a job of this name has not been seen to end and may have since".into());
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

/// The directory of `uid`'s caches: `gpu-tracker` under `XDG_CACHE_HOME` where it is an
/// absolute path, else under the user's home as the user database has it (not `HOME`:
/// `runuser` and `sudo` keep another user's). Whether it may be used is [`Place`]'s to say.
pub fn cache_dir(uid: u32) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| crate::sys::user_home(uid).map(|h| h.join(".cache")))?;
    Some(base.join("gpu-tracker"))
}

/// Where one user's cache of one cluster is kept: a directory of the user's own ([`OwnDir`]:
/// no other user can choose, replace or block its files) and the names there,
/// `advice-<cluster>.json`, with `.lock` (a change of the cache), `.refresh` (a question in
/// flight) and `.submitted` (the submissions noted) beside it.
#[derive(Debug)]
pub struct Place {
    dir: OwnDir,
    stem: String,
}

impl Place {
    /// The cache of `cluster` in directory `dir`, as `owner`'s own ([`OwnDir::open`]: made
    /// where missing, refused where another user could get at it).
    #[cfg(test)]
    pub fn open(dir: &Path, owner: u32, cluster: &str) -> Result<Place, String> {
        Ok(Place::within(OwnDir::open(dir, owner)?, cluster))
    }

    /// The same as the calling user's own; refused for root ([`OwnDir::for_caller`]).
    pub fn for_caller(dir: &Path, cluster: &str) -> Result<Place, String> {
        Ok(Place::within(OwnDir::for_caller(dir)?, cluster))
    }

    fn within(dir: OwnDir, cluster: &str) -> Place {
        let stem = format!("advice-{}", crate::step::record::file_safe(cluster));
        Place { dir, stem }
    }

    /// The cache file's path, for people.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(self.file("json"))
    }

    /// The name of the file with extension `ext`.
    fn file(&self, ext: &str) -> String {
        format!("{}.{ext}", self.stem)
    }
}

/// The cache at `place`, when it is one of `uid` on `cluster` in this format.
pub fn load(place: &Place, uid: u32, cluster: &str) -> Option<Cache> {
    let text = place.dir.read(&place.file("json"), 16 << 20).ok()?;
    let c: Cache = serde_json::from_str(&text).ok()?;
    (c.version == CACHE_VERSION && c.uid == uid && c.cluster == cluster).then_some(c)
}

/// Writes `cache` at `place` whole ([`OwnDir::write_whole`]).
pub fn save(place: &Place, cache: &Cache) -> std::io::Result<()> {
    let text = serde_json::to_string(cache).unwrap_or_default();
    place.dir.write_whole(&place.file("json"), text.as_bytes())
}

/// The lock file beside the cache: `suffix` `lock` for a change of the cache, `refresh` for a
/// question in flight. `Ok(None)`: another process holds it.
pub fn lock(place: &Place, suffix: &str) -> std::io::Result<Option<std::fs::File>> {
    place.dir.try_lock(&place.file(suffix))
}

/// The submissions noted beside the cache at `place`: each key's [`Key::id`] and when.
pub fn submissions(place: &Place) -> Vec<(String, i64)> {
    place
        .dir
        .read(&place.file("submitted"), 1 << 20)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Notes a submission of `key` at `now` beside the cache at `place` (a small file of its
/// own, so that noting one does not rewrite the history), under the cache's lock; every
/// submission is kept, the newest [`MAX_SUBMISSIONS`].
pub fn note_submission(place: &Place, key: &Key, now: i64) -> std::io::Result<()> {
    let _held = wait_for_lock(place)?;
    let mut list = submissions(place);
    list.push((key.id(), now));
    let extra = list.len().saturating_sub(MAX_SUBMISSIONS);
    list.drain(..extra);
    let text = serde_json::to_string(&list).unwrap_or_default();
    place
        .dir
        .write_whole(&place.file("submitted"), text.as_bytes())
}

/// The cache's lock, waited for up to 200 ms.
fn wait_for_lock(place: &Place) -> std::io::Result<std::fs::File> {
    for _ in 0..20 {
        if let Some(f) = lock(place, "lock")? {
            return Ok(f);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::WouldBlock,
        "the advice cache is locked",
    ))
}

/// Changes the cache at `place` with `change` under its lock (waiting up to 200 ms for it):
/// read, changed, written whole. A missing or unusable cache starts empty.
pub fn update(
    place: &Place,
    uid: u32,
    cluster: &str,
    change: impl FnOnce(&mut Cache),
) -> std::io::Result<Cache> {
    let _held = wait_for_lock(place)?;
    let mut c = load(place, uid, cluster).unwrap_or_else(|| Cache::new(uid, cluster));
    change(&mut c);
    save(place, &c)?;
    Ok(c)
}

/// Asks Slurm's database for `uid`'s runs that ended from `since` (Unix seconds) to `now`
/// and takes them into the cache at `place`. Does nothing while another process asks
/// (`Ok(false)`). The question's failure is kept in the cache.
pub fn refresh(
    place: &Place,
    uid: u32,
    cluster: &str,
    cfg: &AdviseConfig,
    now: i64,
) -> Result<bool, String> {
    let io = |e: std::io::Error| format!("{}: {e}", place.path().display());
    let Some(_asking) = lock(place, "refresh").map_err(io)? else {
        return Ok(false);
    };
    let before = update(place, uid, cluster, |c| c.attempted = now).map_err(io)?;
    let since = before.since(now, cfg.days);
    let (answer, asked) = match fetch(uid, since) {
        Ok(runs) => (Ok(true), Ok(runs)),
        Err(e) => (Err(e.clone()), Err(e)),
    };
    update(place, uid, cluster, |c| match asked {
        Ok(runs) => c.merge(runs, since, now, cfg.days),
        Err(e) => c.failed = Some(e),
    })
    .map_err(io)?;
    answer
}

/// `uid`'s runs with a stored summary that ended from `since` (Unix seconds) to now, from
/// Slurm's database.
pub fn fetch(uid: u32, since: i64) -> Result<Vec<PastRun>, String> {
    let mut runs = Vec::new();
    past_runs::ask(uid, since, |line| {
        if let Some(r) = parse_row(line, uid) {
            runs.push(r);
        }
    })?;
    Ok(runs)
}

/// One line of `sacct` as [`past_runs::ask`] runs it: a run of `uid` with a gpu-tracker summary stored
/// under its own job id; `None` for anything else.
pub fn parse_row(line: &str, uid: u32) -> Option<PastRun> {
    let past_runs::Row {
        raw,
        id,
        uid: row_uid,
        state,
        submitted,
        end,
        limit,
        name,
        workdir,
        submit,
        comment,
    } = past_runs::Row::parse(line)?;
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
    let s = st.to_summary(
        "",
        uid,
        Some(name),
        &crate::report::classes::ClassRules::default(),
    );
    let state = state.split_whitespace().next().unwrap_or("").to_string();
    let mut run = of_summary(&s, &st);
    run.job = job;
    run.array = array;
    run.name = name.to_string();
    run.script = script_of(name, workdir, submit);
    run.end = end.trim().parse().ok()?;
    run.submit = submitted.trim().parse().unwrap_or(0);
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
