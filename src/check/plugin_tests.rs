use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::cgroup::fixture::TempTree;
use crate::check::Status;

fn line(required: bool, args: &[&str]) -> PluginLine {
    PluginLine {
        file: PathBuf::from("/etc/slurm/plugstack.conf.d/gt.conf"),
        line: 2,
        required,
        path: "gpu_tracker.so".into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

#[test]
fn the_plugstack_line_says_what_a_load_failure_does() {
    let c = plugstack_check(&line(false, &["config=/etc/slurm/gt.toml"]), &[]);
    assert_eq!(c.status, Status::Ok);
    assert!(
        c.said
            .starts_with("/etc/slurm/plugstack.conf.d/gt.conf:2 loads gpu_tracker.so")
    );
    assert!(
        c.said.contains("optional") && c.said.contains("untracked"),
        "{}",
        c.said
    );
    let c = plugstack_check(&line(true, &[]), &["x.conf: skipped".into()]);
    assert_eq!(c.status, Status::Ok);
    assert!(
        c.said
            .contains("required: a step whose plugin cannot load fails")
    );
    assert!(c.said.contains("on the way: x.conf: skipped"), "{}", c.said);
    // The plugin logs an unknown argument and goes on: a warning, with the fix.
    let c = plugstack_check(&line(false, &["config=/x", "interval=5"]), &[]);
    assert_eq!(c.status, Status::Warn);
    assert!(c.said.contains("\"interval=5\""), "{}", c.said);
}

#[test]
fn a_relative_plugin_path_is_found_in_plugindir() {
    let t = TempTree::new("check-resolve");
    t.write("b/gpu_tracker.so", "x");
    std::fs::create_dir_all(t.path().join("a")).unwrap();
    let dirs = format!("{0}/a:{0}/b", t.path().display());
    assert_eq!(
        resolve("gpu_tracker.so", Some(&dirs)).unwrap(),
        t.path().join("b/gpu_tracker.so")
    );
    let e = resolve("other.so", Some(&dirs)).unwrap_err();
    assert!(e.contains("slurm.conf's PluginDir"), "{e}");
    let abs = t.path().join("b/gpu_tracker.so").display().to_string();
    assert_eq!(resolve(&abs, None).unwrap(), PathBuf::from(&abs));
    let e = resolve(&t.path().join("a").display().to_string(), None).unwrap_err();
    assert!(e.contains("not a regular file"), "{e}");
    let e = resolve(&format!("{}/none.so", t.path().display()), None).unwrap_err();
    assert!(e.contains("No such file"), "{e}");
}

fn elf_needing(machine: &'static str, needs: &[&str]) -> PluginElf {
    PluginElf {
        plugin_version: Some(0x16_05_08),
        machine,
        glibc_needs: needs.iter().map(|n| n.to_string()).collect(),
    }
}

#[test]
fn a_plugin_needing_a_newer_glibc_or_another_machine_fails() {
    let so = Path::new("/x/gpu_tracker.so");
    let needs = ["GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.3"];
    let c = build_check(so, &elf_needing("x86_64", &needs), "x86_64", "2.36");
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.said
            .contains("needs GLIBC_2.34, this node has glibc 2.36")
    );
    // RHEL 8's glibc.
    let c = build_check(so, &elf_needing("x86_64", &needs), "x86_64", "2.28");
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.said
            .contains("needs GLIBC_2.34, this node has glibc 2.28")
    );
    let c = build_check(so, &elf_needing("aarch64", &needs), "x86_64", "2.36");
    assert_eq!(c.status, Status::Fail);
    assert!(c.said.contains("built for aarch64, this node is x86_64"));
    let c = build_check(so, &elf_needing("x86_64", &needs), "x86_64", "");
    assert_eq!(c.status, Status::Warn);
}

#[test]
fn a_plugin_of_another_release_fails_and_a_micro_release_does_not_matter() {
    let slurmd = |v| Ok((v, "/usr/sbin/slurmd".to_string()));
    // Built against 22.05.8's headers.
    let c = release_check(Some(0x16_05_08), slurmd((22, 5, 11)));
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert_eq!(
        c.said,
        "built for Slurm 22.05.8; /usr/sbin/slurmd is 22.05.11"
    );
    let c = release_check(Some(0x16_05_08), slurmd((24, 11, 0)));
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.said.contains("but /usr/sbin/slurmd is 24.11.0"),
        "{}",
        c.said
    );
    assert!(c.fix.unwrap().contains("rebuild"));
    assert_eq!(release_check(None, slurmd((22, 5, 8))).status, Status::Fail);
    let c = release_check(Some(0x16_05_08), Err("slurmd -V: not found".into()));
    assert_eq!(c.status, Status::Warn);
}

#[test]
fn a_slurmd_started_before_the_plugin_changed_fails() {
    let t = TempTree::new("check-restart");
    t.write("gpu_tracker.so", "x");
    let so = t.path().join("gpu_tracker.so");
    let changed = std::fs::metadata(&so).unwrap().mtime();
    let d = |pid, started| Slurmd {
        pid,
        exe: None,
        node: Some(format!("n{pid}")),
        conf: None,
        started_unix: Some(started),
    };
    let c = restart_check(&so, &[d(1, changed + 5), d(2, changed + 1)]);
    assert_eq!(c.status, Status::Ok, "{c:?}");
    let c = restart_check(&so, &[d(1, changed + 5), d(2, changed - 60)]);
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.said.starts_with("slurmd -N n2 (pid 2) started before"),
        "{}",
        c.said
    );
    assert!(!c.said.contains("n1"), "{}", c.said);
    assert_eq!(restart_check(&so, &[]).status, Status::Warn);
}

#[test]
fn settings_the_plugin_would_not_use_fail() {
    let t = TempTree::new("check-settings");
    let found = |p: &str| PluginFound {
        so: PathBuf::from("/x.so"),
        settings: t.path().join(p),
    };
    let mut out = Vec::new();
    assert!(settings(&found("none.toml"), &mut out).is_none());
    assert_eq!(out[0].status, Status::Fail);
    assert!(out[0].said.contains("is missing"), "{}", out[0].said);
    t.write("open.toml", "interval = 2.0\n");
    let open = t.path().join("open.toml");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    out.clear();
    assert!(settings(&found("open.toml"), &mut out).is_none());
    assert!(out[0].said.contains("not trusted"), "{}", out[0].said);
    if crate::sys::euid() == 0 {
        // Root's own files: the trust rules pass, and what is in them decides.
        t.write("bad.toml", "intervall = 2.0\n");
        out.clear();
        assert!(settings(&found("bad.toml"), &mut out).is_none());
        assert_eq!(out[0].status, Status::Fail);
        assert!(out[0].said.contains("unknown key"), "{}", out[0].said);
        t.write("good.toml", "track_all = true\n");
        out.clear();
        let cfg = settings(&found("good.toml"), &mut out).unwrap();
        assert!(cfg.track_all);
        assert_eq!(out[0].status, Status::Ok, "{:?}", out[0]);
        assert!(out[0].said.ends_with("every job is tracked (track_all)"));
    }
}
