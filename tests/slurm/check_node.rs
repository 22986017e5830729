//! `gpu-tracker-report --check-node` on the local cluster: green on the cluster as it runs, and
//! red for each way a node can be broken (a plugin built for another release or a newer glibc,
//! a missing settings file, a group-writable spool, slurmd not restarted since the plugin
//! changed, no plugstack line). Each
//! break is made in a copy of the test's own (slurm.conf, plugstack, plugin, settings and spool
//! under a directory it removes), never in the cluster's files; no daemon is touched.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_tracker::check::plugin::resolve;
use gpu_tracker::config::discover::plugin_line_in;
use gpu_tracker::config::slurmconf::SlurmConf;
use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSection, ObjectSymbol};

use crate::support::*;

/// The check run as root (as an admin runs it) with `slurm_conf`: its exit status and its
/// checks as (name, status, what it said).
fn check(slurm_conf: &Path) -> (i32, Vec<(String, String, String)>) {
    let mut cmd = Command::new(program(
        "gpu-tracker-report",
        env!("CARGO_BIN_EXE_gpu-tracker-report"),
    ));
    cmd.args(["--check-node", "-f", "json"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SLURM_CONF", slurm_conf);
    // The SIMULATED GPUs' fake NVML reads its devices from the file slurmd names to it.
    let scenario = state_dir().join("simulated-gpus.json");
    if scenario.exists() {
        cmd.env("FAKE_NVML_SCENARIO", scenario);
    }
    let out = cmd.output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("status"), s("said"))
        })
        .collect();
    (out.status.code().unwrap_or(-1), checks)
}

/// The statuses of the checks named `name` (the GPU check has one line a node).
fn status_of<'a>(checks: &'a [(String, String, String)], name: &str) -> Vec<&'a str> {
    checks
        .iter()
        .filter(|c| c.0 == name)
        .map(|c| c.1.as_str())
        .collect()
}

fn failed(checks: &[(String, String, String)]) -> Vec<&(String, String, String)> {
    checks.iter().filter(|c| c.1 == "fail").collect()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn the_check_is_green_on_the_working_cluster() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    let (code, checks) = check(&slurm_conf());
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    assert_eq!(code, 0, "{checks:#?}");
    for name in [
        "slurm.conf",
        "plugstack",
        "plugin build",
        "release",
        "slurmd restart",
        "settings",
        "cgroups",
        "spool",
        "live",
    ] {
        assert_eq!(status_of(&checks, name), ["ok"], "{name}: {checks:#?}");
    }
    // The release slurmstepd runs is the one the plugin was built against, by number.
    let said = |name: &str| checks.iter().find(|c| c.0 == name).unwrap().2.clone();
    let v = Command::new("slurmd").arg("-V").output().unwrap();
    let v = String::from_utf8_lossy(&v.stdout).into_owned();
    let release = v.split_whitespace().nth(1).unwrap();
    assert!(
        said("release").ends_with(&format!("is {release}")),
        "{}",
        said("release")
    );
    assert!(
        said("cgroups").starts_with(&format!("cgroup {} ", cgroup_version())),
        "{}",
        said("cgroups")
    );
    // Every node's GPUs in gres.conf are found: the SIMULATED NVIDIA GPUs through the fake
    // NVML, the AMD node's through the simulated sysfs.
    let gpus: Vec<_> = checks.iter().filter(|c| c.0 == "gpus").collect();
    assert!(!gpus.is_empty(), "{checks:#?}");
    for g in &gpus {
        assert_eq!(g.1, "ok", "{g:?}");
        assert!(g.2.contains("are found: "), "{g:?}");
    }
    // The text says the same, and ends with the verdict.
    let mut text = Command::new(program(
        "gpu-tracker-report",
        env!("CARGO_BIN_EXE_gpu-tracker-report"),
    ));
    text.arg("--check").env("SLURM_CONF", slurm_conf());
    let scenario = state_dir().join("simulated-gpus.json");
    if scenario.exists() {
        text.env("FAKE_NVML_SCENARIO", scenario);
    }
    let text = text.output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok    release: built for Slurm ")),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with(
            "This node tracks jobs: slurmstepd will load the plugin and the plugin can record them."
        ),
        "{text}"
    );
}

/// A copy of the node's Slurm and plugin files in a directory of its own, root's (the trust
/// rules hold there as on the node), removed on drop.
struct NodeCopy {
    dir: PathBuf,
}

impl NodeCopy {
    /// The copy: slurm.conf naming the copy's plugstack.conf, which loads the node's plugin
    /// (or, `own_plugin`, a copy of it in the directory: a file changed now) with the copy's
    /// settings (their spool and live directory the copy's), cgroup.conf and gres.conf beside
    /// them. The node's plugin file is only read: a copy, or a link to it, would change its
    /// inode's change time, which the check compares with slurmd's start.
    fn new(tag: &str, own_plugin: bool) -> NodeCopy {
        let dir = PathBuf::from(format!(
            "/var/tmp/gt-check-node-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let copy = NodeCopy { dir };
        let conf_text = std::fs::read_to_string(slurm_conf()).unwrap();
        let sc = SlurmConf::parse(&conf_text);
        let stack = sc.plugstack_path(&slurm_conf());
        let line = plugin_line_in(&stack, &mut Vec::new()).unwrap();
        let plugin_dir = conf_text
            .lines()
            .find_map(|l| l.strip_prefix("PluginDir="))
            .map(str::to_string);
        let so = resolve(&line.path, plugin_dir.as_deref()).unwrap();
        let settings = gpu_tracker::config::config_argument(&line.args)
            .unwrap_or_else(|| PathBuf::from(gpu_tracker::config::DEFAULT_PATH));
        let so_copy = if own_plugin {
            let c = copy.path("gpu_tracker.so");
            std::fs::copy(&so, &c).unwrap();
            c
        } else {
            so
        };
        let toml = std::fs::read_to_string(&settings).unwrap();
        let toml: String = toml
            .lines()
            .filter(|l| !l.starts_with("spool_dir") && !l.starts_with("live_dir"))
            .map(|l| format!("{l}\n"))
            .collect();
        let toml = format!(
            "spool_dir = \"{}\"\nlive_dir = \"{}\"\n{toml}",
            copy.path("spool").display(),
            copy.path("live").display()
        );
        std::fs::write(copy.path("gpu-tracker.toml"), toml).unwrap();
        copy.plugstack(&format!(
            "optional {} config={}\n",
            so_copy.display(),
            copy.path("gpu-tracker.toml").display()
        ));
        let conf: String = conf_text
            .lines()
            .filter(|l| !l.to_ascii_lowercase().starts_with("plugstackconfig="))
            .map(|l| format!("{l}\n"))
            .collect();
        let conf = format!(
            "{conf}PlugStackConfig={}\n",
            copy.path("plugstack.conf").display()
        );
        std::fs::write(copy.path("slurm.conf"), conf).unwrap();
        let beside = slurm_conf().parent().unwrap().to_path_buf();
        for f in ["cgroup.conf", "gres.conf"] {
            if beside.join(f).exists() {
                std::fs::copy(beside.join(f), copy.path(f)).unwrap();
            }
        }
        copy
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn plugstack(&self, text: &str) {
        std::fs::write(self.path("plugstack.conf"), text).unwrap();
    }

    fn check(&self) -> (i32, Vec<(String, String, String)>) {
        check(&self.path("slurm.conf"))
    }
}

impl Drop for NodeCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes `version` over the `plugin_version` of the ELF shared object at `so`: the plugin as
/// built against another release's headers.
fn set_plugin_version(so: &Path, version: u32) {
    let bytes = std::fs::read(so).unwrap();
    let elf = ElfFile64::<Endianness, _>::parse(&*bytes).unwrap();
    let sym = elf
        .dynamic_symbols()
        .find(|s| s.name() == Ok("plugin_version"))
        .expect("the plugin exports plugin_version");
    let section = elf.section_by_index(sym.section_index().unwrap()).unwrap();
    let (offset, _) = section.file_range().unwrap();
    let at = (offset + sym.address() - section.address()) as usize;
    let mut bytes = bytes.clone();
    bytes[at..at + 4].copy_from_slice(&version.to_le_bytes());
    std::fs::write(so, bytes).unwrap();
}

/// `bytes` with every `from` replaced by `to` (of the same length).
fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn the_check_is_red_for_each_way_a_node_breaks() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    // The copy as made passes: what each case breaks is what fails.
    let copy = NodeCopy::new("base", false);
    let (code, checks) = copy.check();
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    assert_eq!(code, 0);
    drop(copy);

    // A plugin built against another release's headers (23.02.0): slurmstepd skips it.
    let copy = NodeCopy::new("release", true);
    set_plugin_version(&copy.path("gpu_tracker.so"), (23 << 16) | (2 << 8));
    let (code, checks) = copy.check();
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(status_of(&checks, "release"), ["fail"], "{checks:#?}");
    let said = &checks.iter().find(|c| c.0 == "release").unwrap().2;
    assert!(said.starts_with("built for Slurm 23.02.0, but "), "{said}");
    // The file changed now, after slurmd started: that is told too, and nothing else.
    assert!(
        failed(&checks)
            .iter()
            .all(|c| c.0 == "release" || c.0 == "slurmd restart"),
        "{checks:#?}"
    );
    drop(copy);

    // A plugin built against a newer glibc than the node's (its newest version need renamed
    // to GLIBC_2.99 in a copy): the dynamic loader refuses it, and slurmstepd skips it.
    let copy = NodeCopy::new("glibc", true);
    let so = copy.path("gpu_tracker.so");
    let needs = gpu_tracker::check::elf::read_plugin(&so)
        .unwrap()
        .glibc_needs;
    let newest = gpu_tracker::check::elf::newest_glibc(&needs)
        .unwrap()
        .to_string();
    assert_eq!(newest.len(), "GLIBC_2.34".len(), "{newest}");
    let bytes = std::fs::read(&so).unwrap();
    let bytes = replace_all(&bytes, newest.as_bytes(), b"GLIBC_2.99");
    std::fs::write(&so, bytes).unwrap();
    let (code, checks) = copy.check();
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(status_of(&checks, "plugin build"), ["fail"], "{checks:#?}");
    let said = &checks.iter().find(|c| c.0 == "plugin build").unwrap().2;
    assert!(
        said.starts_with("needs GLIBC_2.99, this node has glibc 2."),
        "{said}"
    );
    assert!(
        failed(&checks)
            .iter()
            .all(|c| c.0 == "plugin build" || c.0 == "slurmd restart"),
        "{checks:#?}"
    );
    drop(copy);

    // The settings file the plugstack line names is missing: the plugin turns tracking off.
    let copy = NodeCopy::new("settings", false);
    std::fs::remove_file(copy.path("gpu-tracker.toml")).unwrap();
    let (code, checks) = copy.check();
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(status_of(&checks, "settings"), ["fail"], "{checks:#?}");
    assert!(
        failed(&checks).iter().all(|c| c.0 == "settings"),
        "{checks:#?}"
    );
    drop(copy);

    // A spool its group can write to: the plugin refuses to write records there.
    let copy = NodeCopy::new("spool", false);
    let name = SlurmConf::read(&slurm_conf()).unwrap().cluster_name;
    let cluster_dir = copy
        .path("spool")
        .join(gpu_tracker::config::slurmconf::cluster_dir_name(
            name.as_deref(),
        ));
    std::fs::create_dir_all(&cluster_dir).unwrap();
    Command::new("chmod")
        .arg("0775")
        .arg(&cluster_dir)
        .status()
        .unwrap();
    let (code, checks) = copy.check();
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(status_of(&checks, "spool"), ["fail"], "{checks:#?}");
    let said = &checks.iter().find(|c| c.0 == "spool").unwrap().2;
    assert!(
        said.contains("writable by group or others (mode 775)"),
        "{said}"
    );
    drop(copy);

    // The plugin replaced after slurmd started: slurmd's prolog is not the new plugin's.
    let copy = NodeCopy::new("restart", true);
    let (code, checks) = copy.check();
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(
        status_of(&checks, "slurmd restart"),
        ["fail"],
        "{checks:#?}"
    );
    assert!(
        failed(&checks).iter().all(|c| c.0 == "slurmd restart"),
        "{checks:#?}"
    );
    drop(copy);

    // No line loads the plugin.
    let copy = NodeCopy::new("plugstack", false);
    copy.plugstack("# nothing\n");
    let (code, checks) = copy.check();
    assert_eq!(code, 1, "{checks:#?}");
    assert_eq!(status_of(&checks, "plugstack"), ["fail"], "{checks:#?}");
}
