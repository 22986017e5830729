//! A node whose KFD process directory is flooded: thousands of processes outside the step that
//! opened `/dev/kfd`. A sample reads the tracked processes' files, and of the others only until
//! one uses the GPU, within a bound.

use std::collections::HashSet;

use super::tests::Fx;
use super::*;

const GPU_A: u32 = 53241;
const GPU_B: u32 = 21457;

/// Processes `pids` outside the step, each with KFD files for both GPUs. Where `vram` gives
/// none, `vram_<id>` is a directory: reading it would show as an unreadable file, so a test
/// sees any read of it. Their `cu_occupancy` is always such a trap.
fn outsiders(fx: &Fx, pids: std::ops::Range<u32>, vram: impl Fn(u32, u32) -> Option<u64>) {
    for pid in pids {
        let p = fx.path(&format!("sys/class/kfd/kfd/proc/{pid}"));
        for id in [GPU_A, GPU_B] {
            match vram(pid, id) {
                Some(v) => std::fs::write(p.join(format!("vram_{id}")), format!("{v}\n")),
                None => std::fs::create_dir_all(p.join(format!("vram_{id}"))),
            }
            .or_else(|_| {
                std::fs::create_dir_all(&p)?;
                match vram(pid, id) {
                    Some(v) => std::fs::write(p.join(format!("vram_{id}")), format!("{v}\n")),
                    None => std::fs::create_dir_all(p.join(format!("vram_{id}"))),
                }
            })
            .unwrap();
            std::fs::create_dir_all(p.join(format!("stats_{id}/cu_occupancy"))).unwrap();
        }
    }
}

/// Two GPUs and the step's two processes (30000 and 30001), holding VRAM and running waves on
/// the first.
fn node(tag: &str) -> Fx {
    let fx = Fx::new(tag);
    fx.gpu(1, GPU_A, 128, 0x11);
    fx.gpu(2, GPU_B, 129, 0x21);
    fx.proc(30000, GPU_A, 1 << 30, Some(100));
    fx.proc(30000, GPU_B, 0, Some(0));
    fx.proc(30001, GPU_A, 2 << 30, Some(50));
    fx.proc(30001, GPU_B, 0, Some(0));
    fx
}

fn the_step() -> HashSet<u32> {
    [30001].into_iter().collect()
}

#[test]
fn only_the_steps_files_are_read_and_the_shared_test_stops_at_the_first_user() {
    let fx = node("flood");
    // 10,000 processes outside the step: the first 500 opened KFD and hold nothing; 10500 holds
    // VRAM on the first GPU; every file after it (and every cu_occupancy) is a trap.
    outsiders(&fx, 10000..20000, |pid, id| match pid {
        ..10500 => Some(0),
        10500 if id == GPU_A => Some(4096),
        _ => None,
    });
    let mut s = AmdSource::open(fx.root()).unwrap();
    assert!(s.take_problems().is_empty());
    // Every entry is listed, so the test can stop at the first user.
    s.set_kfd_cap(20_000);
    s.track_processes(30000, &the_step());
    let mut a = s.read(0).unwrap();
    a.processes.sort_unstable();
    assert_eq!(
        a.processes,
        vec![
            (10500, Some(4096)),
            (30000, Some(1 << 30)),
            (30001, Some(2 << 30))
        ]
    );
    assert_eq!(
        a.process_cu_occupancy,
        Some(vec![(30000, 100), (30001, 50)])
    );
    // The step's two files each, and the outsiders' up to the first user.
    assert_eq!(s.kfd_files_read(), 4 + 501);
    let notes = s.take_problems();
    assert!(notes.is_empty(), "a trap was read: {notes:?}");
}

#[test]
fn past_the_cap_the_steps_own_figures_are_whole_and_shared_is_unknown() {
    let fx = node("cap");
    // 10,000 processes outside the step, none using a GPU.
    outsiders(&fx, 10000..20000, |_, _| Some(0));
    let mut s = AmdSource::open(fx.root()).unwrap();
    s.track_processes(30000, &the_step());
    for sample in 1..=2u64 {
        let a = s.read(0).unwrap();
        assert_eq!(
            a.processes,
            vec![(30000, Some(1 << 30)), (30001, Some(2 << 30))]
        );
        assert_eq!(
            a.process_cu_occupancy,
            Some(vec![(30000, 100), (30001, 50)])
        );
        let b = s.read(1).unwrap();
        assert!(b.processes.is_empty(), "{:?}", b.processes);
        // The step's files on both GPUs, and at most the cap of the others', a sample.
        let most = sample * (8 + procs::MAX_KFD_ENTRIES as u64);
        assert!(
            s.kfd_files_read() <= most,
            "{} > {most}",
            s.kfd_files_read()
        );
    }
    let notes = s.take_problems();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("whether another process uses this GPU is unknown")),
        "{notes:?}"
    );
}

#[test]
fn an_outside_user_listed_under_the_cap_still_makes_the_gpu_shared() {
    let fx = node("few");
    outsiders(&fx, 10000..10010, |pid, id| {
        (pid != 10004 || id != GPU_B).then_some(0).or(Some(77))
    });
    let mut s = AmdSource::open(fx.root()).unwrap();
    s.track_processes(30000, &the_step());
    let b = s.read(1).unwrap();
    assert_eq!(b.processes, vec![(10004, Some(77))]);
    assert_eq!(b.process_cu_occupancy, Some(vec![]));
    assert!(s.take_problems().is_empty());
}
