//! What every test on the real Slurm uses: the cluster (and the lock on its settings), jobs
//! submitted as a user and waited for, their output and summary, `gpu-tracker-report` run as a
//! user, a copy of the simulated GPUs' NVML, and slurmd: its log, its pid, the node's health.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::common;

/// The ordinary user the tests submit jobs as (`gtuser2` is the other user).
pub(crate) const USER: &str = "gtuser";
/// The second test user, whose jobs only a few tests run.
pub(crate) const USER2: &str = "gtuser2";

/// Tests that rewrite the plugin's settings hold this for writing; the others for reading.
pub(crate) static SETTINGS: RwLock<()> = RwLock::new(());

/// The test cluster's directory (`GPU_TRACKER_CLUSTER_DIR`, as slurm/local-cluster.sh uses it).
pub(crate) fn state_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("GPU_TRACKER_CLUSTER_DIR")
            .unwrap_or_else(|_| "/var/tmp/gpu-tracker-cluster".into()),
    )
}

/// A program of the project as the tests run it: the installed package's where
/// `GPU_TRACKER_TEST_BIN_DIR` names where the package put them (the guests' suites run on the
/// installed .debs: slurm/vm.sh), else this build's (`built`, its `CARGO_BIN_EXE_` path).
pub(crate) fn program(name: &str, built: &str) -> PathBuf {
    match std::env::var_os("GPU_TRACKER_TEST_BIN_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join(name),
        _ => PathBuf::from(built),
    }
}

/// The test cluster's `slurm.conf`.
pub(crate) fn slurm_conf() -> PathBuf {
    state_dir().join("slurm.conf")
}

/// The line of the cluster's plugstack.conf, or of a file it includes (the guests' clusters on
/// the installed .debs: the package's plugstack.conf.d file), that loads the plugin.
pub(crate) fn plugin_line() -> gpu_tracker::config::discover::PluginLine {
    let stack = state_dir().join("plugstack.conf");
    gpu_tracker::config::discover::plugin_line_in(&stack, &mut Vec::new())
        .unwrap_or_else(|e| panic!("the plugin is not installed: {e}"))
}

/// Checks once that the cluster answers and the plugin is installed; copies the test program
/// where the test user can run it.
pub(crate) fn cluster() -> &'static Path {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY.get_or_init(|| {
        let ping = Command::new("scontrol")
            .arg("ping")
            .env("SLURM_CONF", slurm_conf())
            .output()
            .expect("scontrol not found: run slurm/local-cluster.sh up");
        assert!(
            String::from_utf8_lossy(&ping.stdout).contains("UP"),
            "slurmctld does not answer: run slurm/local-cluster.sh up"
        );
        let line = plugin_line();
        assert!(
            line.path.ends_with("gpu_tracker.so"),
            "the plugin is not installed: {line:?}"
        );
        let bin = state_dir().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let hog = bin.join("hog");
        std::fs::copy(common::hog(), bin.join("hog.new")).unwrap();
        std::fs::rename(bin.join("hog.new"), &hog).unwrap();
        hog
    })
}

/// The test program `tests/hog`, where the test user's jobs can run it.
pub(crate) fn hog() -> String {
    cluster().display().to_string()
}

/// The first node of the test cluster, where the tests' jobs run.
pub(crate) fn node() -> String {
    let conf = std::fs::read_to_string(slurm_conf()).unwrap();
    conf.lines()
        .find_map(|l| l.strip_prefix("NodeName="))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string()
}

/// The cgroup interface of this machine as Slurm uses it: `v2` where /sys/fs/cgroup is the
/// unified hierarchy (the test guests of slurm/vm.sh), else `v1` (Debian 12's Slurm 22.05 here).
pub(crate) fn cgroup_version() -> &'static str {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        && !Path::new("/sys/fs/cgroup/memory").is_dir()
    {
        "v2"
    } else {
        "v1"
    }
}

/// Restores the cluster's settings file when dropped.
pub(crate) struct Restore(pub(crate) PathBuf, pub(crate) String);

impl Drop for Restore {
    fn drop(&mut self) {
        std::fs::write(&self.0, &self.1).unwrap();
    }
}

/// Adds `extra` (TOML lines) to the cluster's plugin settings until the value returned is
/// dropped; the caller holds `SETTINGS` for writing.
pub(crate) fn settings_with(extra: &str) -> Restore {
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{good}\n{extra}")).unwrap();
    Restore(conf, good)
}

/// Runs `sh -c script` as `user`; returns whether it succeeded.
pub(crate) fn as_user_ok(user: &str, script: &str) -> bool {
    Command::new("runuser")
        .args(["-u", user, "--", "sh", "-c", script])
        .output()
        .unwrap()
        .status
        .success()
}

/// A job that ended: its id, its final state and its output file's text.
pub(crate) struct Job {
    pub(crate) id: u32,
    pub(crate) state: String,
    pub(crate) output: String,
}

/// Field `key` of job `id` as `scontrol show job` has it (None once Slurm forgot the job).
pub(crate) fn job_field(id: u32, key: &str) -> Option<String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", &id.to_string()])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// Runs `scontrol` as root (an admin's command: requeue, update) on the test cluster; its
/// error on failure.
pub(crate) fn scontrol(args: &[&str]) {
    let out = Command::new("scontrol")
        .args(args)
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scontrol {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Submits `script` as the test user; returns the job id.
pub(crate) fn submit(name: &str, script: &str) -> u32 {
    submit_as(USER, name, script, &[])
}

/// Submits `script` as `user` with extra sbatch arguments; returns the job id. The output goes
/// to `<state>/jobs/<user>/<name>-<jobid>.out` unless `extra` names another.
pub(crate) fn submit_as(user: &str, name: &str, script: &str, extra: &[&str]) -> u32 {
    submit_with_env(user, name, script, extra, &[])
}

/// [`submit_as`] with variables set in sbatch's environment (exported to the job, as a user
/// would).
pub(crate) fn submit_with_env(
    user: &str,
    name: &str,
    script: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> u32 {
    cluster();
    let dir = state_dir().join("jobs").join(user);
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", user, "--", "env"]);
    cmd.args(env.iter().map(|(k, v)| format!("{k}={v}")));
    cmd.args(["sbatch", "--parsable", "-J", name]);
    if !extra.contains(&"-o") {
        cmd.arg("-o").arg(dir.join(format!("{name}-%j.out")));
    }
    let out = cmd
        .args(extra)
        .arg(&path)
        .env("SLURM_CONF", slurm_conf())
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sbatch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Whether the suite runs in an emulated guest (`GPU_TRACKER_TEST_EMULATED=1`, set by
/// `slurm/vm/guest-test`), where one `scontrol`, report or Prometheus query takes seconds.
pub(crate) fn emulated() -> bool {
    std::env::var_os("GPU_TRACKER_TEST_EMULATED").is_some_and(|v| v == "1")
}

/// How long a job holds a figure that the test must see while the job runs: `here` ms on real
/// CPUs, `guest` ms in an emulated guest, where the test's polls while it holds cost seconds
/// each (a fixed 6 s or 30 s ended before the test had seen what it asserts, in CI).
pub(crate) fn hold_ms(here: u64, guest: u64) -> u64 {
    if emulated() { guest } else { here }
}

/// Pauses between two polls of a wait: `base`, or four times what the last poll cost where that
/// is more (at most 1 s), so that a test waiting on a job takes at most a fifth of a CPU while
/// its polls cost under 250 ms. In an emulated guest one `scontrol` or one parse of a record
/// costs tens of milliseconds of the CPU the job under test needs; polled every 100 ms by two
/// tests at once, that was much of the guest. The cap keeps a poll within a second of what a
/// job shows for a few seconds only (a few tests still hold a figure for a fixed time).
pub(crate) fn poll_pause(base: Duration, poll_cost: Duration) {
    std::thread::sleep(base.max((poll_cost * 4).min(Duration::from_secs(1))));
}

/// Submits `script` as the test user, waits for the job to end, returns its state and output.
pub(crate) fn run_job(name: &str, script: &str) -> Job {
    let id = submit(name, script);
    wait_job(USER, name, id)
}

/// Job states before the job has started ("" while `scontrol` does not show it yet).
pub(crate) const QUEUED: [&str; 3] = ["PENDING", "CONFIGURING", ""];

/// Waits (at most 300 s) while job `id` is in one of `states`; returns the state it reached.
pub(crate) fn wait_while_in(id: u32, states: &[&str]) -> String {
    let started = Instant::now();
    loop {
        let polled = Instant::now();
        let st = job_field(id, "JobState").unwrap_or_default();
        if !states.contains(&st.as_str()) {
            return st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "job {id} still {st}"
        );
        poll_pause(Duration::from_millis(200), polled.elapsed());
    }
}

/// Waits (as long as [`wait_job`] would) for job `id` to leave the queue: other tests' jobs
/// may hold the node's CPUs or memory. A test's bound on what the job does is counted from
/// here, not from its submission.
pub(crate) fn wait_started(id: u32) {
    wait_while_in(id, &QUEUED);
}

/// Waits for job `id` to end; returns its state and output.
pub(crate) fn wait_job(user: &str, name: &str, id: u32) -> Job {
    let dir = state_dir().join("jobs").join(user);
    let state = wait_while_in(id, &["PENDING", "CONFIGURING", "", "RUNNING", "COMPLETING"]);
    let output = std::fs::read_to_string(dir.join(format!("{name}-{id}.out"))).unwrap_or_default();
    Job { id, state, output }
}

/// Waits until `ready` holds, at most `limit`; panics naming `what` past it.
pub(crate) fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    loop {
        let polled = Instant::now();
        if ready() {
            return;
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        poll_pause(Duration::from_millis(100), polled.elapsed());
    }
}

pub(crate) const RULE: &str =
    "==============================================================================";

/// The job's output once its summary has been appended (the batch step writes it in its
/// `exit`, which can come just after the job is reported ended).
pub(crate) fn output_with_summary(user: &str, name: &str, id: u32) -> String {
    let path = state_dir()
        .join("jobs")
        .join(user)
        .join(format!("{name}-{id}.out"));
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.trim_end().ends_with(RULE) || started.elapsed() > Duration::from_secs(15) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The summary at the end of an output: from the rule that opens it.
pub(crate) fn summary_of(output: &str) -> &str {
    let open = output
        .find(&format!("{RULE}\ngpu-tracker summary"))
        .unwrap_or_else(|| panic!("no summary in the job's output:\n{output}"));
    &output[open..]
}

/// `gpu-tracker-report ARGS` run as `user` with the cluster's `SLURM_CONF` and nothing else of
/// its settings: (exit code, stdout, stderr).
pub(crate) fn report_as(user: &str, args: &[&str]) -> (i32, String, String) {
    cluster();
    static COPIED: OnceLock<PathBuf> = OnceLock::new();
    let bin = COPIED.get_or_init(|| {
        let dst = state_dir().join("bin/gpu-tracker-report");
        std::fs::copy(
            program(
                "gpu-tracker-report",
                env!("CARGO_BIN_EXE_gpu-tracker-report"),
            ),
            dst.with_extension("new"),
        )
        .unwrap();
        std::fs::rename(dst.with_extension("new"), &dst).unwrap();
        dst
    });
    let out = Command::new("runuser")
        .args(["-u", user, "--", "env"])
        // SLURM_CONF only, as on a login node: the report finds the settings through slurm.conf's
        // PlugStackConfig and the plugin's config= there.
        .arg(format!("SLURM_CONF={}", slurm_conf().display()))
        .arg(bin)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The simulated GPUs' fake NVML in a directory of its own with `fake-nvml-scenario.json`
/// beside it (the cluster's scenario plus `extra` keys, and `device_file` per device when
/// `files`), named by the settings until drop. Returns the guard and the directory.
pub(crate) struct NvmlCopy(#[allow(dead_code)] Restore, pub(crate) PathBuf);

pub(crate) fn nvml_copy(tag: &str, extra: serde_json::Value, files: bool) -> NvmlCopy {
    nvml_copy_edited(tag, files, |scenario| {
        for (k, v) in extra.as_object().unwrap() {
            scenario[k] = v.clone();
        }
    })
}

/// [`nvml_copy`] with the scenario changed by `edit`.
pub(crate) fn nvml_copy_edited(
    tag: &str,
    files: bool,
    edit: impl FnOnce(&mut serde_json::Value),
) -> NvmlCopy {
    let dir = state_dir().join("lib").join(format!("nvml-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        state_dir().join("lib/simulated-nvml/libnvidia-ml.so.1"),
        dir.join("libnvidia-ml.so.1"),
    )
    .unwrap();
    let mut scenario: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(state_dir().join("simulated-gpus.json")).unwrap(),
    )
    .unwrap();
    if files {
        std::fs::write(dir.join("nvidiactl"), "").unwrap();
        scenario["control_file"] = dir.join("nvidiactl").display().to_string().into();
        for d in scenario["devices"].as_array_mut().unwrap() {
            let f = dir.join(format!("nvidia{}", d["minor"]));
            std::fs::write(&f, "").unwrap();
            d["device_file"] = f.display().to_string().into();
        }
    }
    edit(&mut scenario);
    std::fs::write(
        dir.join("fake-nvml-scenario.json"),
        serde_json::to_string_pretty(&scenario).unwrap(),
    )
    .unwrap();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    let text: Vec<String> = good
        .lines()
        .map(|l| {
            if l.starts_with("nvml_library") {
                format!("nvml_library = \"{}\"", lib.display())
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&conf, text.join("\n") + "\n").unwrap();
    NvmlCopy(Restore(conf, good), dir)
}

/// Where slurmd's log ends now: the plugin's lines after it are the test's.
pub(crate) fn log_mark() -> u64 {
    std::fs::metadata(state_dir().join("log/slurmd.log")).map_or(0, |m| m.len())
}

/// The plugin's lines in slurmd's log after `mark`.
pub(crate) fn plugin_lines_since(mark: u64) -> Vec<String> {
    let text = std::fs::read(state_dir().join("log/slurmd.log")).unwrap_or_default();
    let from = (mark as usize).min(text.len());
    String::from_utf8_lossy(&text[from..])
        .lines()
        .filter(|l| l.contains("gpu-tracker:"))
        .map(str::to_string)
        .collect()
}

/// The pid of the first node's slurmd.
pub(crate) fn slurmd_pid() -> u32 {
    std::fs::read_to_string(state_dir().join(format!("run/slurmd-{}.pid", node())))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The pid of the slurmstepd of step `step` of job `id` (its process title is
/// `slurmstepd: [ID.STEP]`).
pub(crate) fn stepd_pid(id: u32, step: &str) -> Option<u32> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("^slurmstepd: \\[{id}\\.{step}\\]")])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The first node is up and not drained (a slurmstepd that crashed or could not end its step
/// drains it).
pub(crate) fn assert_node_healthy() {
    let out = Command::new("scontrol")
        .args(["show", "node", "-o", &node()])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let state = text
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("State="))
        .unwrap_or("?");
    assert!(
        !state.contains("DOWN") && !state.contains("DRAIN") && !state.contains("FAIL"),
        "node {}: {text}",
        node()
    );
}

/// A tracked job that did its own work and ended as it would untracked: COMPLETED, its output
/// whole, a summary at its end; the node is fine.
pub(crate) fn assert_job_unharmed(job: &Job, name: &str, marker: &str) -> String {
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let out = output_with_summary(USER, name, job.id);
    assert!(
        out.contains(marker),
        "the job's own output is there:\n{out}"
    );
    assert_node_healthy();
    out
}

/// The one line the plugin logs in slurmd's log (after `mark`) for a step recorded with faults,
/// naming `what`. Waits up to 15 s for it: slurmstepd may log after the job has left the queue.
pub(crate) fn assert_fault_logged(mark: u64, id: u32, step: &str, what: &str) {
    let head = format!("job {id} step {step}: recorded with faults:");
    let mut lines = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        let polled = Instant::now();
        lines = plugin_lines_since(mark);
        if lines.iter().any(|l| l.contains(&head)) {
            break;
        }
        poll_pause(Duration::from_millis(200), polled.elapsed());
    }
    let found: Vec<&String> = lines.iter().filter(|l| l.contains(&head)).collect();
    assert_eq!(found.len(), 1, "one line for step {step}: {lines:#?}");
    assert!(found[0].contains(what), "{what:?} not in {}", found[0]);
}

/// Field `field` of job `id`'s own row of `sacct -n -X -P -j id` (times as Unix seconds), as it
/// is now; empty without that row. `sacct -j` of an array's id lists every task, and the
/// array's id is also one task's (CI's 26.05 run read the three tasks' comments as one, which
/// never decodes, and waited for it in vain).
pub(crate) fn sacct_own_field(id: u32, field: &str) -> String {
    let out = Command::new("sacct")
        .args(["-n", "-X", "-P", "-j", &id.to_string(), "-o"])
        .arg(format!("JobIDRaw,{field}"))
        .env("SLURM_CONF", slurm_conf())
        .env("SLURM_TIME_FORMAT", "%s")
        .output()
        .unwrap();
    let own = format!("{id}|");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&own))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The job's `AdminComment` in Slurm's database, as it is now.
pub(crate) fn stored_comment_now(id: u32) -> String {
    sacct_own_field(id, "AdminComment")
}

/// Waits until Slurm's database has job `id`'s end. slurmctld sends slurmdbd the end through
/// a queue, which can come after the EpilogSlurmctld has stored the summary: the site report
/// counts ended jobs only.
pub(crate) fn wait_end_in_database(id: u32) {
    wait_until(
        "the job's end in Slurm's database",
        Duration::from_secs(120),
        || {
            sacct_own_field(id, "End")
                .parse::<i64>()
                .is_ok_and(|t| t > 0)
        },
    );
}

/// Whether an `AdminComment` is a summary of ours: jobstats' `JS1:` form with ours inside
/// (Slurm 23.02 and later, by default) or `gpu-tracker:1:` (22.05, whose sacctmgr lowercases).
pub(crate) fn is_summary(text: &str) -> bool {
    text.starts_with("gpu-tracker:1:{")
        || (text.starts_with("JS1:H4sI")
            && gpu_tracker::report::stored::Stored::decode(text).is_ok())
}

/// The job's `AdminComment` in Slurm's database, once it is there (EpilogSlurmctld stores it
/// after the job ends), or as it is after 90 s.
pub(crate) fn stored_comment(id: u32) -> String {
    let started = Instant::now();
    loop {
        let polled = Instant::now();
        let text = stored_comment_now(id);
        if is_summary(&text) || started.elapsed() > Duration::from_secs(90) {
            return text;
        }
        poll_pause(Duration::from_millis(500), polled.elapsed());
    }
}

/// The `--mem=` sizes a text (a summary, a note) suggests, in bytes.
pub(crate) fn suggested_mem(summary: &str) -> Vec<u64> {
    summary
        .split("--mem=")
        .skip(1)
        .filter_map(|s| {
            let n: String = s.chars().take_while(char::is_ascii_digit).collect();
            let unit = s[n.len()..].chars().next()?;
            let n: u64 = n.parse().ok()?;
            Some(match unit {
                'K' => n << 10,
                'M' => n << 20,
                'G' => n << 30,
                'T' => n << 40,
                _ => return None,
            })
        })
        .collect()
}

/// A file the test creates to tell a job's holder to let go: a job that must hold something
/// until the test has seen it (a fixed hold can end first on a busy guest). Removed on drop.
pub(crate) struct Release(PathBuf);

impl Release {
    /// A release file for a job named `name`, not there yet.
    pub(crate) fn new(name: &str) -> Release {
        let path = state_dir()
            .join("jobs")
            .join(USER)
            .join(format!("{name}-{}.release", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Release(path)
    }

    /// The job script's line that waits for the release, polling every `poll` (shell `sleep`
    /// words) at most `polls` times.
    pub(crate) fn wait(&self, polls: u32, poll: &str) -> String {
        format!(
            "for _ in $(seq {polls}); do [ -e '{}' ] && break; sleep {poll}; done\n",
            self.0.display()
        )
    }

    /// [`Release::wait`], then the lines that stop the background process `$holder`.
    pub(crate) fn wait_then_kill_holder(&self, polls: u32, poll: &str) -> String {
        format!("{}kill $holder; wait $holder\n", self.wait(polls, poll))
    }

    /// Lets the holder go.
    pub(crate) fn release(&self) {
        std::fs::write(&self.0, "").unwrap();
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Cancels job `id` when dropped while the test panics: a job left waiting for a test that gave
/// up would hold the node, and every test after it would fail waiting for its own job (a
/// 24.11 guest lost three tests that way after the load test's job outlived it).
pub(crate) struct CancelOnPanic(pub(crate) u32);

impl Drop for CancelOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = Command::new("scancel")
                .arg(self.0.to_string())
                .env("SLURM_CONF", slurm_conf())
                .status();
        }
    }
}
