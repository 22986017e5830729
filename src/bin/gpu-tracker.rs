//! `gpu-tracker -e CMD`: runs a command, tracks it and its descendants, prints what it used, and
//! exits with the command's status. Options as in the `gpu_tracker` Python package.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{ArgAction, Parser};
use gpu_tracker::cgroup::own::OwnCgroup;
use gpu_tracker::gpu::{self, GpuConfig, Vendor};
use gpu_tracker::proc::files::FdLimit;
use gpu_tracker::sampler::{EndInfo, MemoryDetail, Target};
use gpu_tracker::sys::{self, ExitStatus};
use gpu_tracker::units::{
    MAX_EXPECTED_CORES, MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS, MemUnit, TimeUnit, Units,
};
use gpu_tracker::{Tracker, TrackerOptions};

/// Tracks the computational resource usage (RAM, GPU RAM, CPU utilization, GPU utilization and
/// compute time) of a shell command and its descendants. Peaks come from kernel high-water marks
/// and cgroup counters, so short spikes are not missed.
#[derive(Debug, Parser)]
#[command(name = "gpu-tracker", version, disable_version_flag = true)]
struct Args {
    /// The command to run, with its arguments, in quotes (run by `sh -c`), e.g. "ls -l -a".
    #[arg(short = 'e', long = "execute", value_name = "COMMAND")]
    execute: Option<String>,
    /// File to write the measurements to; printed to the screen if not set.
    #[arg(short = 'o', long = "output", value_name = "OUTPUT")]
    output: Option<PathBuf>,
    /// Format of the output: text or json.
    #[arg(short = 'f', long = "format", value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"])]
    format: String,
    /// Seconds between samples, from 0.1 to 86400 (1 day).
    #[arg(long = "st", value_name = "SLEEP_TIME", default_value_t = 1.0, value_parser = sleep_time)]
    st: f64,
    /// RAM unit: bytes, kilobytes, megabytes, gigabytes or terabytes (decimal).
    #[arg(long = "ru", value_name = "RAM_UNIT", default_value = "gigabytes")]
    ru: MemUnit,
    /// GPU RAM unit: bytes, kilobytes, megabytes, gigabytes or terabytes (decimal).
    #[arg(long = "gru", value_name = "GPU_RAM_UNIT", default_value = "gigabytes")]
    gru: MemUnit,
    /// Time unit: seconds, minutes, hours or days.
    #[arg(long = "tu", value_name = "TIME_UNIT", default_value = "hours")]
    tu: TimeUnit,
    /// Number of cores expected to be used, from 1 to 65536; all cores of the machine by default.
    #[arg(long = "nec", value_name = "NUM_CORES", value_parser = expected_cores)]
    nec: Option<u32>,
    /// Comma-separated UUIDs of the GPUs whose utilization to track; all GPUs by default.
    #[arg(long = "guuids", value_name = "GPU_UUIDS", value_delimiter = ',')]
    guuids: Option<Vec<String>>,
    /// Suppress warnings.
    #[arg(long = "disable-logs")]
    disable_logs: bool,
    /// CSV file to store every sample in (gpu_tracker's tracking-file layout).
    #[arg(long = "tf", value_name = "TRACKING_FILE")]
    tf: Option<PathBuf>,
    /// Replace the tracking file if it exists.
    #[arg(long = "overwrite")]
    overwrite: bool,
    /// The brand of GPU to track: nvidia or amd; by default every brand found (NVIDIA's first).
    #[arg(long = "gb", value_name = "GPU_BRAND", value_parser = gpu_brand)]
    gb: Option<Vendor>,
    /// The directory AMD's kernel files are read under, `/` by default: another one is a
    /// simulated node, for the project's tests only.
    #[arg(
        long = "amd-root",
        value_name = "DIR",
        env = "GPU_TRACKER_AMD_ROOT",
        hide = true
    )]
    amd_root: Option<PathBuf>,
    /// Path of libnvidia-ml.so.1 (default: the dynamic loader's search path).
    #[arg(long = "nvml-lib", value_name = "PATH", env = "GPU_TRACKER_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
    /// Do not give the command a cgroup of its own (the combined peak is then sampled).
    #[arg(long = "no-cgroup")]
    no_cgroup: bool,
    /// Read the private/shared split from /proc/PID/statm only (cheaper on huge processes).
    #[arg(long = "cheap-memory-split")]
    cheap_memory_split: bool,
    /// Write the command's timeline (memory, CPU, each GPU over time, in bounded buckets) to
    /// FILE: .csv or .json.
    #[arg(long = "timeline", value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// Write the command's events (start, exit, phase marks, alerts, lost GPUs) to FILE: .csv
    /// or .json.
    #[arg(long = "events", value_name = "FILE")]
    events: Option<PathBuf>,
    /// Draw memory, CPU and each GPU over time, with phases and events, to FILE: .svg or .png.
    #[arg(long = "plot", value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Print version.
    #[arg(short = 'V', short_alias = 'v', long = "version", action = ArgAction::Version)]
    version: Option<bool>,
}

/// `--st`: seconds, from [`MIN_INTERVAL_SECONDS`] to [`MAX_INTERVAL_SECONDS`] (a longer one
/// would not fit the sampler's clock).
fn sleep_time(s: &str) -> Result<f64, String> {
    gpu_tracker::cli::number_within(
        s,
        MIN_INTERVAL_SECONDS,
        MAX_INTERVAL_SECONDS,
        &format!(
            "the sleep time must be at least {MIN_INTERVAL_SECONDS} and at most {MAX_INTERVAL_SECONDS} seconds (1 day)"
        ),
    )
}

/// `--gb`: `nvidia` or `amd`, as gpu_tracker's `gpu_brand`.
fn gpu_brand(s: &str) -> Result<Vendor, String> {
    s.parse()
}

/// `--nec`: from 1 to [`MAX_EXPECTED_CORES`].
fn expected_cores(s: &str) -> Result<u32, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_EXPECTED_CORES).contains(n))
        .ok_or_else(|| {
            format!("the number of expected cores must be from 1 to {MAX_EXPECTED_CORES}")
        })
}

/// A failure before the command ran (exit 2) or of the tracker itself (exit 1).
enum Fail {
    Usage(String),
    Runtime(anyhow::Error),
}

impl From<anyhow::Error> for Fail {
    fn from(e: anyhow::Error) -> Self {
        Fail::Runtime(e)
    }
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "mark") {
        return mark(&argv[2..]);
    }
    let args: Args = match gpu_tracker::cli::parse_or_exit("gpu-tracker") {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(Fail::Usage(m)) => {
            eprintln!("gpu-tracker: error: {m}");
            ExitCode::from(2)
        }
        Err(Fail::Runtime(e)) => {
            eprintln!("gpu-tracker: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `gpu-tracker mark NAME`: a phase named NAME begins, in the tracked job step (or the command
/// run by `gpu-tracker -e`) this runs in. Never fails the caller's script for a lack of
/// tracking: without a tracker it says so on stderr and exits 0; a usage error exits 2.
fn mark(args: &[std::ffi::OsString]) -> ExitCode {
    let usage =
        "usage: gpu-tracker mark NAME  (a phase named NAME begins now; at most 64 characters)";
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match words.as_slice() {
        [h] if h == "-h" || h == "--help" => {
            println!("{usage}");
            println!(
                "Marks the start of a phase of the job step (or `gpu-tracker -e` command) it runs \
                 in; the report gives each phase's peaks and means. Costs one datagram per \
                 tracker: nothing waits."
            );
            ExitCode::SUCCESS
        }
        [name] if !name.starts_with('-') => match gpu_tracker::history::mark::send(name) {
            Ok(_) => ExitCode::SUCCESS,
            Err(gpu_tracker::history::mark::MarkError::EmptyName) => {
                eprintln!(
                    "gpu-tracker: error: {}",
                    gpu_tracker::history::mark::MarkError::EmptyName
                );
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("gpu-tracker: mark {name:?} not recorded: {e}");
                ExitCode::SUCCESS
            }
        },
        _ => {
            eprintln!("gpu-tracker: error: {usage}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<u8, Fail> {
    // The sampler keeps /proc files open at descriptor numbers from `min_fd` up (the same for
    // any share of the limit it keeps; see `proc::files`). Growing the descriptor table that
    // far once this process has threads makes the kernel wait for an RCU grace period, 10 ms
    // and more, which fell on the last milliseconds of a short command (its first sample comes
    // after it ended): grow it now, while there is one thread.
    let hard = sys::nofile_limit().1;
    let _ = sys::grow_fd_table(FdLimit::for_soft_limit(hard).min_fd);
    let command = args
        .execute
        .as_deref()
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| Fail::Usage("no command given: use -e 'COMMAND ARGS'".into()))?
        .to_string();
    let log: Option<gpu_tracker::tracker::LogFn> = if args.disable_logs {
        None
    } else {
        Some(Arc::new(|m: &str| eprintln!("gpu-tracker: warning: {m}")))
    };
    let export = |p: &Option<PathBuf>, exts: &[&str], what: &str| -> Result<(), Fail> {
        let Some(p) = p else { return Ok(()) };
        let ext = p
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if !exts.contains(&ext.as_str()) {
            return Err(Fail::Usage(format!(
                "{what} {}: the name must end in .{}",
                p.display(),
                exts.join(" or .")
            )));
        }
        Ok(())
    };
    export(&args.timeline, &["csv", "json"], "--timeline")?;
    export(&args.events, &["csv", "json"], "--events")?;
    export(&args.plot, &["svg", "png"], "--plot")?;
    // Phase marks: a socket in a directory of this user's own, named to the command by
    // GPU_TRACKER_MARK.
    let mark_dir = MarkDir::create();
    let opts = TrackerOptions {
        sleep_time: args.st,
        units: Units {
            ram: args.ru,
            gpu_ram: args.gru,
            time: args.tu,
        },
        n_expected_cores: args.nec,
        gpu_uuids: args.guuids.clone(),
        memory_detail: if args.cheap_memory_split {
            MemoryDetail::Status
        } else {
            MemoryDetail::SmapsRollup
        },
        gpu: GpuConfig {
            nvml_lib: args.nvml_lib.clone(),
            disabled: false,
            mig: false,
            brand: args.gb,
            amd_root: args.amd_root.clone(),
        },
        tracking_file: None,
        overwrite: args.overwrite,
        log: log.clone(),
        alerts: gpu_tracker::history::AlertRules::default(),
        // Bound before the command starts: its first mark finds the tracker listening.
        marks: mark_dir.as_ref().and_then(|d| {
            match gpu_tracker::history::mark::Inbox::bind(&d.0.join("command.sock"), sys::euid()) {
                Ok(i) => Some(Arc::new(std::sync::Mutex::new(i))),
                Err(e) => {
                    if let Some(l) = &log {
                        l(&format!("phase marks are off: {e}"));
                    }
                    None
                }
            }
        }),
    };
    opts.validate().map_err(|e| Fail::Usage(e.to_string()))?;

    // Everything that can be wrong with the options is found before the command runs.
    let mut out_file = match &args.output {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| Fail::Usage(format!("cannot write {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let tracking = match &args.tf {
        Some(p) => Some(
            gpu_tracker::tracking_file::TrackingFile::create(p, args.overwrite)
                .map_err(|e| Fail::Usage(e.to_string()))?,
        ),
        None => None,
    };
    let gpu = gpu::open_checked(&opts.gpu, args.guuids.as_deref()).map_err(Fail::Usage)?;

    let cgroup_root = std::path::Path::new(gpu_tracker::cgroup::DEFAULT_ROOT);
    let proc_root = std::path::Path::new(gpu_tracker::proc::DEFAULT_ROOT);
    let own_cg = if args.no_cgroup {
        None
    } else {
        match OwnCgroup::create(cgroup_root, proc_root) {
            Ok(c) => Some(c),
            Err(why) => {
                if let Some(l) = &log {
                    l(&format!("combined peak will be sampled: {why}"));
                }
                None
            }
        }
    };

    let me = std::process::id();
    // Orphaned descendants come back to us instead of init, so they stay tracked.
    let _ = sys::set_child_subreaper();
    sys::set_interactive_signals(libc::SIG_IGN).context("ignoring SIGINT in the tracker")?;
    let prefix = mark_dir
        .as_ref()
        .map(|d| d.0.join("").into_os_string())
        .unwrap_or_default();
    let env: Vec<(&str, &std::ffi::OsStr)> = if mark_dir.is_some() {
        vec![(gpu_tracker::history::mark::ENV, prefix.as_os_str())]
    } else {
        Vec::new()
    };
    let started_unix = gpu_tracker::step::unix_now();
    let child = sys::spawn_shell(&command, own_cg.as_ref().map(|c| c.join()), &env)
        .context("starting /bin/sh")?;
    let pid = child.id();
    let _ = sys::forward_signals_to(pid);

    let mut cgroup = own_cg.as_ref().map(|c| c.cgroup().clone());
    if let Some(cg) = &cgroup {
        // The child joined before exec; if it could not, the cgroup would measure nothing.
        if !cg.procs().map(|p| p.contains(&pid)).unwrap_or(false) {
            cgroup = None;
        }
    }
    let target = Target {
        main: pid,
        tree_roots: vec![me],
        exclude: vec![me],
        cgroup,
        in_process: false,
    };
    let tracker =
        Tracker::start_for(opts, target, gpu, tracking).map_err(|e| Fail::Runtime(e.into()))?;

    // Reap until the main process ends; orphans re-parented to us are reaped on the way. Main
    // is looked at once more as a zombie: its own CPU time, apart from its children's.
    let procfs = gpu_tracker::proc::ProcFs::default();
    let tps = gpu_tracker::proc::ticks_per_second() as f64;
    let wait_err = |e| Fail::Runtime(anyhow::Error::new(e).context("waiting for the command"));
    let (status, main_usage, main_own) = loop {
        let ended = sys::wait_any_ended().map_err(wait_err)?;
        // Reaped between two samples, never during one (Tracker::hold_samples).
        let _no_sample = tracker.hold_samples();
        let own = (ended as u32 == pid)
            .then(|| procfs.pid_stat(pid).ok())
            .flatten()
            .map(|st| st.own_ticks() as f64 / tps);
        let (p, how, ru) = sys::wait4(ended).map_err(wait_err)?;
        if p as u32 == pid {
            break (how, ru, own);
        }
    };
    let end = EndInfo {
        main: Some(main_usage),
        children: Some(sys::rusage(sys::Who::Children)),
        main_own_cpu: main_own,
    };
    let (usage, mut story) = tracker
        .stop_with_story(end)
        .map_err(|e| Fail::Runtime(e.into()))?;
    drop(mark_dir);
    if let Some(c) = own_cg {
        if let Err(e) = c.remove() {
            if let Some(l) = &log {
                l(&format!("could not remove the command's cgroup: {e}"));
            }
        }
    }

    let (shown, note) = match status {
        ExitStatus::Exited(c) => (c, String::new()),
        ExitStatus::Signaled { signal, core } => (
            -signal,
            format!(
                " (killed by {}{})",
                sys::signal_name(signal),
                if core { ", core dumped" } else { "" }
            ),
        ),
    };
    eprintln!("Resource tracking complete. Process completed with status code: {shown}{note}");
    let ended_unix = gpu_tracker::step::unix_now();
    let t0 = story.timeline.start_unix;
    story.events.insert(
        0,
        gpu_tracker::history::Event {
            t: (started_unix - t0).max(0.0),
            kind: "task_start".into(),
            task: Some(0),
            gpu: None,
            name: None,
            value: None,
            detail: format!("the command started (pid {pid})"),
        },
    );
    story.events.push(gpu_tracker::history::Event {
        t: (ended_unix - t0).max(0.0),
        kind: "task_exit".into(),
        task: Some(0),
        gpu: None,
        name: None,
        value: match status {
            ExitStatus::Exited(c) => Some(f64::from(c)),
            ExitStatus::Signaled { .. } => None,
        },
        detail: format!("the command exited with status {shown}{note}"),
    });
    // The GPUs' NVML numbers, which the events name.
    let gpus: Vec<(String, u32)> = usage
        .gpus
        .iter()
        .map(|g| (g.uuid.clone(), g.index))
        .collect();
    write_story(&args, &story, &command, ended_unix - t0, &gpus);
    let report = if args.format == "json" {
        usage.to_json_pretty() + "\n"
    } else {
        usage.to_string()
    };
    match out_file.as_mut() {
        Some(f) => {
            if let Err(e) = f.write_all(report.as_bytes()) {
                // Never lose the figures: fall back to the screen.
                eprintln!(
                    "gpu-tracker: error: writing {}: {e}",
                    args.output
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                );
                print_stdout(&report);
            }
        }
        None => print_stdout(&report),
    }
    Ok(status.shell_code().clamp(0, 255) as u8)
}

/// A directory of this user's own for the phase-mark socket, removed when dropped.
struct MarkDir(PathBuf);

impl MarkDir {
    fn create() -> Option<MarkDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("gpu-tracker-{}-{nanos}", std::process::id()));
        // Made here, private: nobody else can put a file in it or send through it.
        std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
        Some(MarkDir(dir))
    }
}

impl Drop for MarkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `--timeline`, `--events` and `--plot`. A failure is reported and does not change the
/// exit status (the command's).
fn write_story(
    args: &Args,
    story: &gpu_tracker::history::Story,
    command: &str,
    elapsed: f64,
    gpus: &[(String, u32)],
) {
    use gpu_tracker::report::story;
    if args.timeline.is_none() && args.events.is_none() && args.plot.is_none() {
        return;
    }
    let rec = story::command_record(story, command, elapsed, gpus);
    let recs = std::slice::from_ref(&rec);
    let is_json = |p: &std::path::Path| {
        p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    };
    let fail = |p: &std::path::Path, e: &dyn std::fmt::Display| {
        eprintln!("gpu-tracker: error: writing {}: {e}", p.display());
    };
    if let Some(p) = &args.timeline {
        let text = if is_json(p) {
            story::timeline_json(0, recs)
        } else {
            story::timeline_csv(recs)
        };
        if let Err(e) = std::fs::write(p, text) {
            fail(p, &e);
        }
    }
    if let Some(p) = &args.events {
        let text = if is_json(p) {
            story::events_json(0, recs)
        } else {
            story::events_csv(recs)
        };
        if let Err(e) = std::fs::write(p, text) {
            fail(p, &e);
        }
    }
    if let Some(p) = &args.plot {
        let data = story::plot_data(recs, &format!("gpu-tracker -e {}", clean(command)));
        if let Err(e) = gpu_tracker::report::plot::draw(&data, p) {
            fail(p, &e);
        }
    }
}

fn clean(command: &str) -> String {
    gpu_tracker::step::record::clean_text(command, 60)
}

/// Prints to stdout; a closed pipe (`| head`) is not an error.
fn print_stdout(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|_| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_time_is_from_a_tenth_of_a_second_to_a_day() {
        for (s, v) in [("0.1", 0.1), ("1", 1.0), ("86400", 86400.0)] {
            assert_eq!(sleep_time(s), Ok(v));
        }
        for s in ["0.09", "86400.5", "1e19", "1e300", "inf", "nan", "-1"] {
            let e = sleep_time(s).unwrap_err();
            assert!(
                e.contains("at least 0.1 and at most 86400 seconds"),
                "{s}: {e}"
            );
        }
        let a = Args::try_parse_from(["gpu-tracker", "-e", "true"]).unwrap();
        assert_eq!(a.st, 1.0);
    }

    #[test]
    fn expected_cores_are_from_1_to_65536() {
        assert_eq!(expected_cores("1"), Ok(1));
        assert_eq!(expected_cores("65536"), Ok(65536));
        for s in ["0", "65537", "4294967295", "4294967296", "-1", "2.5"] {
            let e = expected_cores(s).unwrap_err();
            assert!(e.contains("from 1 to 65536"), "{s}: {e}");
        }
    }
}
