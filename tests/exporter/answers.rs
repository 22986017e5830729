//! One rendered answer shared by the clients of a second, and what clients that never read it
//! can make the exporter hold: a large exposition (1000 running steps of 8 GPUs each, every
//! figure present, labels of a real site's length: about 9.6 MB in either format) asked for by
//! 16 clients, in both formats and in two waves, that never read a byte. The exporter's peak
//! resident memory (VmHWM) is printed: docs/EXPORTER.md sizes the unit's `MemoryMax` on it.
//! `GPU_TRACKER_TEST_EXPORTER_STEPS` and `..._GPUS` set another size (the figures of
//! docs/EXPORTER.md for 4096 steps were measured so).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gpu_tracker::step::live::LiveState;

use super::{PROMETHEUS_ACCEPT, SHARED_FOR, Server, live_dir, put, state};

/// Steps and GPUs of each in the large exposition, unless the environment says otherwise.
const STEPS: u32 = 1000;
const GPUS: usize = 8;

fn from_env(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

/// Job `job`'s step with `gpus` GPUs, every figure present, as `benches/exporter_scrape.rs`
/// makes them.
fn full_state(job: u32, gpus: usize) -> LiveState {
    let mut s = state(job, if job % 2 == 0 { "batch" } else { "0" }, gpus);
    s.user = format!("user{:03}", job % 37);
    s.node = "gpu-node-017".into();
    s.cluster = "hpc".into();
    if let Some(cpu) = s.pressure.as_mut().and_then(|p| p.cpu.as_mut()) {
        cpu.full_us = Some(1234);
    }
    for g in &mut s.gpus {
        g.uuid = format!("GPU-5f1a6c3e-0d2b-4c1e-{job:04x}-3e2f1d0c9b{:02}", g.index);
        g.sm_active_percent = Some(61.5);
    }
    s
}

/// The unit's `MemoryMax` (slurm/gpu-tracker-exporter.service), in kB.
fn unit_memory_max_kb() -> u64 {
    let unit = include_str!("../../slurm/gpu-tracker-exporter.service");
    let v = unit
        .lines()
        .find_map(|l| l.strip_prefix("MemoryMax="))
        .expect("MemoryMax in the unit");
    let mib: u64 = v.strip_suffix('M').and_then(|n| n.parse().ok()).expect(v);
    mib * 1024
}

/// A request for the metrics in the text format, or OpenMetrics as Prometheus asks.
fn request(openmetrics: bool) -> String {
    let accept = if openmetrics {
        PROMETHEUS_ACCEPT
    } else {
        "text/plain"
    };
    format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n")
}

/// Reads what is left of `c`'s answer until the exporter closes it; the bytes read and
/// whether it was closed within `limit`.
fn drain(c: &mut TcpStream, limit: Duration) -> (usize, bool) {
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    while t0.elapsed() < limit {
        c.set_read_timeout(Some(
            limit
                .saturating_sub(t0.elapsed())
                .max(Duration::from_millis(1)),
        ))
        .unwrap();
        match c.read(&mut buf) {
            Ok(0) => return (n, true),
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            // Reset: the exporter closed it with the answer unsent.
            Err(_) => return (n, true),
        }
    }
    (n, false)
}

#[test]
fn sixteen_clients_that_never_read_a_large_answer_hold_neither_memory_nor_slots() {
    let t = live_dir("exporter-unread-hwm");
    let dir = t.join("live");
    let steps = from_env("GPU_TRACKER_TEST_EXPORTER_STEPS", STEPS as usize) as u32;
    let gpus = from_env("GPU_TRACKER_TEST_EXPORTER_GPUS", GPUS);
    for job in 0..steps {
        let s = full_state(4_000_000 + job, gpus);
        let name = format!("hpc.{}.{}.gpu-node-017.json", s.job_id, s.step);
        std::fs::write(dir.join(name), serde_json::to_vec(&s).unwrap()).unwrap();
    }
    let s = Server::start(&dir);
    let idle = s.status_field("VmHWM:");
    let threads_idle = s.status_field("Threads:");
    let t0 = Instant::now();
    let size = s.metrics().len();
    let rendering = t0.elapsed();
    assert!(size > 5_000_000, "the exposition is only {size} bytes");
    // Two waves of 8, each half text and half OpenMetrics, more than a second apart: every
    // answer the exporter may keep for a format (the one it shares and the one before it) is
    // held by a client that does not read.
    let mut unread = Vec::new();
    for _wave in 0..2 {
        for i in 0..8 {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            c.write_all(request(i % 2 == 0).as_bytes()).unwrap();
            unread.push((c, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(1500));
    }
    // Each is let go by its write deadline (5 s from its answer's first byte) with its answer
    // unsent: read only once the last one's has passed (reading earlier would let it through).
    let last = unread.last().unwrap().1 + rendering + Duration::from_secs(6);
    std::thread::sleep(last.saturating_duration_since(Instant::now()));
    let held = s.status_field("VmHWM:");
    let max = unit_memory_max_kb();
    println!(
        "exporter with 16 clients leaving a {size}-byte answer ({steps} steps of {gpus} GPUs, \
         rendered and read in {rendering:.2?}) unread (8 text, 8 OpenMetrics, in two waves): \
         VmHWM {idle} kB idle, {held} kB once they have held their answers; MemoryMax {max} kB"
    );
    // Bounded: at most two answers of each format alive, and one being rendered; far below
    // what 16 answers of their own would take (16 × size), and well under the unit's bound.
    let size_kb = size as u64 / 1024;
    assert!(
        held < idle + 6 * size_kb,
        "VmHWM {held} kB with 16 unread answers of {size_kb} kB (idle: {idle} kB)"
    );
    assert!(
        held < max * 3 / 4,
        "VmHWM {held} kB against MemoryMax {max} kB"
    );
    for (c, asked) in &mut unread {
        let (got, closed) = drain(c, Duration::from_secs(1));
        assert!(
            closed,
            "a client that does not read was held {:?}",
            asked.elapsed()
        );
        assert!(
            got < size / 2,
            "{got} bytes of {size} reached a client that did not read"
        );
    }
    // The slots are free: a scrape is answered, and the connections' threads are gone.
    let m = s.metrics_within(Duration::from_secs(5));
    assert!(m.contains(&format!("gpu_tracker_exporter_steps {steps}\n")));
    std::thread::sleep(Duration::from_millis(300));
    let threads = s.status_field("Threads:");
    assert!(
        threads <= threads_idle + 1,
        "{threads} threads after, {threads_idle} idle"
    );
}

#[test]
fn scrapes_within_a_second_share_one_rendering() {
    let t = live_dir("exporter-shared");
    let dir = t.join("live");
    put(&dir, &state(600, "0", 2));
    let s = Server::start(&dir);
    let first = s.metrics();
    // A step that starts within the second is not in the shared answer ...
    put(&dir, &state(601, "0", 1));
    let second = s.metrics();
    assert!(
        first == second,
        "two scrapes within a second differ:\n{first}\n{second}"
    );
    // ... but is once the second is over.
    std::thread::sleep(SHARED_FOR);
    let third = s.metrics();
    assert!(third.contains(r#"jobid="601""#), "{third}");
    assert_ne!(third, first);
}
