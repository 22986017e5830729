//! `gpu-tracker-exporter` as a program: state files in a temporary live directory, the exporter
//! started on a free port of 127.0.0.1, scraped over HTTP with std.
//!
//! What is checked: each running step's series and its GPUs' are served and end when the
//! step's file is gone; bad files are counted, not served; other paths and methods get 404 and
//! 405; `--once` prints one scrape; a thousand scrapes leak neither memory nor descriptors
//! (here); OpenMetrics to Prometheus and the text format `promtool` accepts to other clients,
//! and targets in absolute form (`exporter/format.rs`); clients that send nothing or drip hold
//! neither a scrape nor the exporter's threads and memory (`exporter/load.rs`).

#[path = "exporter/answers.rs"]
mod answers;
mod common;
#[path = "exporter/format.rs"]
mod format;
#[path = "exporter/load.rs"]
mod load;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;
use gpu_tracker::step::live::{
    LiveCpu, LiveGpu, LiveMemory, LivePressure, LiveStall, LiveState, SCHEMA, SCHEMA_VERSION,
};

/// A little more than the exporter shares one rendering of its answer for.
const SHARED_FOR: Duration = Duration::from_millis(1100);

/// What Debian's Prometheus 2.42 sends in `Accept` when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn exporter() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-tracker-exporter"))
}

/// A live directory as the plugin makes it: private to its owner (and a group).
fn live_dir(tag: &str) -> TempDir {
    let t = TempDir::new(tag);
    std::fs::create_dir(t.join("live")).unwrap();
    std::fs::set_permissions(t.join("live"), std::fs::Permissions::from_mode(0o750)).unwrap();
    t
}

fn state(job: u32, step: &str, gpus: usize) -> LiveState {
    let now = gpu_tracker::clock::unix_now();
    LiveState {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        cluster: "c1".into(),
        job_id: job,
        step: step.into(),
        user: "alice".into(),
        uid: 1001,
        node: "n1".into(),
        stepd_pid: 1,
        written_at: now,
        started_at: now - 60.0,
        interval_seconds: 5.0,
        alloc_cpus: Some(8),
        memory: LiveMemory {
            current_bytes: Some(1 << 30),
            peak_bytes: Some(2 << 30),
            limit_bytes: Some(4 << 30),
        },
        cpu: LiveCpu {
            seconds: Some(100.5),
            cores_busy: Some(3.5),
        },
        // As the plugin writes it on cgroup v2 with PSI on, before Linux 5.13 (no CPU `full`).
        pressure: Some(LivePressure {
            unavailable: None,
            cpu: Some(LiveStall {
                some_us: 12_500_000,
                full_us: None,
            }),
            memory: Some(LiveStall {
                some_us: 250_000,
                full_us: Some(100_000),
            }),
            io: Some(LiveStall {
                some_us: 3_000_001,
                full_us: Some(2_000_000),
            }),
        }),
        gpus: (0..gpus)
            .map(|g| LiveGpu {
                vendor: gpu_tracker::gpu::Vendor::Nvidia,
                cu_occupancy_percent: None,
                index: g as u32,
                uuid: format!("GPU-{job}-{g}"),
                memory_used_bytes: Some(1 << 30),
                memory_total_bytes: 80 << 30,
                utilization_percent: Some(if g == 0 { 0.0 } else { 95.0 }),
                sm_active_percent: None,
                energy_joules: Some(500.0),
                power_watts: Some(300.0),
                temperature_celsius: None,
            })
            .collect(),
    }
}

fn put(dir: &Path, s: &LiveState) -> PathBuf {
    let p = dir.join(format!("c1.{}.{}.n1.json", s.job_id, s.step));
    std::fs::write(&p, serde_json::to_vec(s).unwrap()).unwrap();
    p
}

/// The exporter serving `dir`, killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new(exporter())
            .arg("--live-dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "gpu-tracker-exporter: serving DIR on http://ADDR/metrics"
        let addr = line
            .trim()
            .strip_suffix("/metrics")
            .and_then(|l| l.rsplit_once("http://"))
            .map(|(_, a)| a.to_string())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Server { child, addr }
    }

    /// Sends `request`; returns the status line, the head and the body.
    fn ask(&self, request: &str) -> (String, String, String) {
        self.ask_within(request, Duration::from_secs(60))
    }

    /// [`Server::ask`], answered within `limit` or a panic.
    fn ask_within(&self, request: &str, limit: Duration) -> (String, String, String) {
        let t0 = Instant::now();
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(limit)).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap_or_else(|e| {
            panic!(
                "no answer within {limit:?} ({e}): {:?} after {:?}",
                text,
                t0.elapsed()
            )
        });
        assert!(t0.elapsed() < limit, "answered after {:?}", t0.elapsed());
        let (head, body) = text.split_once("\r\n\r\n").expect("a whole answer");
        let status = head.lines().next().unwrap().to_string();
        (status, head.to_string(), body.to_string())
    }

    /// A scrape as Prometheus makes it (it asks for OpenMetrics first).
    fn metrics(&self) -> String {
        self.metrics_within(Duration::from_secs(60))
    }

    /// [`Server::metrics`], answered within `limit` or a panic.
    fn metrics_within(&self, limit: Duration) -> String {
        let (status, head, body) = self.ask_within(
            &format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n"),
            limit,
        );
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            head.contains(
                "Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"
            ),
            "{head}"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
        body
    }

    fn status_field(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{field} in {text}"))
    }

    /// Its open descriptors once it is done with the last connection (it closes one after the
    /// client does).
    fn descriptors(&self) -> usize {
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn value(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_string)
}

#[test]
fn each_running_step_is_served_and_its_series_end_with_its_file() {
    let t = live_dir("exporter-e2e");
    let dir = t.join("live");
    // An earlier plugin's state, without pressure.
    let mut batch = serde_json::to_value(state(7, "batch", 0)).unwrap();
    batch.as_object_mut().unwrap().remove("pressure");
    std::fs::write(dir.join("c1.7.batch.n1.json"), batch.to_string()).unwrap();
    let seven_0 = put(&dir, &state(7, "0", 2));
    let s = Server::start(&dir);
    let m = s.metrics();
    let l = r#"jobid="7",step="0",user="alice",node="n1",cluster="c1""#;
    assert_eq!(
        value(&m, &format!("gpu_tracker_memory_bytes{{{l}}}")).as_deref(),
        Some("1073741824")
    );
    assert_eq!(
        value(&m, &format!("gpu_tracker_memory_limit_bytes{{{l}}}")).as_deref(),
        Some("4294967296")
    );
    assert_eq!(
        value(&m, &format!("gpu_tracker_cpu_seconds_total{{{l}}}")).as_deref(),
        Some("100.5")
    );
    let g1 = format!(r#"{l},gpu="1",uuid="GPU-7-1",vendor="nvidia""#);
    assert_eq!(
        value(&m, &format!("gpu_tracker_gpu_utilization_ratio{{{g1}}}")).as_deref(),
        Some("0.95")
    );
    assert_eq!(
        value(&m, &format!("gpu_tracker_gpu_energy_joules_total{{{g1}}}")).as_deref(),
        Some("500.0")
    );
    // No SM activity was measured: no series, not a 0.
    assert!(!m.contains("gpu_tracker_gpu_sm_active_ratio{"), "{m}");
    // The step's pressure stall counters, the kernel's microseconds as seconds.
    let stall = |resource: &str, kind: &str| {
        value(
            &m,
            &format!(
                "gpu_tracker_step_pressure_stall_seconds_total{{{l},resource=\"{resource}\",kind=\"{kind}\"}}"
            ),
        )
    };
    assert_eq!(stall("cpu", "some").as_deref(), Some("12.5"));
    assert_eq!(stall("cpu", "full"), None, "no full line for CPU");
    assert_eq!(stall("memory", "full").as_deref(), Some("0.1"));
    assert_eq!(stall("io", "some").as_deref(), Some("3.000001"));
    assert_eq!(
        value(&m, &format!("gpu_tracker_step_pressure_available{{{l}}}")).as_deref(),
        Some("1")
    );
    // The batch step's state says nothing of pressure: no series, neither 0 nor available.
    assert_eq!(
        m.lines()
            .filter(|s| s.starts_with("gpu_tracker_step_pressure"))
            .count(),
        6,
        "{m}"
    );
    assert!(m.contains(
        r#"gpu_tracker_cpus_allocated{jobid="7",step="batch",user="alice",node="n1",cluster="c1"} 8"#
    ));
    assert_eq!(
        value(&m, "gpu_tracker_exporter_steps").as_deref(),
        Some("2")
    );
    // The step ends: its file goes, and its series with it (at the first scrape after the
    // second in which the exporter shares one rendering).
    std::fs::remove_file(&seven_0).unwrap();
    std::thread::sleep(SHARED_FOR);
    let m = s.metrics();
    assert!(!m.contains(r#"step="0""#), "{m}");
    assert!(m.contains(r#"step="batch""#));
    assert_eq!(
        value(&m, "gpu_tracker_exporter_steps").as_deref(),
        Some("1")
    );
    // A half-written file and a link are counted, not served.
    let bytes = serde_json::to_vec(&state(8, "0", 1)).unwrap();
    std::fs::write(dir.join("c1.8.0.n1.json"), &bytes[..bytes.len() / 3]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("c1.9.0.n1.json")).unwrap();
    std::thread::sleep(SHARED_FOR);
    let m = s.metrics();
    assert!(!m.contains(r#"jobid="8""#) && !m.contains(r#"jobid="9""#));
    let skipped = |why: &str| {
        value(
            &m,
            &format!("gpu_tracker_exporter_state_files_skipped_total{{reason=\"{why}\"}}"),
        )
    };
    assert_eq!(skipped("bad_json").as_deref(), Some("1"));
    assert_eq!(skipped("not_regular").as_deref(), Some("1"));
    // Other paths and methods.
    let (st, _, body) = s.ask("GET / HTTP/1.1\r\n\r\n");
    assert_eq!(st, "HTTP/1.1 200 OK");
    assert!(body.contains("href=\"/metrics\""), "{body}");
    assert_eq!(
        s.ask("GET /nope HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        s.ask("DELETE /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    // The exporter wrote nothing in the directory.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["c1.7.batch.n1.json", "c1.8.0.n1.json", "c1.9.0.n1.json"]
    );
}

#[test]
fn once_prints_one_scrape_and_bad_arguments_say_so() {
    let t = live_dir("exporter-once");
    let dir = t.join("live");
    put(&dir, &state(11, "0", 1));
    let out = Command::new(exporter())
        .arg("--once")
        .arg("--live-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(r#"gpu_tracker_gpu_memory_total_bytes{jobid="11""#),
        "{text}"
    );
    // The classic text format, as node_exporter's textfile collector reads it.
    assert!(!text.contains("# EOF"), "{text}");
    let out = Command::new(exporter())
        .args(["--listen", "not-an-address", "--live-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("gpu-tracker-exporter: listening on not-an-address"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = Command::new(exporter()).arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_thousand_scrapes_leak_neither_memory_nor_descriptors() {
    let t = live_dir("exporter-leak");
    let dir = t.join("live");
    for job in 0..20 {
        put(&dir, &state(100 + job, "0", 2));
    }
    let s = Server::start(&dir);
    let mut after_100 = (0, 0);
    for i in 1..=1000 {
        let m = s.metrics();
        if i == 1 {
            assert_eq!(
                value(&m, "gpu_tracker_exporter_steps").as_deref(),
                Some("20")
            );
        }
        if i == 100 {
            after_100 = (s.status_field("VmRSS:"), s.descriptors());
        }
    }
    let (rss, fds) = (s.status_field("VmRSS:"), s.descriptors());
    assert!(
        rss <= after_100.0 + 1024,
        "VmRSS grew from {} kB after 100 scrapes to {rss} kB after 1000",
        after_100.0
    );
    assert_eq!(
        fds, after_100.1,
        "open descriptors after 100 and 1000 scrapes"
    );
}
