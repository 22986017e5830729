//! Where `gpu-tracker-report` finds the plugin's settings file: where Slurm hands it to the
//! plugin, so that on a login node, where nobody sets `GPU_TRACKER_CONFIG`, the report reads the
//! spool the plugin writes. In order:
//!
//! 1. `--config PATH`, else `GPU_TRACKER_CONFIG`: that file (an error when it is not usable);
//! 2. slurm.conf (`SLURM_CONF`, else `/etc/slurm/slurm.conf`) → its plugstack
//!    (`PlugStackConfig`, else `plugstack.conf` beside slurm.conf) → the files it includes, in
//!    Slurm's order → the first line that loads the gpu-tracker plugin → its `config=PATH`, else
//!    the plugin's default [`config::DEFAULT_PATH`];
//! 3. [`config::DEFAULT_PATH`], when it exists (an error when it is not usable);
//! 4. the built-in defaults.
//!
//! Reading is bounded: slurm.conf up to [`MAX_SLURM_CONF_BYTES`], each plugstack file up to
//! [`MAX_PLUGSTACK_BYTES`], includes [`MAX_INCLUDE_DEPTH`] deep, [`MAX_PLUGSTACK_FILES`] files in
//! all; only regular files are read. What cannot be used on the way (a broken slurm.conf, a
//! plugstack file that is a FIFO, an unusable settings file it names) is a one-line note, and
//! the search goes on. Missing files are not noted: Slurm reads a missing plugstack as empty.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::config::plugstack::{
    Directive, has_wildcard, include_pattern, is_gpu_tracker_plugin, parse_plugstack,
    wildcard_match,
};
use crate::config::slurmconf::{self, SlurmConf};
use crate::config::{self, Config, ConfigError};
use crate::sys::read_small_file;

/// Largest slurm.conf read (large sites list thousands of nodes in it).
pub const MAX_SLURM_CONF_BYTES: u64 = 4 << 20;
/// Largest plugstack file read.
pub const MAX_PLUGSTACK_BYTES: u64 = 1 << 20;
/// How deep `include`s are followed (plugstack.conf is depth 0).
pub const MAX_INCLUDE_DEPTH: usize = 8;
/// Most plugstack files read in one search.
pub const MAX_PLUGSTACK_FILES: usize = 64;
/// Most entries of one directory an `include` pattern looks at.
pub const MAX_DIR_ENTRIES: usize = 4096;
/// Most notes one search gives.
pub const MAX_NOTES: usize = 5;

/// Where to look.
#[derive(Debug, Clone)]
pub struct Places {
    /// A settings file named by the caller, and how (`given with --config`).
    pub given: Option<(PathBuf, &'static str)>,
    /// slurm.conf.
    pub slurm_conf: PathBuf,
    /// Why that slurm.conf: `SLURM_CONF` or `Slurm's default`.
    pub slurm_conf_from: &'static str,
    /// The report's own default settings file.
    pub default_settings: PathBuf,
}

impl Places {
    /// The places of this process: `--config` (`flag`), `GPU_TRACKER_CONFIG`, `SLURM_CONF`.
    pub fn from_env(flag: Option<PathBuf>) -> Places {
        let env = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let given = match (flag, env("GPU_TRACKER_CONFIG")) {
            (Some(p), _) => Some((p, "given with --config")),
            (None, Some(p)) => Some((PathBuf::from(p), "named by GPU_TRACKER_CONFIG")),
            (None, None) => None,
        };
        Places {
            given,
            slurm_conf: slurmconf::path_from_env(),
            slurm_conf_from: if env("SLURM_CONF").is_some() {
                "SLURM_CONF"
            } else {
                "Slurm's default"
            },
            default_settings: PathBuf::from(config::DEFAULT_PATH),
        }
    }
}

/// The settings found, and how.
#[derive(Debug, Clone)]
pub struct Found {
    /// The settings.
    pub config: Config,
    /// The file they were read from; `None`: the built-in defaults.
    pub file: Option<PathBuf>,
    /// How the file was found (or why none was), for people.
    pub how: String,
    /// What could not be used on the way, one line each.
    pub notes: Vec<String>,
}

impl Found {
    /// Where `spool_dir` came from, for people.
    pub fn spool_origin(&self) -> String {
        match &self.file {
            Some(f) => format!("spool_dir of {}, {}", f.display(), self.how),
            None => format!("the built-in spool_dir: {}", self.how),
        }
    }
}

/// Finds and reads the settings (see the module's text for the order).
pub fn find(places: &Places) -> Result<Found, ConfigError> {
    let mut notes = Vec::new();
    let found = |config, file: &Path, how: String, notes| Found {
        config,
        file: Some(file.to_path_buf()),
        how,
        notes,
    };
    if let Some((path, how)) = &places.given {
        return Ok(found(Config::load(path)?, path, how.to_string(), notes));
    }
    let why_not = match through_slurm(places, &mut notes) {
        Ok((path, how)) => match Config::load(&path) {
            Ok(c) => return Ok(found(c, &path, how, notes)),
            Err(e) => {
                notes.push(format!("{e} (the settings file {how}): not used"));
                format!("{} is not usable", path.display())
            }
        },
        Err(why) => why,
    };
    let default = &places.default_settings;
    if default.exists() {
        let how = format!("the report's default ({why_not})");
        return Ok(found(Config::load(default)?, default, how, notes));
    }
    Ok(Found {
        config: Config::default(),
        file: None,
        how: format!(
            "no settings file found ({why_not}; no {})",
            default.display()
        ),
        notes,
    })
}

/// The settings file Slurm hands the plugin, and how it was found; else why none was.
fn through_slurm(places: &Places, notes: &mut Vec<String>) -> Result<(PathBuf, String), String> {
    let conf = &places.slurm_conf;
    let from = places.slurm_conf_from;
    let text = match read_small_file(conf, MAX_SLURM_CONF_BYTES, "a slurm.conf") {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!("no slurm.conf at {} ({from})", conf.display()));
        }
        Err(e) => {
            notes.push(format!(
                "{}: {e}; its plugstack is not searched",
                conf.display()
            ));
            return Err(format!("{} ({from}) is not usable", conf.display()));
        }
    };
    let sc = SlurmConf::parse(&text);
    let stack = sc.plugstack_path(conf);
    let which = match sc.plug_stack_config {
        Some(_) => "its PlugStackConfig",
        None => "beside it",
    };
    let chain = format!(
        "found through {} ({from}) and {} ({which})",
        conf.display(),
        stack.display()
    );
    let l = plugin_line_in(&stack, notes)?;
    let at = format!("{}:{}", l.file.display(), l.line);
    Ok(match config::config_argument(&l.args) {
        Some(p) => (p, format!("named by config= at {at}, {chain}")),
        None => (
            PathBuf::from(config::DEFAULT_PATH),
            format!("the plugin's default: the gpu-tracker line at {at} has no config=, {chain}"),
        ),
    })
}

/// The line of a plugstack file that loads the gpu-tracker plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLine {
    /// The plugstack file it is in.
    pub file: PathBuf,
    /// Its number, from 1.
    pub line: usize,
    /// `required` rather than `optional`.
    pub required: bool,
    /// The plugin's path, as written.
    pub path: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The first line that loads the gpu-tracker plugin in plugstack file `stack` or what it
/// includes, in Slurm's order; else why there is none. What could not be read on the way is
/// added to `notes`.
pub fn plugin_line_in(stack: &Path, notes: &mut Vec<String>) -> Result<PluginLine, String> {
    let mut walk = Walk { read: 0, notes };
    walk.file(stack, 0).ok_or_else(|| {
        format!(
            "no line loads the gpu-tracker plugin in {} or what it includes ({} files read)",
            stack.display(),
            walk.read
        )
    })
}

/// One search through plugstack files.
struct Walk<'a> {
    /// Files read so far.
    read: usize,
    notes: &'a mut Vec<String>,
}

impl Walk<'_> {
    fn note(&mut self, text: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(text);
        }
    }

    /// The gpu-tracker line in plugstack file `file` or what it includes.
    fn file(&mut self, file: &Path, depth: usize) -> Option<PluginLine> {
        if self.read >= MAX_PLUGSTACK_FILES {
            self.note(format!(
                "{}: not read: {MAX_PLUGSTACK_FILES} plugstack files read already",
                file.display()
            ));
            return None;
        }
        self.read += 1;
        let text = match read_small_file(file, MAX_PLUGSTACK_BYTES, "a plugstack file") {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            Err(e) => {
                self.note(format!("{}: {e}; skipped", file.display()));
                return None;
            }
        };
        let stack = parse_plugstack(&text);
        if let Some(l) = stack.invalid.first() {
            self.note(format!(
                "{}:{l}: not a plugstack line (required, optional or include); skipped, as Slurm does",
                file.display()
            ));
        }
        for (line, d) in stack.directives {
            match d {
                Directive::Plugin {
                    required,
                    path,
                    args,
                } if is_gpu_tracker_plugin(&path) => {
                    return Some(PluginLine {
                        file: file.to_path_buf(),
                        line,
                        required,
                        path,
                        args,
                    });
                }
                Directive::Plugin { .. } => {}
                Directive::Include(_) if depth >= MAX_INCLUDE_DEPTH => self.note(format!(
                    "{}:{line}: include not followed: {MAX_INCLUDE_DEPTH} levels deep already",
                    file.display()
                )),
                Directive::Include(pattern) => {
                    for f in self.expand(&include_pattern(file, &pattern)) {
                        if let Some(hit) = self.file(&f, depth + 1) {
                            return Some(hit);
                        }
                    }
                }
            }
        }
        None
    }

    /// The paths a glob(3) pattern matches, sorted, as Slurm's `include` finds them: wildcards
    /// in any component; unreadable directories give nothing. At most
    /// [`MAX_PLUGSTACK_FILES`], each directory looked at up to [`MAX_DIR_ENTRIES`] entries.
    fn expand(&mut self, pattern: &Path) -> Vec<PathBuf> {
        let mut paths = vec![PathBuf::new()];
        for c in pattern.components() {
            let wild = match c {
                Component::Normal(s) => s.to_str().filter(|s| has_wildcard(s)),
                _ => None,
            };
            let Some(wild) = wild else {
                paths.iter_mut().for_each(|p| p.push(c));
                continue;
            };
            let mut next = Vec::new();
            for base in &paths {
                let dir = if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    base
                };
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                let mut names: Vec<String> = entries
                    .take(MAX_DIR_ENTRIES)
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| wildcard_match(wild, n))
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| base.join(n)));
                if next.len() > MAX_PLUGSTACK_FILES {
                    break;
                }
            }
            paths = next;
        }
        // A component without wildcards matches only what is there.
        paths.retain(|p| std::fs::symlink_metadata(p).is_ok());
        paths.sort();
        if paths.len() > MAX_PLUGSTACK_FILES {
            self.note(format!(
                "include {}: more than {MAX_PLUGSTACK_FILES} files match; the first are read",
                pattern.display()
            ));
            paths.truncate(MAX_PLUGSTACK_FILES);
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;

    /// Places with slurm.conf at `conf` in `t` and a report default that does not exist
    /// unless `default` is given.
    fn places(t: &TempTree, default: Option<&str>) -> Places {
        Places {
            given: None,
            slurm_conf: t.path().join("etc/slurm.conf"),
            slurm_conf_from: "SLURM_CONF",
            default_settings: t.path().join(default.unwrap_or("no-such-default.toml")),
        }
    }

    fn spool_of(f: &Found) -> String {
        f.config.spool_dir.display().to_string()
    }

    #[test]
    fn the_settings_are_found_as_slurm_hands_them_to_the_plugin() {
        let t = TempTree::new("settings-found");
        let root = t.path().display().to_string();
        t.write(
            "etc/slurm.conf",
            &format!("ClusterName=c\nPlugStackConfig={root}/etc/stack.conf\n"),
        )
        .write(
            "etc/stack.conf",
            "optional /x/other.so\ninclude stack.d/*.conf\n",
        )
        .write(
            "etc/stack.d/10-other.conf",
            "required /x/spank_other.so a=b\n",
        )
        .write(
            "etc/stack.d/20-gt.conf",
            &format!("optional /x/libgpu_tracker.so config={root}/gt.toml\n"),
        )
        .write(
            "etc/stack.d/30-gt.conf.off",
            "optional /x/gpu_tracker.so config=/nope\n",
        )
        .write("gt.toml", "spool_dir = \"/srv/spool\"\n");
        let f = find(&places(&t, None)).unwrap();
        assert_eq!(spool_of(&f), "/srv/spool");
        assert_eq!(f.file.as_deref(), Some(t.path().join("gt.toml").as_path()));
        assert!(f.notes.is_empty(), "{:?}", f.notes);
        for part in [
            "named by config= at ",
            "/etc/stack.d/20-gt.conf:1",
            "/etc/slurm.conf (SLURM_CONF)",
            "/etc/stack.conf (its PlugStackConfig)",
        ] {
            assert!(f.how.contains(part), "{part}: {}", f.how);
        }
        assert!(
            f.spool_origin().starts_with("spool_dir of "),
            "{}",
            f.spool_origin()
        );

        // Given settings come first.
        let mut p = places(&t, None);
        t.write("given.toml", "spool_dir = \"/given\"\n");
        p.given = Some((t.path().join("given.toml"), "given with --config"));
        let f = find(&p).unwrap();
        assert_eq!(
            (spool_of(&f), f.how.as_str()),
            ("/given".into(), "given with --config")
        );
        p.given = Some((t.path().join("missing.toml"), "given with --config"));
        assert!(find(&p).is_err());
    }

    #[test]
    fn plugstack_beside_slurm_conf_and_a_line_without_config() {
        let t = TempTree::new("settings-beside");
        t.write("etc/slurm.conf", "ClusterName=c\n").write(
            "etc/plugstack.conf",
            "include /nonexistent/*.conf\n  optional gpu_tracker.so\n",
        );
        let mut notes = Vec::new();
        let (path, how) = through_slurm(&places(&t, None), &mut notes).unwrap();
        assert_eq!(path, Path::new(config::DEFAULT_PATH));
        assert!(how.contains("plugstack.conf:2 has no config="), "{how}");
        assert!(how.contains("(beside it)"), "{how}");
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn without_slurm_the_report_default_then_the_built_in_defaults() {
        let t = TempTree::new("settings-default");
        let f = find(&places(&t, None)).unwrap();
        assert_eq!(f.file, None);
        assert_eq!(spool_of(&f), "/var/spool/gpu-tracker");
        assert!(f.how.contains("no slurm.conf at "), "{}", f.how);
        assert!(f.notes.is_empty(), "{:?}", f.notes);
        // A plugstack without the plugin: the report's default file.
        t.write("etc/slurm.conf", "")
            .write("etc/plugstack.conf", "optional /x/other.so\n")
            .write("default.toml", "spool_dir = \"/d\"\n");
        let f = find(&places(&t, Some("default.toml"))).unwrap();
        assert_eq!(spool_of(&f), "/d");
        assert!(
            f.how
                .starts_with("the report's default (no line loads the gpu-tracker plugin"),
            "{}",
            f.how
        );
    }

    #[test]
    fn broken_files_are_notes_and_the_search_goes_on() {
        let t = TempTree::new("settings-broken");
        let root = t.path().display().to_string();
        t.write("default.toml", "spool_dir = \"/d\"\n");
        // slurm.conf is a directory.
        std::fs::create_dir_all(t.path().join("etc/slurm.conf")).unwrap();
        let f = find(&places(&t, Some("default.toml"))).unwrap();
        assert_eq!(spool_of(&f), "/d");
        assert_eq!(f.notes.len(), 1, "{:?}", f.notes);
        assert!(f.notes[0].contains("not a regular file"), "{:?}", f.notes);
        std::fs::remove_dir(t.path().join("etc/slurm.conf")).unwrap();

        // A FIFO, a directory and an invalid line on the way; the next file has the line, and
        // the settings it names are broken: noted, and the default is used.
        t.write("etc/slurm.conf", "")
            .write("etc/plugstack.conf", "bogus line\ninclude d/*\n")
            .write(
                "etc/d/3-gt",
                &format!("optional /x/gpu_tracker.so config={root}/bad.toml\n"),
            )
            .write("bad.toml", "spool_dir = \"relative\"\n");
        std::fs::create_dir_all(t.path().join("etc/d/2-dir")).unwrap();
        let fifo = t.path().join("etc/d/1-fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let started = std::time::Instant::now();
        let f = find(&places(&t, Some("default.toml"))).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(spool_of(&f), "/d");
        let notes = f.notes.join("\n");
        assert_eq!(f.notes.len(), 4, "{notes}");
        assert!(
            notes.contains("plugstack.conf:1: not a plugstack line"),
            "{notes}"
        );
        assert!(
            notes.contains("1-fifo: not a regular file; skipped"),
            "{notes}"
        );
        assert!(
            notes.contains("2-dir: not a regular file; skipped"),
            "{notes}"
        );
        assert!(
            notes.contains("`spool_dir`") && notes.contains("d/3-gt:1"),
            "{notes}"
        );
        assert!(f.notes.iter().all(|n| n.lines().count() == 1), "{notes}");
    }

    #[test]
    fn includes_are_bounded_in_depth_and_number() {
        let t = TempTree::new("settings-bounds");
        // A file that includes itself: followed MAX_INCLUDE_DEPTH levels, then noted.
        t.write("etc/slurm.conf", "")
            .write("etc/plugstack.conf", "include plugstack.conf\n");
        let mut notes = Vec::new();
        let why = through_slurm(&places(&t, None), &mut notes).unwrap_err();
        assert!(
            why.contains(&format!("({} files read)", MAX_INCLUDE_DEPTH + 1)),
            "{why}"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("levels deep"), "{notes:?}");

        // More files than are read; the gpu-tracker line is in the last one.
        let mut stack = String::new();
        for i in 0..MAX_PLUGSTACK_FILES + 5 {
            t.write(&format!("etc/many/{i:03}.conf"), "optional /x/other.so\n");
            stack = format!("{i:03}");
        }
        t.write(
            &format!("etc/many/{stack}.conf"),
            "optional /x/gpu_tracker.so config=/x\n",
        )
        .write("etc/plugstack.conf", "include many/*.conf\n");
        let mut notes = Vec::new();
        let why = through_slurm(&places(&t, None), &mut notes).unwrap_err();
        assert!(
            why.contains("no line loads the gpu-tracker plugin"),
            "{why}"
        );
        assert!(
            notes.iter().any(|n| n.contains("more than 64 files match")),
            "{notes:?}"
        );
        assert!(notes.len() <= MAX_NOTES, "{notes:?}");
    }
}
