//! The step tracker's test fixture: a step of one GPU with a private copy of the fake NVML
//! and its scenario, and the helpers the tests share.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{RwLock, mpsc};
use std::time::{Duration, Instant};

use crate::common::{self, TempDir};
use gpu_tracker::gres::GpuOrder;
use gpu_tracker::step::record::{JobInfo, StepInfo, StepRecord};
use gpu_tracker::step::spool::Spool;
use gpu_tracker::step::{StepSetup, StepTracker};
use serde_json::{Value, json};

pub(crate) const UUID: &str = "GPU-0badc0de-1111-2222-3333-444444444444";

/// A step of one GPU (Slurm's index 0) with the fake behind it.
pub(crate) struct Fixture {
    pub(crate) dir: TempDir,
    pub(crate) setup: StepSetup,
}

impl Fixture {
    /// `scenario_extra` is merged into the scenario's top level; `gpus` says whether the step
    /// has a GPU at all.
    pub(crate) fn new(
        tag: &str,
        local_tasks: Option<u32>,
        interval_ms: u64,
        scenario_extra: Value,
    ) -> Self {
        let dir = TempDir::new(tag);
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        std::fs::copy(common::fake_nvml(), lib_dir.join("libnvidia-ml.so.1")).unwrap();
        for f in ["nvidiactl", "nvidia0"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let mut scenario = json!({
            "control_file": dir.join("nvidiactl"),
            "devices": [{"uuid": UUID, "name": "Simulated", "memory_total": 1u64 << 30,
                         "minor": 0, "device_file": dir.join("nvidia0"),
                         "utilization": [{"at_ms": 0, "gpu": 50, "memory": 5}]}]
        });
        for (k, v) in scenario_extra.as_object().unwrap() {
            scenario[k] = v.clone();
        }
        std::fs::write(
            lib_dir.join("fake-nvml-scenario.json"),
            scenario.to_string(),
        )
        .unwrap();
        let spool = Spool::open(&dir.join("spool")).unwrap();
        let setup = StepSetup {
            job: JobInfo {
                id: 4242,
                user: "tester".into(),
                ..JobInfo::default()
            },
            step: StepInfo {
                id: "0".into(),
                kind: "srun".into(),
                node: "n1".into(),
                alloc_gpus: vec![0],
                local_tasks,
                ..StepInfo::default()
            },
            interval: Duration::from_millis(interval_ms),
            checkpoint_interval: None,
            spool,
            nvml_library: Some(lib_dir.join("libnvidia-ml.so.1")),
            amd_root: dir.join("no-amd"),
            cgroup_root: dir.join("no-cgroups"),
            proc_root: PathBuf::from("/proc"),
            gpu_order: GpuOrder::Unknown("a test".into()),
            gres_conf: None,
            alerts: gpu_tracker::history::AlertRules::default(),
            mark_socket: Some(dir.join("4242.n1.0.sock")),
            warn_user: false,
            live: None,
            record_run: gpu_tracker::step::run::RecordRun::Known(0),
            memory_detail: gpu_tracker::sampler::MemoryDetail::Status,
        };
        Fixture { dir, setup }
    }

    pub(crate) fn control(&self) -> PathBuf {
        self.dir.join("nvidiactl")
    }

    pub(crate) fn device(&self) -> PathBuf {
        self.dir.join("nvidia0")
    }
}

/// This process's descriptors open on `path`, each with its close-on-exec flag.
/// The descriptor test compares this process's descriptors before and after NVML opens: it
/// runs alone (write), the other tests, which open files and NVML too, beside each other (read).
pub(crate) static DESCRIPTORS: RwLock<()> = RwLock::new(());

pub(crate) fn open_on(path: &Path) -> Vec<bool> {
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let fd = e.file_name().into_string().ok()?;
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())?;
            // O_CLOEXEC is octal 02000000 in fdinfo's flags.
            (target == path).then_some(flags & 0o2_000_000 != 0)
        })
        .collect()
}

/// The step's record on disk (a checkpoint while it runs), if there is one to read.
pub(crate) fn on_disk(fx: &Fixture) -> Option<StepRecord> {
    let dir = fx.setup.spool.job_dir(fx.setup.job.id).ok()?;
    let text = std::fs::read_to_string(dir.join(fx.setup.record_name())).ok()?;
    StepRecord::from_json(&text).ok()
}

pub(crate) fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

pub(crate) fn end(t: &StepTracker, mut c: Child) {
    let _ = c.kill();
    let st = c.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    t.task_ended(c.id(), Some(st.into_raw()));
}

pub(crate) fn value(r: &StepRecord) -> Value {
    serde_json::from_str(&r.to_json()).unwrap()
}

pub(crate) fn notes(v: &Value) -> String {
    v["sampler"]["notes"].to_string()
}

/// Runs `finish` on a thread of its own; `None` when it has not returned within `limit`.
pub(crate) fn finish_within(
    t: StepTracker,
    limit: Duration,
) -> Option<(StepRecord, Result<PathBuf, String>, Duration)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let (r, w) = t.finish();
        let _ = tx.send((r, w, start.elapsed()));
    });
    rx.recv_timeout(limit).ok()
}
