//! Shared helpers of the whole-program tests: paths of the built programs, the test fake NVML
//! library, temp dirs, and running `gpu-tracker`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `gpu-tracker` binary under test.
pub fn tracker() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-tracker"))
}

/// Builds the test-only programs (the fake NVML library and the hog) once per test binary, in
/// their own target directory: a nested cargo must not wait on the lock of the cargo running
/// these tests, and they never land next to the real binaries.
fn support_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Prebuilt elsewhere (slurm/vm.sh runs the tests in a guest that has no cargo).
        if let Some(dir) = std::env::var_os("GPU_TRACKER_TEST_SUPPORT") {
            return PathBuf::from(dir);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let tdir = root.join("target").join("test-support");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "fake-nvml",
                "-p",
                "gpu-tracker-test-hog",
            ])
            .arg("--target-dir")
            .arg(&tdir)
            .current_dir(root)
            .status()
            .expect("run cargo to build the test programs");
        assert!(st.success(), "building the test programs failed");
        tdir.join("debug")
    })
    .clone()
}

/// The test helper program (`tests/hog`): uses known memory and CPU.
pub fn hog() -> PathBuf {
    support_dir().join("gpu-tracker-test-hog")
}

/// The fake `libnvidia-ml.so.1` (`tests/fake-nvml`).
pub fn fake_nvml() -> PathBuf {
    support_dir().join("libnvidia_ml.so")
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "gpu-tracker-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `gpu-tracker` with `args`, without NVML unless the caller sets it.
pub fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

/// Runs `gpu-tracker` with `args` and extra environment.
pub fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(tracker());
    c.args(args).env_remove("GPU_TRACKER_NVML_LIB");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run gpu-tracker")
}

/// Stdout as JSON; panics with both streams on failure.
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A float at a JSON pointer.
pub fn f(v: &serde_json::Value, ptr: &str) -> f64 {
    v.pointer(ptr)
        .and_then(|x| x.as_f64())
        .unwrap_or_else(|| panic!("no number at {ptr} in {v:#}"))
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `cmd` and returns what it said (stdout, then stderr); fails the test, naming `what`,
/// where it does not exit 0.
pub fn said_ok(cmd: &mut std::process::Command, what: &str) -> String {
    let out = cmd.output().unwrap();
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{what}: {said}");
    said
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `promtool` of Debian's `prometheus` package: a test that needs it fails without it.
pub fn promtool() -> PathBuf {
    ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect(
            "promtool is missing: install Debian's prometheus package \
             (apt-get install -y --no-install-recommends prometheus; tests/run-all.sh does)",
        )
}

/// `promtool check metrics` on `text`: its verdict and what it said.
pub fn promtool_check(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// `promtool check metrics` on `text` passes, or complains only of the camel case of
/// jobstats' own names (`nvidia_gpu_jobId`, `nvidia_gpu_jobUid`), which jobstats' queries use
/// as they are. What promtool said, where it does not.
pub fn promtool_accepts_jobstats(text: &str) -> Result<(), String> {
    let (ok, said) = promtool_check(text);
    let jobstats_name = |l: &str| {
        ["nvidia_gpu_jobId", "nvidia_gpu_jobUid"].iter().any(|n| {
            l.trim()
                == format!("{n} metric names should be written in 'snake_case' not 'camelCase'")
        })
    };
    if ok || said.trim().lines().all(jobstats_name) {
        Ok(())
    } else {
        Err(said)
    }
}

/// A settings file naming a spool in a temp dir, for `gpu-tracker-report` over records that a
/// test writes to its cluster `t`.
pub struct ReportSite {
    pub dir: TempDir,
}

impl ReportSite {
    pub fn new(tag: &str) -> ReportSite {
        let dir = TempDir::new(tag);
        std::fs::create_dir_all(dir.join("spool/t")).unwrap();
        std::fs::write(
            dir.join("gpu-tracker.toml"),
            format!("spool_dir = {:?}\n", dir.join("spool").to_str().unwrap()),
        )
        .unwrap();
        ReportSite { dir }
    }

    /// `gpu-tracker-report --cluster t ARGS` under these settings, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"));
        c.args(["--cluster", "t"])
            .args(args)
            .env("GPU_TRACKER_CONFIG", self.dir.join("gpu-tracker.toml"))
            .env_remove("GPU_TRACKER_SPOOL");
        c
    }
}

/// Waits up to `limit` for `cond`, looking every 20 ms; returns whether it held.
pub fn wait_for(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond()
}

/// The children of process `pid` (of its main thread, where `Command` spawns them).
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether process `pid` runs a program named `name` (as `/proc/PID/comm` has it).
pub fn runs(pid: u32, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name)
}

/// Whether process `pid` has a handler of its own for signal `sig` (`SigCgt` in its status).
pub fn catches(pid: u32, sig: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let mask = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}
