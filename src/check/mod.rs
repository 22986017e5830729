//! The node check (`gpu-tracker-report --check-node`): whether slurmstepd on this node will
//! load the plugin and track jobs, told to an admin one check a line, each `ok`, `warn` or
//! `FAIL` with the reason and, where not ok, the fix.
//!
//! slurmstepd skips an `optional` plugstack line whose plugin does not load with one verbose
//! log line, and the plugin turns tracking off for a settings file it cannot use or trust: in
//! both cases jobs run untracked and nothing tells the admin. Each check here asks what
//! slurmstepd or the plugin would find, reading the same files with the same rules (the
//! plugstack walk of the report's settings discovery, the plugin's trust rules and spool
//! checks, gres.conf as the plugin maps GPUs), and never changes anything: nothing is made,
//! the plugin is never loaded ([`elf`]), no daemon is signalled.
//!
//! `FAIL` is what leaves jobs untracked (or their records unwritten, or slurmd's prolog, which
//! ties records to their run and time limit, not run); `warn` costs part of what is recorded
//! (GPUs, live state) or cannot be told.

pub mod cgroups;
pub mod elf;
pub mod gpus;
pub mod plugin;
pub mod slurmd;
pub mod spool;

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::config::slurmconf::SlurmConf;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As it should be.
    Ok,
    /// Jobs are tracked, but something is lost or cannot be told.
    Warn,
    /// Jobs will not be tracked as they should.
    Fail,
}

impl Status {
    /// The word a line starts with.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// What was checked, a short name (`plugstack`, `release`, ...).
    pub name: String,
    /// How it came out.
    pub status: Status,
    /// What was found, in plain words.
    pub said: String,
    /// What to do about it; `None` when ok.
    pub fix: Option<String>,
}

impl Check {
    /// A check that passed.
    pub fn ok(name: &str, said: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status: Status::Ok,
            said: said.into(),
            fix: None,
        }
    }

    /// A check that costs part of the records.
    pub fn warn(name: &str, said: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status: Status::Warn,
            said: said.into(),
            fix: Some(fix.into()),
        }
    }

    /// A check that leaves jobs untracked.
    pub fn fail(name: &str, said: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status: Status::Fail,
            said: said.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Whether, by these checks, slurmstepd will load the plugin and track jobs: no check failed.
pub fn tracks(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.status != Status::Fail)
}

/// Where the check looks: the node's files, and the roots of `/proc` and the cgroup
/// filesystem (tests point these at fixtures).
#[derive(Debug, Clone)]
pub struct Places {
    /// slurm.conf.
    pub slurm_conf: PathBuf,
    /// Why that one (`SLURM_CONF`, `slurmd's -f`, `Slurm's default`, `configless cache`).
    pub slurm_conf_from: &'static str,
    /// `/proc`.
    pub proc_root: PathBuf,
    /// `/sys/fs/cgroup`.
    pub cgroup_root: PathBuf,
}

/// Where a configless slurmd keeps the slurm.conf it was sent (`/run/slurm/conf`, a link to
/// its `SlurmdSpoolDir/conf-cache`).
pub const CONFIGLESS_SLURM_CONF: &str = "/run/slurm/conf/slurm.conf";

impl Places {
    /// The places of this process: slurm.conf from `SLURM_CONF`, else the one the running
    /// slurmd was started with (`slurmd -f PATH`), else Slurm's default, else (a configless
    /// node) the configuration slurmd was sent.
    pub fn from_env() -> Places {
        let proc_root = PathBuf::from("/proc");
        let set = std::env::var_os("SLURM_CONF").is_some_and(|v| !v.is_empty());
        let default = Path::new(crate::config::slurmconf::DEFAULT_PATH);
        let given = || slurmd::find(&proc_root).into_iter().find_map(|d| d.conf);
        let (slurm_conf, slurm_conf_from) = if set {
            (crate::config::slurmconf::path_from_env(), "SLURM_CONF")
        } else if let Some(p) = given() {
            (p, "slurmd's -f")
        } else if !default.exists() && Path::new(CONFIGLESS_SLURM_CONF).exists() {
            (PathBuf::from(CONFIGLESS_SLURM_CONF), "configless cache")
        } else {
            (default.to_path_buf(), "Slurm's default")
        };
        Places {
            slurm_conf,
            slurm_conf_from,
            proc_root,
            cgroup_root: PathBuf::from(crate::cgroup::DEFAULT_ROOT),
        }
    }
}

/// slurm.conf's text as read, and what the plugin takes from it.
#[derive(Debug, Clone)]
pub struct SlurmConfText {
    /// Where it is.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// Parsed as the plugin parses it.
    pub conf: SlurmConf,
}

impl SlurmConfText {
    /// The last value of `key` (case-insensitive, as Slurm reads keys), unquoted; `None`
    /// when not set or empty.
    pub fn value(&self, key: &str) -> Option<String> {
        conf_value(&self.text, key)
    }
}

/// The last value of `key` in slurm.conf-style `text` (`Key=Value` pairs, `#` comments).
pub fn conf_value(text: &str, key: &str) -> Option<String> {
    let mut out = None;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        for pair in line.split_whitespace() {
            if let Some((k, v)) = pair.split_once('=')
                && k.eq_ignore_ascii_case(key)
            {
                let v = v.trim_matches('"');
                out = (!v.is_empty()).then(|| v.to_string());
            }
        }
    }
    out
}

/// Runs every check, in the order slurmstepd meets what they check.
pub fn run(places: &Places) -> Vec<Check> {
    let mut out = Vec::new();
    let conf = match crate::sys::read_small_file(
        &places.slurm_conf,
        crate::config::slurmconf::MAX_BYTES,
        "a slurm.conf",
    ) {
        Ok(text) => {
            let conf = SlurmConf::parse(&text);
            out.push(Check::ok(
                "slurm.conf",
                format!(
                    "{} ({}), cluster {}",
                    places.slurm_conf.display(),
                    places.slurm_conf_from,
                    conf.cluster_name
                        .as_deref()
                        .unwrap_or("without a ClusterName")
                ),
            ));
            SlurmConfText {
                path: places.slurm_conf.clone(),
                text,
                conf,
            }
        }
        Err(e) => {
            out.push(Check::fail(
                "slurm.conf",
                format!(
                    "{} ({}): {e}",
                    places.slurm_conf.display(),
                    places.slurm_conf_from
                ),
                "run the check with SLURM_CONF set to the slurm.conf slurmd reads",
            ));
            return out;
        }
    };
    let daemons = slurmd::find(&places.proc_root);
    let found = plugin::check(&conf, &daemons, &mut out);
    let Some(found) = found else {
        return out;
    };
    let cfg = plugin::settings(&found, &mut out);
    out.push(cgroups::check(&conf, &daemons, places));
    if let Some(cfg) = cfg {
        spool::check(&cfg, &conf, &mut out);
        gpus::check(&cfg, &conf, &daemons, &mut out);
        out.push(spool::live(&cfg));
    }
    out
}

/// The settings the plugin will read, found through its plugstack line.
#[derive(Debug, Clone)]
pub struct PluginFound {
    /// The plugin file slurmstepd loads.
    pub so: PathBuf,
    /// The settings file it names (its `config=`, else the plugin's default).
    pub settings: PathBuf,
}

/// The settings of `cfg` as the plugin turns them into whether a job is tracked, in words.
pub fn what_is_tracked(cfg: &Config) -> &'static str {
    if cfg.track_all {
        "every job is tracked (track_all)"
    } else {
        "jobs that ask (--gpu-track) are tracked"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_tracks_unless_a_check_failed() {
        let ok = Check::ok("a", "fine");
        let warn = Check::warn("b", "part", "do this");
        let fail = Check::fail("c", "broken", "do that");
        assert!(tracks(&[ok.clone(), warn.clone()]));
        assert!(!tracks(&[ok, warn, fail.clone()]));
        assert_eq!(fail.status.word(), "FAIL");
        assert_eq!(
            serde_json::to_value(&fail).unwrap(),
            serde_json::json!({"name": "c", "status": "fail", "said": "broken", "fix": "do that"})
        );
    }

    #[test]
    fn slurm_conf_values_are_the_last_set_case_insensitively() {
        let text =
            "PluginDir=/a\n# PluginDir=/b\nplugindir=\"/c:/d\" ProctrackType=proctrack/cgroup\n";
        assert_eq!(conf_value(text, "PluginDir").as_deref(), Some("/c:/d"));
        assert_eq!(
            conf_value(text, "proctracktype").as_deref(),
            Some("proctrack/cgroup")
        );
        assert_eq!(conf_value(text, "CgroupPlugin"), None);
        assert_eq!(conf_value("PluginDir=\n", "PluginDir"), None);
    }
}
