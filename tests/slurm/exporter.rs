//! Live figures in Prometheus: `gpu-tracker-exporter` run as an unprivileged user of the live
//! group (`gtexport` in `gtlive`), Debian's own `prometheus` scraping it every 2 s, a tracked
//! GPU job's series asked for over Prometheus's HTTP API while it runs, and gone once it ended.
//! Prometheus gets OpenMetrics (it asks for it: the units it keeps say so), any other client the
//! classic text format, which Debian's `promtool check metrics` accepts with the job's series in.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// The user the exporter and Prometheus run as: in the live group, nothing else
/// (slurm/cluster/setup.sh).
const EXPORTER_USER: &str = "gtexport";

/// The README's PromQL for "GPUs allocated but idle right now".
const IDLE_NOW: &str =
    "max by (jobid, user, node, gpu, uuid) (gpu_tracker_gpu_utilization_ratio) == 0";

/// A daemon of the test, stopped when dropped; what it prints goes to its log file.
struct Daemon {
    child: Child,
    name: &'static str,
    log: std::path::PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Starts `cmd`, its output into `log`. A binary copied a moment ago can be "busy" for a
    /// moment: another test's fork may hold the copy's descriptor until its exec closes it.
    fn start(mut cmd: Command, name: &'static str, log: std::path::PathBuf) -> Daemon {
        let out = std::fs::File::create(&log).unwrap();
        cmd.stdout(out.try_clone().unwrap()).stderr(out);
        let mut tries = 0;
        let child = loop {
            match cmd.spawn() {
                Ok(c) => break c,
                Err(e) if e.raw_os_error() == Some(26) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("{name}: {e}"),
            }
        };
        Daemon { child, name, log }
    }

    /// Panics, with the end of what it printed, when it has exited.
    fn alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            let said = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = said.lines().rev().take(20).collect();
            panic!("{} exited ({st}): {:?}", self.name, tail);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What Debian's Prometheus sends in `Accept` when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET path` on 127.0.0.1:`port`: (status, body); `None` when nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u32, String)> {
    http_get_accepting(port, path, None)
}

/// [`http_get`] with an `Accept` header.
fn http_get_accepting(port: u16, path: &str, accept: Option<&str>) -> Option<(u32, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A query string's value, percent-encoded.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The result of the PromQL query `q` now (`data.result`).
fn query(port: u16, q: &str) -> Vec<Value> {
    let (status, body) = http_get(port, &format!("/api/v1/query?query={}", encode(q)))
        .unwrap_or_else(|| panic!("Prometheus does not answer on {port}"));
    assert_eq!(status, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["status"], "success", "{q}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// The exporter binary where the exporter's user can run it.
fn exporter_bin() -> std::path::PathBuf {
    let dst = state_dir().join("bin/gpu-tracker-exporter");
    std::fs::copy(
        program(
            "gpu-tracker-exporter",
            env!("CARGO_BIN_EXE_gpu-tracker-exporter"),
        ),
        dst.with_extension("new"),
    )
    .unwrap();
    std::fs::rename(dst.with_extension("new"), &dst).unwrap();
    dst
}

/// `id FLAG EXPORTER_USER`.
fn exporter_id(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, EXPORTER_USER])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no user {EXPORTER_USER}: run slurm/local-cluster.sh up"))
}

/// `program` run as the exporter's user with the live group as its group, and no other: the
/// process itself, not a `runuser` above it, so that dropping the [`Daemon`] stops it.
fn as_exporter_user(program: &std::path::Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.uid(exporter_id("-u"))
        .gid(exporter_id("-g"))
        .current_dir("/")
        .stdin(Stdio::null());
    c
}

/// Debian's `promtool check metrics` accepts `text` (it lints the classic text format), but
/// for its lint of `nvidia_gpu_jobId`'s and `nvidia_gpu_jobUid`'s camel case: jobstats' names,
/// which its queries use.
fn promtool_accepts(text: &str) {
    if let Err(said) = crate::common::promtool_accepts_jobstats(text) {
        panic!("promtool check metrics: {said}\n{text}");
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up), Debian's prometheus and root: tests/run-all.sh"]
fn a_running_jobs_figures_reach_prometheus_and_end_with_its_step() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    let prometheus = ["/usr/bin/prometheus", "/usr/sbin/prometheus"]
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.exists())
        .expect("Debian's prometheus is not installed (tests/run-all.sh installs it)");
    let live = state_dir().join("live");
    let (exp_port, prom_port) = (free_port(), free_port());

    // A directory of this run's own: Prometheus's settings, data and both logs.
    let dir = state_dir().join(format!("prometheus-{exp_port}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\n\
             scrape_configs:\n  - job_name: gpu-tracker\n    static_configs:\n      \
             - targets: ['127.0.0.1:{exp_port}']\n"
        ),
    )
    .unwrap();
    let chown = Command::new("chown")
        .args(["-R", &format!("{EXPORTER_USER}:")])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(chown.success());

    // The exporter, unprivileged: it reads the live directory through its group alone.
    let mut cmd = as_exporter_user(&exporter_bin());
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{exp_port}"))
        .arg("--live-dir")
        .arg(&live)
        // jobstats' names too (docs/JOBSTATS.md): its dashboard's queries below.
        .arg("--jobstats");
    let mut exporter = Daemon::start(cmd, "gpu-tracker-exporter", dir.join("exporter.log"));
    wait_until("the exporter to answer", Duration::from_secs(30), || {
        exporter.alive();
        http_get_accepting(exp_port, "/metrics", Some(PROMETHEUS_ACCEPT))
            .is_some_and(|(s, b)| s == 200 && b.ends_with("# EOF\n"))
    });

    // Prometheus, from Debian's package, as the same user, scraping every 2 s.
    let mut cmd = as_exporter_user(prometheus);
    cmd.arg(format!(
        "--config.file={}",
        dir.join("prometheus.yml").display()
    ))
    .arg(format!(
        "--storage.tsdb.path={}",
        dir.join("data").display()
    ))
    .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"));
    let mut prom = Daemon::start(cmd, "prometheus", dir.join("prometheus.log"));
    wait_until(
        "Prometheus to scrape the exporter",
        Duration::from_secs(90),
        || {
            prom.alive();
            http_get(prom_port, "/-/ready").is_some_and(|(s, _)| s == 200)
                && query(prom_port, "up{job=\"gpu-tracker\"} == 1").len() == 1
        },
    );

    // A tracked job with both simulated GPUs, holding memory and computing on GPU 0 (the fake
    // NVML gives 1 GiB on it to a process whose command line names it, and a load of 37 % while
    // that process says it computes) for about 30 s, and leaving GPU 1 idle. In an emulated
    // guest it holds 120 s: each of the dozen Prometheus queries below takes seconds there,
    // and 30 s ended before the test had seen the job's GPU memory, in CI.
    let h = hog();
    let hold = hold_ms(30_000, 120_000);
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track --mem=1G --gres=gpu:2\n\
         exec -a SIMGPU0_HOLD_SIMGPU_COMPUTE {h} --mb 200 --hold-ms {hold} \
         --marker SIMGPU0_HOLD_SIMGPU_COMPUTE\n"
    );
    let id = submit_as(USER, "live", &script, &[]);
    // It waits for both GPUs while other tests hold one.
    wait_started(id);
    let job = format!("jobid=\"{id}\"");
    let mem_q = format!("gpu_tracker_memory_bytes{{{job},step=\"batch\"}}");
    wait_until(
        "the job's memory in Prometheus",
        Duration::from_millis(hold.max(60_000)),
        || {
            exporter.alive();
            query(prom_port, &mem_q)
                .first()
                .is_some_and(|s| value(s) > 150e6)
        },
    );
    let mem = query(prom_port, &mem_q);
    let labels = &mem[0]["metric"];
    assert_eq!(labels["user"], USER, "{labels}");
    assert_eq!(labels["node"], node().as_str(), "{labels}");
    // The cluster's name (slurm/cluster/setup.sh: ClusterName=gputrack): one job id of two
    // clusters sharing a node is two steps, not one.
    assert_eq!(labels["cluster"], "gputrack", "{labels}");
    let limit = query(
        prom_port,
        &format!("gpu_tracker_memory_limit_bytes{{{job},step=\"batch\"}}"),
    );
    assert_eq!(value(&limit[0]), 1024.0 * 1024.0 * 1024.0, "--mem=1G");
    let cpu = query(
        prom_port,
        &format!("gpu_tracker_cpu_seconds_total{{{job}}}"),
    );
    assert!(!cpu.is_empty(), "CPU seconds of the job");
    // Its GPU: the process's memory and the device's utilization, by index and UUID.
    let gpu_q = format!("gpu_tracker_gpu_memory_bytes{{{job}}}");
    wait_until(
        "the job's GPU memory in Prometheus",
        Duration::from_millis(hold),
        || {
            query(prom_port, &gpu_q)
                .iter()
                .any(|s| value(s) >= 1024.0 * 1024.0 * 1024.0)
        },
    );
    let gpu = query(prom_port, &gpu_q);
    assert_eq!(gpu.len(), 2, "both GPUs: {gpu:?}");
    assert!(
        gpu[0]["metric"]["uuid"]
            .as_str()
            .is_some_and(|u| u.starts_with("GPU-")),
        "{gpu:?}"
    );
    let util = query(
        prom_port,
        &format!("gpu_tracker_gpu_utilization_ratio{{{job}}}"),
    );
    assert!(!util.is_empty(), "utilization of the job's GPU");
    // jobstats' Grafana dashboard (its Single_Job_Stats panels) and its `jobstats` command ask
    // these, by jobid (and cluster), the node being the host part of `instance`.
    let host = "label_replace(X, \"shostname\", \"$1\", \"instance\", \"(.*):.*\")";
    let cg = format!("jobid=\"{id}\",step=\"\",task=\"\"");
    let total = query(
        prom_port,
        &host.replace("X", &format!("cgroup_memory_total_bytes{{{cg}}}")),
    );
    assert_eq!(total.len(), 1, "{total:?}");
    assert_eq!(value(&total[0]), 1024.0 * 1024.0 * 1024.0, "--mem=1G");
    assert_eq!(total[0]["metric"]["shostname"], "127.0.0.1", "{total:?}");
    let rss = query(
        prom_port,
        &host.replace("X", &format!("cgroup_memory_rss_bytes{{{cg}}}")),
    );
    assert!(value(&rss[0]) > 150e6, "the job's 200 MB: {rss:?}");
    let cpus = query(prom_port, &format!("cgroup_cpus{{{cg}}}"));
    assert!(value(&cpus[0]) >= 1.0, "{cpus:?}");
    let js = format!("max_over_time(cgroup_cpu_total_seconds{{cluster='gputrack',{cg}}}[1m])");
    assert_eq!(query(prom_port, &js).len(), 1, "{js}");
    let duty = query(
        prom_port,
        &host.replace("X", &format!("nvidia_gpu_duty_cycle{{{job}}}")),
    );
    assert_eq!(duty.len(), 2, "both GPUs by minor_number: {duty:?}");
    let minors: Vec<&str> = duty
        .iter()
        .filter_map(|s| s["metric"]["minor_number"].as_str())
        .collect();
    assert_eq!(minors.len(), 2, "{duty:?}");
    // The SIMULATED GPUs draw 60 W each (their energy counters climb at 60 J/s): the power over
    // a sampling interval, from the counter, is what the dashboard's power panel reads.
    let power = query(
        prom_port,
        &format!("nvidia_gpu_power_usage_milliwatts{{{job}}}"),
    );
    assert_eq!(power.len(), 2, "both GPUs: {power:?}");
    for p in &power {
        let mw = value(p);
        assert!((48_000.0..=72_000.0).contains(&mw), "60 W: {power:?}");
    }
    // The dashboard's temperature panel: NVML's sensor, 47 °C on Slurm's GPU 0 and 39 °C on
    // its GPU 1 (slurm/cluster/plugin.sh).
    let temps = query(
        prom_port,
        &format!("nvidia_gpu_temperature_celsius{{{job}}}"),
    );
    let mut by_minor: Vec<(String, f64)> = temps
        .iter()
        .map(|s| {
            (
                s["metric"]["minor_number"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
                value(s),
            )
        })
        .collect();
    by_minor.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        by_minor,
        [("0".to_string(), 47.0), ("1".to_string(), 39.0)],
        "{temps:?}"
    );
    let used_q =
        format!("max_over_time(nvidia_gpu_memory_used_bytes{{cluster='gputrack',{job}}}[1m:])");
    let instant_q = format!("nvidia_gpu_memory_used_bytes{{cluster='gputrack',{job}}}");
    wait_until(
        "GPU 0's 1 GiB in jobstats' series",
        Duration::from_millis(hold),
        || {
            query(prom_port, &used_q)
                .iter()
                .any(|s| value(s) >= 1024.0 * 1024.0 * 1024.0)
        },
    );
    let used = query(prom_port, &used_q);
    assert!(
        used.iter().any(|s| value(s) >= 1024.0 * 1024.0 * 1024.0),
        "GPU 0's 1 GiB: {used:?}; now: {:?}",
        query(prom_port, &instant_q)
    );
    let held = query(prom_port, &format!("nvidia_gpu_jobId == {id}"));
    assert_eq!(held.len(), 2, "{held:?}");
    let out = std::process::Command::new("id")
        .args(["-u", USER])
        .output()
        .unwrap();
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let owner = query(prom_port, &format!("nvidia_gpu_jobUid == {uid}"));
    assert_eq!(owner.len(), 2, "both GPUs held by uid {uid}: {owner:?}");
    // Its pressure: the stall counters where the node's kernel keeps them for the step's
    // cgroup (cgroup v2, PSI on), else a 0 that says why, and no counter at all.
    let batch = format!("{job},step=\"batch\"");
    let available = query(
        prom_port,
        &format!("gpu_tracker_step_pressure_available{{{batch}}}"),
    );
    assert_eq!(available.len(), 1, "{available:?}");
    let stalls = query(
        prom_port,
        &format!("gpu_tracker_step_pressure_stall_seconds_total{{{batch}}}"),
    );
    eprintln!("pressure: {available:?} {stalls:?}");
    // The guests (cgroup v2) keep pressure per cgroup; 22.05 here (v1) does not.
    assert_eq!(
        value(&available[0]) == 1.0,
        cgroup_version() == "v2",
        "{available:?}"
    );
    if value(&available[0]) == 1.0 {
        let mut some: Vec<&str> = stalls
            .iter()
            .filter(|s| s["metric"]["kind"] == "some")
            .filter_map(|s| s["metric"]["resource"].as_str())
            .collect();
        some.sort();
        assert_eq!(some, ["cpu", "io", "memory"], "{stalls:?}");
    } else {
        let reason = available[0]["metric"]["reason"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(reason, "cgroup_v1", "{available:?}");
        assert!(stalls.is_empty(), "{stalls:?}");
    }
    // No command line, path or environment in any label of the job's series.
    for s in query(prom_port, &format!("{{{job}}}")) {
        for (k, v) in s["metric"].as_object().unwrap() {
            let v = v.as_str().unwrap_or_default();
            assert!(
                !v.contains('/') && !v.contains("HOLD") && !v.contains('='),
                "label {k}={v}"
            );
        }
    }
    // Prometheus asked for OpenMetrics and got it: it keeps the families' units, which only
    // OpenMetrics says.
    let (status, meta) = http_get(
        prom_port,
        "/api/v1/metadata?metric=gpu_tracker_memory_bytes",
    )
    .expect("Prometheus's metadata");
    assert_eq!(status, 200, "{meta}");
    let meta: Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(
        meta["data"]["gpu_tracker_memory_bytes"][0]["unit"], "bytes",
        "{meta}"
    );
    // Any other client gets the classic text format, with the job's series, and Debian's
    // promtool takes it.
    let (status, text) = http_get(exp_port, "/metrics").expect("the exporter answers");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("# EOF") && text.contains(&job), "{text}");
    promtool_accepts(&text);
    // The README's query, GPUs allocated but idle right now: of this job, GPU 1 alone.
    let idle = query(prom_port, IDLE_NOW);
    eprintln!("{IDLE_NOW}: {idle:?}");
    let mine: Vec<&Value> = idle
        .iter()
        .filter(|s| s["metric"]["jobid"] == *id.to_string())
        .collect();
    assert_eq!(mine.len(), 1, "{idle:?}");
    assert_eq!(mine[0]["metric"]["gpu"], "1", "{idle:?}");
    // The Grafana dashboard of docs/: every panel's query is valid PromQL to this Prometheus,
    // and the job's memory, CPU and GPU panels have the job's series.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/grafana/job.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut panels_with_data = 0;
    for panel in dash["panels"].as_array().unwrap() {
        let mut any = false;
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$jobid", &id.to_string());
            any |= !query(prom_port, &expr).is_empty();
        }
        panels_with_data += usize::from(any);
    }
    // All but SM activity (the simulated GPUs of the default partition have no GPM), power
    // (a rate needs two energy readings a minute apart: the job may be younger) and, where the
    // node's kernel keeps no pressure for the step's cgroup, the time stalled.
    assert!(panels_with_data >= 4, "{panels_with_data} panels with data");
    // No state file was skipped but stale ones: a step whose slurmstepd was killed (the
    // faults test does it) leaves its last file, which must not be exported as running.
    let skipped = query(
        prom_port,
        "sum(gpu_tracker_exporter_state_files_skipped_total{reason!=\"stale\"})",
    );
    assert!(
        skipped.is_empty() || value(&skipped[0]) == 0.0,
        "skipped: {skipped:?}"
    );

    // The series end with the step.
    let ended = wait_job(USER, "live", id);
    assert_eq!(ended.state, "COMPLETED", "{}", ended.output);
    wait_until("the job's series to end", Duration::from_secs(30), || {
        query(prom_port, &format!("gpu_tracker_memory_bytes{{{job}}}")).is_empty()
    });
    assert!(query(prom_port, &gpu_q).is_empty());
    exporter.alive();
    prom.alive();
    drop((exporter, prom));
    let _ = std::fs::remove_dir_all(&dir);
}
