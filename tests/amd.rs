//! The AMD source against the simulated GPUs of `tests/simamd.py`: the same readers that read a
//! node's `/sys`, pointed at the simulator's root, see a holder's VRAM, busy %, energy and CU
//! occupancy on its GPU, nothing on the other, and the GPU idle again once the holder ends.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use gpu_tracker::gpu::amd::{AmdSource, metrics};
use gpu_tracker::gpu::{GpuReading, GpuSource, Vendor};

/// Every simulator of this machine counts every process whose command line holds a marker: the
/// tests run one at a time, so that one's holder never counts on another's GPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Kills and reaps a child when dropped, so a failing test leaves nothing behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn simamd() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/simamd.py")
}

/// Starts the simulator on `root` and waits for its first state.
fn start_sim(root: &Path) -> Reaped {
    let pidfile = root.join("simamd.pid");
    let child = Command::new("python3")
        .arg(simamd())
        .args(["--root", root.to_str().unwrap()])
        .args(["--render-minors", "128,129", "--interval-ms", "100"])
        .args(["--pidfile", pidfile.to_str().unwrap()])
        .spawn()
        .expect("python3 runs tests/simamd.py");
    let sim = Reaped(child);
    let t = Instant::now();
    while !pidfile.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "simamd.py wrote no state"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sim
}

/// Reads device `i` until `done` holds, for at most 15 s; the last reading.
fn read_until(s: &mut AmdSource, i: usize, done: impl Fn(&GpuReading) -> bool) -> GpuReading {
    let t = Instant::now();
    loop {
        let r = s.read(i).expect("the device is there");
        if done(&r) || t.elapsed() > Duration::from_secs(15) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The simulated table of the GPU at render minor `minor`: the energy it counts (mJ, as the
/// library parses it) and the simulator's monotonic clock at the tick that wrote it (its
/// `system_clock_counter`, ns).
fn table_of(root: &Path, minor: u32) -> (u64, u64) {
    let path = root.join(format!("sys/class/drm/renderD{minor}/device/gpu_metrics"));
    let blob = std::fs::read(&path).unwrap();
    let (_, mj) = metrics::parse_energy_mj(&blob).expect("revision 1.6");
    let clock = u64::from_ne_bytes(blob[24..32].try_into().unwrap());
    (mj, clock)
}

/// Power over about `secs` seconds, in watts: the energy the source reads, over the
/// simulator's own clock between the two tables it came from. (Timed by this test's clock, a
/// tick that a busy machine delays moves the window's ends: a fixed 1 s window read 95 W for a
/// 140 W idle GPU in one CI run, and a window from one change to the next 219 W in another.)
fn watts(s: &mut AmdSource, root: &Path, i: usize, secs: f64) -> f64 {
    let minor = s.devices()[i].minor.unwrap();
    // The source's reading and the table's clock from one tick: read until the table on disk
    // still holds the energy the source has just read.
    let reading = |s: &mut AmdSource| {
        let t = Instant::now();
        loop {
            let e = s.read(i).unwrap().energy_mj.unwrap();
            let (mj, clock) = table_of(root, minor);
            if mj == e {
                return (e, clock);
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no table held still");
        }
    };
    let (e0, c0) = reading(s);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (e1, c1) = reading(s);
    assert!(c1 > c0, "the simulator's clock stood: {c0} -> {c1}");
    assert!(e1 >= e0, "the energy counter went back: {e0} -> {e1}");
    (e1 - e0) as f64 / 1000.0 / ((c1 - c0) as f64 / 1e9)
}

#[test]
fn a_holder_shows_on_its_simulated_gpu_and_leaves_it_idle_when_it_ends() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let root = common::TempDir::new("simamd");
    let mut sim = start_sim(root.path());
    let mut s = AmdSource::open(root.path()).expect("the simulated GPUs open");
    let d = s.devices().to_vec();
    assert_eq!(d.len(), 2, "{d:?}");
    for (i, g) in d.iter().enumerate() {
        assert_eq!(g.vendor, Vendor::Amd);
        assert_eq!(g.index, i as u32);
        assert_eq!(g.minor, Some(128 + i as u32));
        assert_eq!(g.compute_units, Some(304));
        assert_eq!(g.name, "AMD Instinct MI300X");
        assert_eq!(g.memory_total, 192 << 30);
        assert!(g.uuid.starts_with("GPU-"), "{}", g.uuid);
        assert!(g.pci_bus_id.is_some());
    }
    assert_ne!(d[0].pci_bus_id, d[1].pci_bus_id);
    assert!(!s.energy_origin(0).unwrap().is_estimate());
    assert!(s.take_problems().is_empty());

    // Nobody on either GPU: idle.
    let idle = [s.read(0).unwrap(), s.read(1).unwrap()];
    for r in &idle {
        assert_eq!(r.utilization, Some(0));
        assert!(r.processes.is_empty(), "{:?}", r.processes);
    }

    let holder = Command::new("bash")
        .args(["-c", "exec -a SIMAMD0_HOLD sleep 60"])
        .spawn()
        .expect("bash");
    let pid = holder.id();
    let mut holder = Reaped(holder);
    let busy = read_until(&mut s, 0, |r| {
        r.utilization == Some(60) && r.processes.iter().any(|p| p.0 == pid)
    });
    assert_eq!(busy.utilization, Some(60));
    assert_eq!(busy.processes, vec![(pid, Some(1 << 30))]);
    assert_eq!(busy.process_cu_occupancy, Some(vec![(pid, 182)]));
    assert_eq!(busy.used, Some(idle[0].used.unwrap() + (1 << 30)));
    assert!(busy.power_mw.unwrap() > idle[0].power_mw.unwrap());
    // 60 % busy: about 506 W (idle 140, peak 750); the other GPU idles at 140.
    let w = watts(&mut s, root.path(), 0, 1.0);
    assert!((400.0..620.0).contains(&w), "{w} W while held");
    let other = s.read(1).unwrap();
    assert_eq!(other.utilization, Some(0));
    assert!(other.processes.is_empty(), "{:?}", other.processes);
    assert_eq!(other.process_cu_occupancy, Some(vec![]));
    let w1 = watts(&mut s, root.path(), 1, 1.0);
    assert!((100.0..180.0).contains(&w1), "{w1} W idle");

    // The holder ends: the GPU is idle again and has no process.
    let _ = holder.0.kill();
    let _ = holder.0.wait();
    let after = read_until(&mut s, 0, |r| {
        r.utilization == Some(0) && r.processes.is_empty()
    });
    assert_eq!(after.utilization, Some(0));
    assert!(after.processes.is_empty(), "{:?}", after.processes);
    assert_eq!(after.used, idle[0].used);

    // The simulator ends on SIGTERM.
    let st = Command::new("kill")
        .args(["-TERM", &sim.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let code = sim.0.wait().unwrap();
    assert!(code.success(), "simamd.py ended with {code}");
}

#[test]
fn gpu_tracker_e_with_gb_amd_tracks_the_commands_vram_on_its_gpu_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let root = common::TempDir::new("simamd-cli");
    let _sim = start_sim(root.path());
    // The marker is made by the command's shell, so that no command line above the holder (the
    // tracker's, the shell's) holds it and counts as a holder too.
    let out = common::run_env(
        &[
            "-e",
            "m=SIMAMD0 exec bash -c 'exec -a ${m}_HOLD sleep 3'",
            "--gb",
            "amd",
            "--st",
            "0.2",
            "--gru",
            "bytes",
            "-f",
            "json",
            "--disable-logs",
        ],
        &[("GPU_TRACKER_AMD_ROOT", root.path().to_str().unwrap())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = common::json(&out);
    assert_eq!(v["tracking"]["gpu_source"], "amd", "{v}");
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{v}");
    for g in gpus {
        assert_eq!(g["vendor"], "amd", "{g}");
        assert!(g["pci_bus_id"].is_string(), "{g}");
    }
    assert_eq!(gpus[0]["max_tracked"].as_f64(), Some(GIB), "{}", gpus[0]);
    assert_eq!(gpus[0]["max_utilization_percent"].as_f64(), Some(60.0));
    assert_eq!(gpus[1]["max_tracked"].as_f64(), Some(0.0), "{}", gpus[1]);
    assert_eq!(gpus[1]["max_utilization_percent"].as_f64(), Some(0.0));
    // gpu_tracker's own keys: the command's (main) VRAM peak, in the same unit.
    assert_eq!(v["max_gpu_ram"]["main"], gpus[0]["max_tracked"], "{v}");
}

const GIB: f64 = (1u64 << 30) as f64;
