//! The two facts the plugin takes from slurm.conf: the cluster's name (records of two clusters
//! sharing one spool never mix) and whether Slurm's `gpu` GRES plugin runs on this node (only
//! then does slurmstepd write or clear `SLURM_JOB_GPUS`/`SLURM_STEP_GPUS` before the plugin
//! reads them; without it they are whatever the user exported). And, for `gpu-tracker-report`,
//! which plugstack.conf Slurm reads (where the plugin's settings file is named).
//!
//! The file is slurmstepd's own `SLURM_CONF` (slurmd sets it for itself and its children,
//! configless too), never the job's environment.

use std::path::{Path, PathBuf};

/// Where slurm.conf is when `SLURM_CONF` is not set.
pub const DEFAULT_PATH: &str = "/etc/slurm/slurm.conf";

/// The largest slurm.conf read (as `gpu-tracker-report`'s settings reader): the largest
/// sites' files are some hundred kilobytes. A larger file is refused, not read.
pub const MAX_BYTES: u64 = 4 << 20;

/// What the plugin needs from slurm.conf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmConf {
    /// `ClusterName`, lower-cased as Slurm does; `None` when not set.
    pub cluster_name: Option<String>,
    /// The `GresTypes` list, lower-cased.
    pub gres_types: Vec<String>,
    /// `PlugStackConfig`, as written; `None` when not set (or empty).
    pub plug_stack_config: Option<String>,
    /// `PrologFlags` has `RunInJob` (24.11 on): the extern step's slurmstepd runs the prolog,
    /// after the extern step started.
    pub prolog_runs_in_job: bool,
}

impl SlurmConf {
    /// Parses slurm.conf text: `Key=Value` pairs, keys case-insensitive, `#` comments, several
    /// pairs per line allowed. `Include` files are not followed (both keys belong in the main
    /// file on every site we know of).
    pub fn parse(text: &str) -> SlurmConf {
        let mut out = SlurmConf::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for pair in line.split_whitespace() {
                let Some((k, v)) = pair.split_once('=') else {
                    continue;
                };
                let v = v.trim_matches('"');
                if k.eq_ignore_ascii_case("ClusterName") && !v.is_empty() {
                    out.cluster_name = Some(v.to_ascii_lowercase());
                } else if k.eq_ignore_ascii_case("PlugStackConfig") {
                    out.plug_stack_config = (!v.is_empty()).then(|| v.to_string());
                } else if k.eq_ignore_ascii_case("PrologFlags") {
                    out.prolog_runs_in_job = v
                        .split(',')
                        .any(|f| f.trim().eq_ignore_ascii_case("RunInJob"));
                } else if k.eq_ignore_ascii_case("GresTypes") {
                    out.gres_types = v
                        .split(',')
                        .map(|t| t.trim().to_ascii_lowercase())
                        .filter(|t| !t.is_empty())
                        .collect();
                }
            }
        }
        out
    }

    /// Reads and parses the file at `path`: only a regular file (or a link to one) of at most
    /// [`MAX_BYTES`]; anything else is an error, never waited on
    /// ([`crate::sys::read_small_file`]).
    pub fn read(path: &Path) -> std::io::Result<SlurmConf> {
        crate::sys::read_small_file(path, MAX_BYTES, "a slurm.conf").map(|t| SlurmConf::parse(&t))
    }

    /// The plugstack.conf Slurm reads with this slurm.conf (at `slurm_conf`): `PlugStackConfig`,
    /// else `plugstack.conf` in slurm.conf's directory (Slurm's `get_extra_conf_path`).
    pub fn plugstack_path(&self, slurm_conf: &Path) -> PathBuf {
        match &self.plug_stack_config {
            Some(p) => PathBuf::from(p),
            None => slurm_conf
                .parent()
                .unwrap_or(Path::new("/"))
                .join("plugstack.conf"),
        }
    }

    /// Whether Slurm loads its `gpu` GRES plugin (which sets or clears the GPU variables of
    /// every step before SPANK's `init_post_opt`).
    pub fn has_gpu_gres(&self) -> bool {
        self.gres_types.iter().any(|t| t == "gpu")
    }
}

/// slurm.conf as the calling process sees it: `SLURM_CONF` of the process (slurmstepd's own,
/// or the report's caller's), else [`DEFAULT_PATH`].
pub fn path_from_env() -> PathBuf {
    std::env::var_os("SLURM_CONF")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_PATH), PathBuf::from)
}

/// The spool directory name of the cluster slurm.conf (found by [`path_from_env`]) names.
pub fn this_cluster_dir() -> String {
    let conf = SlurmConf::read(&path_from_env()).unwrap_or_default();
    cluster_dir_name(conf.cluster_name.as_deref())
}

/// A cluster name made safe as one path component: ASCII letters, digits, `-`, `_` and `.`
/// kept (lower-cased), anything else `_`; never empty, never starting with a dot. Without a
/// name: `default`.
pub fn cluster_dir_name(name: Option<&str>) -> String {
    let name = name.map(str::trim).filter(|n| !n.is_empty());
    let Some(name) = name else {
        return "default".into();
    };
    let mut s: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with('.') {
        s.replace_range(0..1, "_");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_name_and_gres_types_are_read_case_insensitively() {
        let c = SlurmConf::parse(
            "# ClusterName=commented\nclustername=GPUtrack\nSlurmctldHost=h  GresTypes=gpu,shard\n",
        );
        assert_eq!(c.cluster_name.as_deref(), Some("gputrack"));
        assert!(c.has_gpu_gres());
        let c = SlurmConf::parse("ClusterName=x\nGresTypes=shard # gpu\n");
        assert!(!c.has_gpu_gres());
        assert_eq!(SlurmConf::parse("").cluster_name, None);
    }

    #[test]
    fn prolog_flags_say_whether_the_prolog_runs_in_the_job() {
        for (text, yes) in [
            ("PrologFlags=Contain,RunInJob\n", true),
            ("prologflags=runinjob # x\n", true),
            ("PrologFlags=Contain,X11\n", false),
            ("# PrologFlags=RunInJob\n", false),
            ("", false),
        ] {
            assert_eq!(SlurmConf::parse(text).prolog_runs_in_job, yes, "{text:?}");
        }
    }

    #[test]
    fn plugstack_is_plugstackconfig_else_beside_slurm_conf() {
        let conf = Path::new("/tmp/x/slurm.conf");
        let c = SlurmConf::parse("PlugStackConfig=/srv/Stack.conf # comment\n");
        assert_eq!(c.plug_stack_config.as_deref(), Some("/srv/Stack.conf"));
        assert_eq!(c.plugstack_path(conf), Path::new("/srv/Stack.conf"));
        let c = SlurmConf::parse("plugstackconfig=\"/a\"\nClusterName=c\n");
        assert_eq!(c.plug_stack_config.as_deref(), Some("/a"));
        for text in ["", "PlugStackConfig=\n", "# PlugStackConfig=/x\n"] {
            let c = SlurmConf::parse(text);
            assert_eq!(
                c.plugstack_path(conf),
                Path::new("/tmp/x/plugstack.conf"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn slurm_conf_is_read_bounded_and_never_from_a_fifo() {
        use crate::cgroup::fixture::{TempTree, within};
        use std::time::Duration;
        let t = TempTree::new("slurmconf-read");
        t.write("slurm.conf", "ClusterName=Alpha\n");
        let read = |p: PathBuf| {
            within(Duration::from_secs(2), move || {
                SlurmConf::read(&p).map_err(|e| e.to_string())
            })
            .expect("SlurmConf::read did not return within 2 s")
        };
        let c = read(t.path().join("slurm.conf")).unwrap();
        assert_eq!(c.cluster_name.as_deref(), Some("alpha"));
        let e = read(t.fifo("fifo.conf")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let huge = t.path().join("huge.conf");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(MAX_BYTES + 1)
            .unwrap();
        let e = read(huge).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn cluster_directory_names_are_one_safe_component() {
        assert_eq!(cluster_dir_name(Some("GPUtrack")), "gputrack");
        assert_eq!(cluster_dir_name(Some("../etc")), "_._etc");
        assert_eq!(cluster_dir_name(Some("a/b\u{1b}")), "a_b_");
        assert_eq!(cluster_dir_name(Some("")), "default");
        assert_eq!(cluster_dir_name(None), "default");
    }
}
