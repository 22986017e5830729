//! `gpu-tracker-report`'s advice commands: `--advise NAME|SCRIPT`, `--advice on|off`, and the
//! two that `slurm/cli_filter.lua` and the submission run: `--advise-submission` and
//! `--advise-refresh`. Each returns the program's exit status.

use std::path::{Path, PathBuf};

use super::history::{self, Cache};
use super::own_dir::OwnDir;
use super::submit::{self, Context, Outcome};
use super::{Key, Request};
use crate::config::Config;
use crate::config::discover::{self, Places};

/// The site's settings, the cluster and the caller, as every advice command needs them.
struct Site {
    cfg: Config,
    cluster: String,
    uid: u32,
}

fn site() -> Result<Site, String> {
    let found = discover::find(&Places::from_env(None)).map_err(|e| e.to_string())?;
    Ok(Site {
        cfg: found.config,
        cluster: crate::config::slurmconf::this_cluster_dir(),
        uid: crate::sys::uid(),
    })
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `--advise-submission NAME=VALUE...`: the note for the submission with these options, on
/// stderr. Always exits 0: the submission goes on whatever happens here.
pub fn submission(args: &[String]) -> u8 {
    use std::io::IsTerminal;
    let fields = submit::parse_fields(args);
    let mode = std::env::var("GPU_TRACKER_ADVICE").ok();
    let shown = submit::asked_for(mode.as_deref()) || std::io::stderr().is_terminal();
    let why = mode.as_deref().is_some_and(|m| m.trim() == "why");
    let say_why = |what: &str| {
        if why {
            eprintln!(
                "{}no advice: {}",
                super::note::PREFIX,
                crate::text::terminal_safe(what)
            );
        }
    };
    let site = match site() {
        Ok(s) => s,
        Err(e) => {
            say_why(&format!("the settings cannot be read: {e}"));
            return 0;
        }
    };
    if let Some(how) = submit::silenced(mode.as_deref(), submit::setting_file(site.uid).as_deref())
    {
        say_why(&format!("silenced ({how})"));
        return 0;
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let place = cache_place(&site);
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gpu-tracker-report"));
    let ctx = Context {
        cfg: &site.cfg,
        cluster: &site.cluster,
        uid: site.uid,
        cwd: &cwd,
        cache: place.as_ref().map_err(String::as_str),
        now: now(),
        report: "gpu-tracker-report",
    };
    if !shown {
        submit::note_only(&fields, &ctx);
        return 0;
    }
    match submit::at_submission(&fields, &ctx, |wait| submit::ask_in_background(&exe, wait)) {
        Outcome::Note(n) => eprint!("{}", crate::text::terminal_safe(&n)),
        Outcome::Quiet(w) => say_why(&w),
    }
    0
}

/// Where the caller's cache is kept, or why none is (no home, a directory another user could
/// get at, root: [`history::Place::for_caller`]).
fn cache_place(site: &Site) -> Result<history::Place, String> {
    let dir = history::cache_dir(site.uid).ok_or("no home directory")?;
    history::Place::for_caller(&dir, &site.cluster)
}

/// `--advise-refresh`: asks Slurm's database for the caller's history into their cache.
pub fn refresh() -> u8 {
    let Ok(site) = site() else { return 1 };
    let Ok(place) = cache_place(&site) else {
        return 1;
    };
    match history::refresh(&place, site.uid, &site.cluster, &site.cfg.advise, now()) {
        Ok(_) => 0,
        Err(_) => 1,
    }
}

/// `--advice on|off`: the note at submission for the caller, for good. The file is written
/// only in a directory of the caller's own ([`OwnDir`]), never through a link.
pub fn set_advice(value: &str) -> Result<String, String> {
    let uid = crate::sys::uid();
    let dir = submit::setting_dir(uid).ok_or("no home directory to keep the setting in")?;
    let own = OwnDir::open(&dir, crate::sys::euid())?;
    own.write_whole(submit::SETTING_FILE, format!("{value}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", dir.join(submit::SETTING_FILE).display()))?;
    Ok(format!(
        "advice at submission {value} for you ({}); GPU_TRACKER_ADVICE=off silences one submission",
        dir.join(submit::SETTING_FILE).display()
    ))
}

/// The key `--advise ARG` means: a path to a file (or anything with a `/`) is a batch script,
/// anything else a job name.
pub fn key_of_argument(arg: &str, cwd: &Path) -> Option<Key> {
    if arg.contains('/') || Path::new(arg).is_file() {
        history::absolute(cwd, arg).map(Key::Script)
    } else {
        Some(Key::Name(arg.to_string()))
    }
}

/// The caller's history of `key` for `--advise` at `t`: the cache, asked into first unless it
/// was asked within `advise.refresh_seconds` and holds every submission of `key` it could
/// ([`Cache::due`]); without a cache ([`cache_place`]), asked of Slurm's database for this
/// once. What could not be used goes to `notes`.
fn history_for_advise(
    site: &Site,
    key: &Key,
    t: i64,
    notes: &mut Vec<String>,
) -> Result<Cache, String> {
    let cfg = &site.cfg.advise;
    let place = match cache_place(site) {
        Ok(place) => place,
        Err(why) => {
            notes.push(format!("no history is kept: {why}"));
            let since = t - (cfg.days * 86_400.0) as i64;
            let runs = history::fetch(site.uid, since)
                .map_err(|e| format!("Slurm's database: {e}; {}", notes.join("; ")))?;
            let mut c = Cache::new(site.uid, &site.cluster);
            c.merge(runs, since, t, cfg.days);
            return Ok(c);
        }
    };
    let fresh = history::load(&place, site.uid, &site.cluster).is_some_and(|c| {
        c.failed.is_none()
            && ((t - c.attempted) as f64) < cfg.refresh_seconds
            && c.due(key, t, cfg, &history::submissions(&place)).is_none()
    });
    if !fresh {
        match history::refresh(&place, site.uid, &site.cluster, cfg, t) {
            Ok(true) => {}
            Ok(false) => notes.push("another process is asking Slurm's database".to_string()),
            Err(e) => notes.push(format!("Slurm's database: {e}; the history kept is used")),
        }
    }
    history::load(&place, site.uid, &site.cluster)
        .ok_or_else(|| format!("no history: {}", notes.join("; ")))
}

/// `--advise ARG`: the advice, the matched runs, as text or JSON (`json`). Asks Slurm's
/// database first unless it was asked within `advise.refresh_seconds`. Exit status 0, or 1
/// when neither the database nor the cache has a history to look at.
pub fn advise(arg: &str, json: bool) -> Result<(u8, String), String> {
    let site = site()?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let key = key_of_argument(arg, &cwd).ok_or("a script path that cannot be made absolute")?;
    let cfg = &site.cfg.advise;
    let mut notes = Vec::new();
    let t = now();
    let cache = history_for_advise(&site, &key, t, &mut notes)?;
    let runs = super::matching(&cache.runs, &key);
    let advice = super::advise(&key, &runs, &Request::default(), cfg);
    let text = if json {
        super::note::to_json(advice.as_ref(), &key, &runs, &notes)
    } else {
        let mut t = super::note::report_text(advice.as_ref(), &key, &runs, cfg);
        for n in &notes {
            t.push_str(&format!("note: {n}\n"));
        }
        t
    };
    Ok((0, text))
}
