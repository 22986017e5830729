//! Test helper: a process that uses known resources, for the whole-program tests.
//!
//! `gpu-tracker-test-hog [--mb N] [--hold-ms T] [--spin-ms S] [--children K] [--exit C]
//! [--forks F] [--marker WORD]`: forks F short-lived children (50 at a time, each living about
//! 10 ms), touches N megabytes (1e6 bytes) of anonymous memory, holds them T ms, burns S ms of
//! CPU time on one core, starts K copies of itself (with the same settings, no further children)
//! and waits for them, then exits with C. The marker only appears on the command line,
//! where the fake NVML library looks for it.

use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    forks(get("--forks"));
    let (mb, hold, spin, children, code) = (
        get("--mb"),
        get("--hold-ms"),
        get("--spin-ms"),
        get("--children"),
        get("--exit"),
    );
    let mut kids = Vec::new();
    for _ in 0..children {
        let mut a: Vec<String> = args[1..].to_vec();
        if let Some(i) = a.iter().position(|x| x == "--children") {
            a[i + 1] = "0".into();
        }
        kids.push(
            std::process::Command::new(&args[0])
                .args(&a)
                .spawn()
                .expect("spawn child"),
        );
    }
    let mut buf = vec![0u8; (mb * 1_000_000) as usize];
    for i in (0..buf.len()).step_by(4096) {
        buf[i] = 1; // touch every page so it is resident
    }
    std::thread::sleep(Duration::from_millis(hold));
    // Spin until this process has used `spin` ms of CPU (not of wall time: on a loaded machine
    // the tests still know how much CPU it used).
    let mut x = 0u64;
    while own_cpu_ms() < spin {
        for _ in 0..100_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
    }
    std::hint::black_box((x, &buf));
    drop(buf);
    for mut k in kids {
        let _ = k.wait();
    }
    std::process::exit(code as i32);
}

/// CPU time (user + system) of this process so far, in ms, from `/proc/self/stat` (USER_HZ is
/// 100 on Linux).
fn own_cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() * 10
}

/// Forks `n` children, 50 at a time, each of which sleeps 10 ms and exits; waits for them all.
fn forks(n: u64) {
    let mut left = n;
    while left > 0 {
        let batch = left.min(50);
        let mut pids = Vec::new();
        for _ in 0..batch {
            // SAFETY: this program has one thread here; the child only calls async-signal-safe
            // functions (usleep, _exit) before it ends.
            match unsafe { libc::fork() } {
                0 => {
                    // SAFETY: as above, in the child.
                    unsafe {
                        libc::usleep(10_000);
                        libc::_exit(0)
                    }
                }
                -1 => panic!("fork failed: {}", std::io::Error::last_os_error()),
                pid => pids.push(pid),
            }
        }
        for pid in pids {
            let mut status = 0;
            // SAFETY: waits for a child of this process; `status` is a valid int.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        left -= batch;
    }
}
