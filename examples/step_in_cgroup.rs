//! Runs one command under the plugin's own step tracker ([`StepTracker`]), without Slurm, so
//! that its figures can be checked against references on a GPU machine (`bench/gpu-truth`).
//!
//! As root: makes a fresh cgroup laid out as Slurm's (`…/gpu-truth.<pid>/step_0/task_0` on
//! cgroup v1, in the memory and cpuacct hierarchies below this process's own cgroups;
//! `/sys/fs/cgroup/gpu-truth.<pid>/step_0/user/task_0` on v2), so that the tracker finds the
//! step's cgroup from the task's `/proc/<pid>/cgroup` as it does in slurmstepd. Then the calls
//! the plugin makes, in its order: `start`, the command forked (it joins the cgroup before it
//! execs), `task_started`, `task_ended`, `finish`. Prints the final record's path (or, with
//! `--json`, the record) on stdout, removes the cgroup and exits with the command's status.
//!
//! Where no cgroup can be made (not root, a v2 host whose root cgroup cannot delegate), the
//! command runs without one and the record's notes say so: the GPU figures are still the
//! plugin's, the memory and CPU figures are sampled.
//!
//! ```text
//! cargo build --release --example step_in_cgroup
//! sudo target/release/examples/step_in_cgroup --interval 0.5 --gpus 0 -- python3 train.py
//! sudo target/release/examples/step_in_cgroup --gb amd --gpus 0 -- python3 train.py
//! ```
//!
//! With `--gb amd` the step's GPUs are AMD's, numbered as Slurm's `AutoDetect=rsmi` numbers
//! them (PCI order), and read from the kernel's files (`bench/amd-truth`).

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use gpu_tracker::cgroup::{Cgroup, DEFAULT_ROOT, Version};
use gpu_tracker::gpu::amd::AmdSource;
use gpu_tracker::gpu::nvml::NvmlSource;
use gpu_tracker::gpu::{GpuSource, Vendor};
use gpu_tracker::gres::GpuOrder;
use gpu_tracker::history::AlertRules;
use gpu_tracker::step::record::{JobInfo, StepInfo};
use gpu_tracker::step::spool::Spool;
use gpu_tracker::step::{StepSetup, StepTracker};
use gpu_tracker::sys::{self, CgroupJoin};

/// Runs a command under the SPANK plugin's step tracker, in a cgroup of its own, without Slurm.
#[derive(Parser, Debug)]
struct Args {
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// The spool the record is written to (made when missing; must be root's).
    #[arg(long, default_value = "/tmp/step_in_cgroup.spool")]
    spool: PathBuf,
    /// The NVIDIA library (a bare name is searched by the dynamic loader).
    #[arg(long, default_value = "libnvidia-ml.so.1")]
    nvml: PathBuf,
    /// The step's GPUs, as Slurm's indices (NVML index order here; with `--gb amd`, the AMD
    /// GPUs in PCI order); every GPU by default.
    #[arg(long, value_delimiter = ',')]
    gpus: Option<Vec<u32>>,
    /// The GPUs' brand: nvidia (read through NVML) or amd (the kernel's files, numbered as
    /// Slurm's AutoDetect=rsmi numbers them).
    #[arg(long = "gb", value_name = "GPU_BRAND", default_value = "nvidia", value_parser = gpu_brand)]
    gb: Vendor,
    /// The directory AMD's kernel files are read under, `/` by default: another one is a
    /// simulated node, for tests only.
    #[arg(
        long = "amd-root",
        value_name = "DIR",
        env = "GPU_TRACKER_AMD_ROOT",
        hide = true
    )]
    amd_root: Option<PathBuf>,
    /// Print the final record's JSON instead of its path.
    #[arg(long)]
    json: bool,
    /// Run the command without a cgroup of its own.
    #[arg(long)]
    no_cgroup: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// `--gb`: `nvidia` or `amd`.
fn gpu_brand(s: &str) -> Result<Vendor, String> {
    s.parse()
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("step_in_cgroup: {e:#}");
            ExitCode::from(125)
        }
    }
}

fn run(args: Args) -> Result<u8> {
    if !(0.01..=3600.0).contains(&args.interval) {
        bail!("--interval must be between 0.01 and 3600 seconds");
    }
    let gpus = match args.gpus.clone() {
        Some(g) => g,
        None => every_gpu(&args),
    };
    let me = std::process::id();
    let (cgroup, cgroup_note) = if args.no_cgroup {
        (
            None,
            Some(
                "run without a cgroup of its own (--no-cgroup): memory and CPU are sampled"
                    .to_string(),
            ),
        )
    } else {
        match StepCgroup::create(Path::new(DEFAULT_ROOT), me) {
            Ok(c) => (Some(c), None),
            Err(e) => {
                let note = format!(
                    "no cgroup of its own could be made, memory and CPU are sampled: {e:#}"
                );
                eprintln!("step_in_cgroup: {note}");
                (None, Some(note))
            }
        }
    };
    let result = track(&args, gpus, cgroup.as_ref(), cgroup_note, me);
    if let Some(c) = cgroup
        && let Err(e) = c.remove()
    {
        eprintln!("step_in_cgroup: {e:#}");
    }
    let (path, json, code) = result?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{json}")?;
    } else {
        writeln!(out, "{}", path.display())?;
    }
    Ok(code)
}

/// The AMD kernel files' root: `--amd-root`, else `/`.
fn amd_root(args: &Args) -> PathBuf {
    args.amd_root.clone().unwrap_or_else(|| PathBuf::from("/"))
}

/// Every GPU of the brand (the default allocation); none where they cannot be listed, which
/// the tracker's own attempt then records.
fn every_gpu(args: &Args) -> Vec<u32> {
    // Opened and closed again before the tracker starts: the tracker opens its own after the
    // task is started, as in slurmstepd.
    let listed = match args.gb {
        Vendor::Amd => AmdSource::open(&amd_root(args))
            .map(|s| s.devices().len())
            .map_err(|e| e.to_string()),
        _ => NvmlSource::open(Some(&args.nvml), true)
            .map(|s| s.devices().len())
            .map_err(|e| e.to_string()),
    };
    match listed {
        Ok(n) => (0..n as u32).collect(),
        Err(e) => {
            eprintln!("step_in_cgroup: cannot list the GPUs, the step has none: {e}");
            Vec::new()
        }
    }
}

/// Starts the tracker, runs the command, finishes: (record path, record JSON, exit code).
fn track(
    args: &Args,
    gpus: Vec<u32>,
    cgroup: Option<&StepCgroup>,
    cgroup_note: Option<String>,
    me: u32,
) -> Result<(PathBuf, String, u8)> {
    let spool = Spool::open(&args.spool).with_context(|| "the spool".to_string())?;
    let uid = sys::uid();
    let setup = StepSetup {
        job: JobInfo {
            // The tracker's pid: each run a job of its own in the spool.
            id: me,
            user: sys::user_name(uid).unwrap_or_else(|| uid.to_string()),
            uid,
            name: Some("step_in_cgroup".into()),
            ..JobInfo::default()
        },
        step: StepInfo {
            id: "0".into(),
            kind: "srun".into(),
            node: sys::hostname(),
            hostname: sys::hostname(),
            alloc_gpus: gpus,
            local_tasks: Some(1),
            total_tasks: Some(1),
            command: Some(args.command.join(" ")),
            ..StepInfo::default()
        },
        interval: Duration::from_secs_f64(args.interval),
        checkpoint_interval: None,
        spool,
        nvml_library: Some(args.nvml.clone()),
        amd_root: amd_root(args),
        // Without a cgroup of its own the command's cgroup is this program's (a container's, a
        // login session's): a root where no cgroup can be found makes the tracker sample the
        // command's processes instead of reading that cgroup as the step's.
        cgroup_root: PathBuf::from(if cgroup.is_some() {
            DEFAULT_ROOT
        } else {
            "/dev/null/no-cgroup"
        }),
        proc_root: PathBuf::from(gpu_tracker::proc::DEFAULT_ROOT),
        // Slurm's order for the brand: NVML's index, or for AMD (AutoDetect=rsmi) PCI order.
        gpu_order: match args.gb {
            Vendor::Amd => GpuOrder::Rsmi(Vec::new()),
            _ => GpuOrder::NvmlIndex(Vec::new()),
        },
        gres_conf: None,
        alerts: AlertRules::default(),
        mark_socket: None,
        warn_user: false,
        live: None,
        record_run: gpu_tracker::step::run::RecordRun::Known(0),
        memory_detail: gpu_tracker::sampler::MemoryDetail::Status,
    };
    let tracker = StepTracker::start(setup)
        .map_err(anyhow::Error::msg)
        .context("starting the step tracker")?;
    if let Some(n) = cgroup_note {
        tracker.note(n);
    }
    tracker.note(match args.gb {
        Vendor::Amd => {
            "run by step_in_cgroup, without Slurm: GPU indices are the AMD GPUs' PCI order".into()
        }
        _ => "run by step_in_cgroup, without Slurm: GPU indices are NVML's".into(),
    });
    let script = match cgroup {
        Some(c) => c.script(&args.command),
        None => format!("exec {}", quote_all(&args.command)),
    };
    let mut child = match sys::spawn_shell(&script, cgroup.map(|c| c.join()), &[]) {
        Ok(c) => c,
        Err(e) => {
            let _ = tracker.finish();
            return Err(e).context("starting the command");
        }
    };
    let pid = child.id();
    if let Some(c) = cgroup {
        // Before the tracker reads the task's cgroups from /proc (see `StepCgroup::script`).
        c.adopt(pid);
    }
    tracker.task_started(Some(0), Some(0), pid);
    if let Err(e) = sys::forward_signals_to(pid) {
        eprintln!("step_in_cgroup: signals will not reach the command: {e}");
    }
    let status = child.wait().context("waiting for the command")?;
    tracker.task_ended(pid, Some(status.into_raw()));
    let (record, written) = tracker.finish();
    let path = written
        .map_err(anyhow::Error::msg)
        .context("writing the final record")?;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    };
    Ok((path, record.to_json(), code))
}

/// One argument quoted for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn quote_all(words: &[String]) -> String {
    words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

/// A step's cgroups, made for one run, and removed after it.
struct StepCgroup {
    version: Version,
    /// Made here, outermost first, in each hierarchy.
    made: Vec<PathBuf>,
    /// Where leftover processes go back to at removal: this process's own cgroups.
    home: Vec<PathBuf>,
    /// The task's `tasks` (v1 memory) or `cgroup.procs` (v2), open for the child to join.
    join: std::fs::File,
    /// v1: the task's cpuacct `cgroup.procs`, which the command's shell joins before it
    /// execs (one join happens between fork and exec; the second hierarchy is the shell's).
    cpuacct_procs: Option<PathBuf>,
}

impl StepCgroup {
    /// Makes the step's cgroups for the tracker with pid `me`.
    fn create(root: &Path, me: u32) -> Result<StepCgroup> {
        let own = Cgroup::of_pid(root, Path::new("/proc"), me).context("this process's cgroup")?;
        let name = format!("gpu-truth.{me}");
        let mut made = Vec::new();
        let r = match own.version {
            Version::V1 => Self::create_v1(&own, &name, &mut made),
            Version::V2 => Self::create_v2(root, &name, &mut made),
        };
        match r {
            Ok((join_path, cpuacct_procs, home)) => {
                let join = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&join_path)
                    .with_context(|| format!("open {}", join_path.display()));
                match join {
                    Ok(join) => Ok(StepCgroup {
                        version: own.version,
                        made,
                        home,
                        join,
                        cpuacct_procs,
                    }),
                    Err(e) => {
                        remove_dirs(&made);
                        Err(e)
                    }
                }
            }
            Err(e) => {
                remove_dirs(&made);
                Err(e)
            }
        }
    }

    /// v1: `<own memory cgroup>/<name>/step_0/task_0`, and the same below this process's
    /// cpuacct cgroup. Returns (the memory `tasks` file, the cpuacct `cgroup.procs`, homes).
    fn create_v1(
        own: &Cgroup,
        name: &str,
        made: &mut Vec<PathBuf>,
    ) -> Result<(PathBuf, Option<PathBuf>, Vec<PathBuf>)> {
        let mut home = vec![own.memory_dir.clone()];
        let task = mkdirs(&own.memory_dir, &[name, "step_0", "task_0"], made)?;
        if !task.join("memory.max_usage_in_bytes").exists() {
            bail!("{} has no memory.max_usage_in_bytes", task.display());
        }
        // This process's cpuacct cgroup, as the tracker finds it (alone or as `cpu,cpuacct`).
        let cpu_procs = match &own.cpu_dir {
            Some(dir) => {
                let t = mkdirs(dir, &[name, "step_0", "task_0"], made)?;
                home.push(dir.clone());
                Some(t.join("cgroup.procs"))
            }
            None => None,
        };
        Ok((task.join("tasks"), cpu_procs, home))
    }

    /// v2: `/sys/fs/cgroup/<name>/step_0/user/task_0`, memory and cpu enabled down to the task
    /// (no process sits in the cgroups between, as v2 requires). Returns (the task's
    /// `cgroup.procs`, none, homes).
    fn create_v2(
        root: &Path,
        name: &str,
        made: &mut Vec<PathBuf>,
    ) -> Result<(PathBuf, Option<PathBuf>, Vec<PathBuf>)> {
        let enable = |dir: &Path| -> Result<()> {
            let f = dir.join("cgroup.subtree_control");
            std::fs::write(&f, "+memory +cpu")
                .with_context(|| format!("enable memory and cpu in {}", f.display()))
        };
        enable(root)?;
        let mut dir = root.to_path_buf();
        for part in [name, "step_0", "user", "task_0"] {
            dir = mkdirs(&dir, &[part], made)?;
            if part != "task_0" {
                enable(&dir)?;
            }
        }
        if !dir.join("memory.current").exists() {
            bail!("{} has no memory.current", dir.display());
        }
        Ok((dir.join("cgroup.procs"), None, vec![root.to_path_buf()]))
    }

    /// How the child joins the task's cgroup between fork and exec.
    fn join(&self) -> CgroupJoin {
        use std::os::fd::AsRawFd;
        match self.version {
            Version::V1 => CgroupJoin::Tasks(self.join.as_raw_fd()),
            Version::V2 => CgroupJoin::Procs(self.join.as_raw_fd()),
        }
    }

    /// The shell script that runs `command` in the cgroup.
    fn script(&self, command: &[String]) -> String {
        let exec = format!("exec {}", quote_all(command));
        match &self.cpuacct_procs {
            Some(p) => format!(
                "echo $$ > {} || exit 125; {exec}",
                quote(&p.display().to_string())
            ),
            None => exec,
        }
    }

    /// Moves `pid` into the task's cpuacct cgroup (v1), where its shell moves itself too: the
    /// shell does so before it runs anything, and this before the tracker looks, whichever
    /// comes first.
    fn adopt(&self, pid: u32) {
        if let Some(p) = &self.cpuacct_procs {
            // Fails only when the command has already ended.
            let _ = std::fs::write(p, pid.to_string());
        }
    }

    /// Moves processes left behind back home, then removes the cgroups, innermost first.
    fn remove(self) -> Result<()> {
        drop(self.join);
        for dir in self.made.iter().rev() {
            let Some(home) = self.home.iter().find(|h| dir.starts_with(h)) else {
                continue;
            };
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in text.split_whitespace() {
                    // One pid per write: the kernel takes one per write(2).
                    let _ = std::fs::write(home.join("cgroup.procs"), pid);
                }
            }
        }
        let left: Vec<String> = self
            .made
            .iter()
            .rev()
            .filter_map(|d| {
                std::fs::remove_dir(d)
                    .err()
                    .map(|e| format!("rmdir {}: {e}", d.display()))
            })
            .collect();
        if !left.is_empty() {
            bail!("{}", left.join("; "));
        }
        Ok(())
    }
}

/// Makes `parent/parts[0]/parts[1]/…`, recording each directory made in `made`.
fn mkdirs(parent: &Path, parts: &[&str], made: &mut Vec<PathBuf>) -> Result<PathBuf> {
    let mut dir = parent.to_path_buf();
    for p in parts {
        dir = dir.join(p);
        std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        made.push(dir.clone());
    }
    Ok(dir)
}

/// Removes `dirs`, innermost first, ignoring failures (a cleanup after a failed creation).
fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}
