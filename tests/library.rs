//! The library API: tracking a block of code in-process. One test per file: the peak of a
//! process is process-wide, so parallel tests in one binary would see each other's memory.

use std::sync::mpsc;
use std::time::Duration;

use gpu_tracker::units::{MemUnit, TimeUnit, Units};
use gpu_tracker::{Tracker, TrackerOptions};

#[test]
fn a_block_spike_start_stop_and_guard() {
    let units = Units {
        ram: MemUnit::Megabytes,
        gpu_ram: MemUnit::Megabytes,
        time: TimeUnit::Seconds,
    };
    let opts = TrackerOptions::default()
        .sleep_time(1.0)
        .units(units)
        .no_gpu()
        .disable_logs();
    let threads_before = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Threads:")
                .map(|n| n.trim().parse::<u64>().unwrap())
        })
        .unwrap();
    let t = Tracker::start(opts.clone()).unwrap();
    // 150 MB for a moment, well inside one sampling interval.
    let mut v = vec![0u8; 150_000_000];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(&v);
    drop(v);
    std::thread::sleep(Duration::from_millis(100));
    let usage = t.stop().unwrap();
    assert!(
        usage.max_ram.main.total_rss >= 150.0,
        "{}",
        usage.max_ram.main.total_rss
    );
    assert!(usage.compute_time.time >= 0.1 && usage.compute_time.time < 2.0);
    assert_eq!(usage.max_ram.unit, MemUnit::Megabytes);
    // The sampler thread is not counted as the code's own thread.
    assert_eq!(usage.cpu_utilization.main_n_threads, threads_before);
    // Display and serde give the same tree.
    assert!(
        usage
            .to_string()
            .starts_with("Max RAM:\n   Unit: megabytes\n")
    );
    let back: gpu_tracker::ResourceUsage = serde_json::from_str(&usage.to_json_pretty()).unwrap();
    assert_eq!(back, usage);

    // Busy CPU inside a guard; the figures arrive when it drops.
    let (tx, rx) = mpsc::channel();
    {
        let _g = Tracker::start(opts.sleep_time(0.1))
            .unwrap()
            .guard(move |u| tx.send(u).unwrap());
        let start = std::time::Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_millis(600) {
            x = x.wrapping_mul(3).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
    let u = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let mean = u.cpu_utilization.main.mean_sum_percent;
    assert!((60.0..=110.0).contains(&mean), "one busy core: {mean}");
    assert!(
        u.compute_time.cpu_time >= 0.4,
        "{}",
        u.compute_time.cpu_time
    );
}
