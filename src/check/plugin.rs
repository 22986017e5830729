//! The plugin as slurmstepd loads it: the plugstack line, the file, the Slurm release and
//! glibc it was built for, slurmd's start against the file's change, and the settings file
//! the line names.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::elf::{self, PluginElf};
use super::slurmd::{self, Slurmd};
use super::{Check, PluginFound, SlurmConfText};
use crate::config::discover::{PluginLine, plugin_line_in};
use crate::config::{self, Config};

/// Where Slurm looks for a plugin named by a relative path when slurm.conf sets no
/// `PluginDir`: its build's default, which differs by distribution (Debian's `slurm-wlm`,
/// SchedMD's RPMs, a source build).
pub const DEFAULT_PLUGIN_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "/usr/lib/aarch64-linux-gnu/slurm-wlm",
    "/usr/lib64/slurm",
    "/usr/lib/slurm",
    "/usr/local/lib/slurm",
];

/// The plugstack line, the plugin file and what it was built for, and slurmd's start: the
/// plugin file and settings path found, or `None` when slurmstepd has no plugin to load.
pub fn check(
    conf: &SlurmConfText,
    daemons: &[Slurmd],
    out: &mut Vec<Check>,
) -> Option<PluginFound> {
    let stack = conf.conf.plugstack_path(&conf.path);
    let mut notes = Vec::new();
    let line = match plugin_line_in(&stack, &mut notes) {
        Ok(l) => l,
        Err(why) => {
            out.push(Check::fail(
                "plugstack",
                format!("{why}; {}", notes.join("; "))
                    .trim_end_matches("; ")
                    .to_string(),
                "add `optional /PATH/gpu_tracker.so config=/etc/slurm/gpu-tracker.toml` to \
                 plugstack.conf (docs/INSTALL.md)",
            ));
            return None;
        }
    };
    out.push(plugstack_check(&line, &notes));
    let so = match resolve(&line.path, conf.value("PluginDir").as_deref()) {
        Ok(p) => p,
        Err(why) => {
            out.push(Check::fail(
                "plugin file",
                why,
                "install the plugin where the plugstack line says, or correct the line",
            ));
            return None;
        }
    };
    let settings =
        config::config_argument(&line.args).unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH));
    let found = PluginFound {
        so: so.clone(),
        settings,
    };
    if let Err(why) = crate::trust::check_root_trusted(&so, "the plugin") {
        out.push(Check::fail(
            "plugin file",
            format!("{why}: slurmstepd loads it as root"),
            "make the file and every directory above it root's and writable by no one else",
        ));
        return Some(found);
    }
    let file = match elf::read_plugin(&so) {
        Ok(f) => f,
        Err(why) => {
            out.push(Check::fail(
                "plugin file",
                why,
                "reinstall the plugin built from this tree (`cargo build --release --features spank --lib`)",
            ));
            return Some(found);
        }
    };
    out.push(build_check(
        &so,
        &file,
        std::env::consts::ARCH,
        &crate::sys::glibc_version(),
    ));
    out.push(release_check(file.plugin_version, slurmd::version(daemons)));
    out.push(restart_check(&so, daemons));
    Some(found)
}

/// The plugstack line: where it is, `optional` or `required`, its arguments.
pub fn plugstack_check(line: &PluginLine, notes: &[String]) -> Check {
    let at = format!("{}:{}", line.file.display(), line.line);
    let unknown: Vec<&String> = line
        .args
        .iter()
        .filter(|a| !a.starts_with("config="))
        .collect();
    if !unknown.is_empty() {
        return Check::warn(
            "plugstack",
            format!("{at} gives the plugin arguments it does not know: {unknown:?}"),
            "keep only config=PATH on the line",
        );
    }
    let how = if line.required {
        "required: a step whose plugin cannot load fails"
    } else {
        "optional: if it cannot load, slurmstepd skips it with one verbose log line and jobs \
         run untracked; the checks below say whether it loads"
    };
    let mut said = format!("{at} loads {} ({how})", line.path);
    if !notes.is_empty() {
        said.push_str(&format!("; on the way: {}", notes.join("; ")));
    }
    Check::ok("plugstack", said)
}

/// The file slurmstepd loads for plugstack path `path`: an absolute path as it is, a relative
/// one from `PluginDir` (a `:` list), else from Slurm's usual built-in directories.
pub fn resolve(path: &str, plugin_dir: Option<&str>) -> Result<PathBuf, String> {
    if path.starts_with('/') {
        let p = PathBuf::from(path);
        return match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => Ok(p),
            Ok(_) => Err(format!("{path} is not a regular file")),
            Err(e) => Err(format!("{path}: {e}")),
        };
    }
    let dirs: Vec<&str> = match plugin_dir {
        Some(d) => d.split(':').filter(|d| !d.is_empty()).collect(),
        None => DEFAULT_PLUGIN_DIRS.to_vec(),
    };
    dirs.iter()
        .map(|d| Path::new(d).join(path))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let whence = if plugin_dir.is_some() {
                "slurm.conf's PluginDir"
            } else {
                "Slurm's usual plugin directories (slurm.conf sets no PluginDir)"
            };
            format!("{path} is in none of {} ({whence})", dirs.join(", "))
        })
}

/// What the file was built for against this machine (`arch`) and its glibc (`glibc`).
pub fn build_check(so: &Path, file: &PluginElf, arch: &str, glibc: &str) -> Check {
    let name = "plugin build";
    if file.machine != arch {
        return Check::fail(
            name,
            format!(
                "{} is built for {}, this node is {arch}: it cannot load",
                so.display(),
                file.machine
            ),
            format!("install the plugin built for {arch}"),
        );
    }
    let Some(needed) = elf::newest_glibc(&file.glibc_needs) else {
        return Check::ok(name, format!("{arch}; needs no versioned glibc symbol"));
    };
    match (elf::glibc_number(needed), elf::glibc_number(glibc)) {
        (Some(n), Some(h)) if n > h => Check::fail(
            name,
            format!(
                "needs {needed}, this node has glibc {glibc}: the dynamic loader refuses it, and \
                 slurmstepd skips it"
            ),
            "install a plugin built on (or for) a glibc no newer than this node's",
        ),
        (Some(_), Some(_)) => Check::ok(
            name,
            format!("{arch}; needs {needed}, this node has glibc {glibc}"),
        ),
        _ => Check::warn(
            name,
            format!("needs {needed}; this node's glibc ({glibc:?}) cannot be told"),
            "compare `ldd --version` with the newest GLIBC_ of `objdump -T` on the plugin",
        ),
    }
}

/// The plugin's `plugin_version` against the running Slurm's release: slurmstepd loads only a
/// plugin of its own major release (major and minor).
pub fn release_check(
    plugin_version: Option<u32>,
    slurmd: Result<((u32, u32, u32), String), String>,
) -> Check {
    let name = "release";
    let rebuild = "rebuild the plugin against this Slurm's headers (docs/INSTALL.md, \"Building \
                   for your Slurm\") and restart slurmd";
    let Some(v) = plugin_version else {
        return Check::fail(
            name,
            "the file has no plugin_version symbol: Slurm's loader refuses it",
            rebuild,
        );
    };
    let (pa, pb, pc) = elf::slurm_release(v);
    match slurmd {
        Ok(((a, b, c), program)) if (a, b) == (pa, pb) => Check::ok(
            name,
            format!("built for Slurm {pa}.{pb:02}.{pc}; {program} is {a}.{b:02}.{c}"),
        ),
        Ok(((a, b, c), program)) => Check::fail(
            name,
            format!(
                "built for Slurm {pa}.{pb:02}.{pc}, but {program} is {a}.{b:02}.{c}: slurmstepd \
                 skips a plugin of another release"
            ),
            rebuild,
        ),
        Err(why) => Check::warn(
            name,
            format!("built for Slurm {pa}.{pb:02}.{pc}; the running release cannot be told: {why}"),
            "run the check on a node where slurmd runs, as root",
        ),
    }
}

/// Whether every slurmd started after the plugin file last changed: its modification or its
/// inode's change time, whichever is later (a package installs the file with its build's
/// modification time, long before; the change time is the install's).
pub fn restart_check(so: &Path, daemons: &[Slurmd]) -> Check {
    let name = "slurmd restart";
    if daemons.is_empty() {
        return Check::warn(
            name,
            "no slurmd runs on this machine",
            "start slurmd (`systemctl start slurmd`) and run the check again",
        );
    }
    let Ok(changed) = std::fs::metadata(so).map(|m| m.mtime().max(m.ctime())) else {
        return Check::warn(name, "the plugin file's change time cannot be read", "-");
    };
    let stale = slurmd::started_before(daemons, changed);
    let when = local_time(changed);
    if stale.is_empty() {
        return Check::ok(
            name,
            format!(
                "{} started after the plugin file changed ({when})",
                list(daemons.iter())
            ),
        );
    }
    Check::fail(
        name,
        format!(
            "{} started before the plugin file changed ({when}): its job prolog, which ties \
             records to their run and time limit, is not the installed plugin's",
            list(stale.into_iter())
        ),
        "restart slurmd (`systemctl restart slurmd`; running jobs are not touched)",
    )
}

/// A time for people, in the node's time zone.
fn local_time(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| unix.to_string())
}

fn list<'a>(daemons: impl Iterator<Item = &'a Slurmd>) -> String {
    daemons.map(slurmd::describe).collect::<Vec<_>>().join(", ")
}

/// The settings file the line names, as the plugin reads it: missing, not root's alone, or
/// not valid turns tracking off. The settings, when usable.
pub fn settings(found: &PluginFound, out: &mut Vec<Check>) -> Option<Config> {
    let name = "settings";
    let path = &found.settings;
    if std::fs::symlink_metadata(path).is_err() {
        out.push(Check::fail(
            name,
            format!(
                "{} is missing: the plugin turns tracking off",
                path.display()
            ),
            format!(
                "install the settings there (`install -m 0644 config/gpu-tracker.toml {}`)",
                path.display()
            ),
        ));
        return None;
    }
    if let Err(why) = crate::trust::check_root_trusted(path, "settings file") {
        out.push(Check::fail(
            name,
            format!("{why}: the plugin turns tracking off"),
            "make the file and every directory above it root's and writable by no one else",
        ));
        return None;
    }
    match Config::load(path) {
        Ok(cfg) => {
            out.push(Check::ok(
                name,
                format!("{}: {}", path.display(), super::what_is_tracked(&cfg)),
            ));
            Some(cfg)
        }
        Err(e) => {
            out.push(Check::fail(
                name,
                format!("{e}: the plugin turns tracking off"),
                "correct the file (its keys: docs/OPTIONS.md)",
            ));
            None
        }
    }
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
