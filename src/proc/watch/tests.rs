//! The watch's rules, on real processes where they can be.

use super::*;
use std::process::Command;

fn watch(smaps: bool) -> Watch {
    Watch::new(
        "/proc",
        smaps,
        FdLimit {
            max_kept: 64,
            min_fd: 0,
        },
    )
}

#[test]
fn a_tracker_inside_a_process_of_two_threads_lists_none() {
    let stat = |threads, state| PidStat {
        ppid: 1,
        state,
        utime: 0,
        stime: 0,
        cutime: 0,
        cstime: 0,
        threads,
        starttime: 1,
        rss_pages: 1,
    };
    assert_eq!(threads_known(&stat(2, 'S'), 10, 11), Some(vec![10]));
    assert_eq!(threads_known(&stat(2, 'R'), 10, 11), Some(vec![10]));
    // A third thread may have forked; a main thread that ended left its children to
    // another thread; a process read from its own main thread is not this case.
    assert_eq!(threads_known(&stat(3, 'S'), 10, 11), None);
    assert_eq!(threads_known(&stat(2, 'Z'), 10, 11), None);
    assert_eq!(threads_known(&stat(2, 'S'), 10, 10), None);
}

/// A Python child running `code` after `import time, sys`, with `say(c)` writing `c` to its
/// output at once; and that output.
fn python_saying(code: &str) -> (std::process::Child, std::process::ChildStdout) {
    let mut child = Command::new("python3")
        .args([
            "-c",
            &format!(
                "import time,sys\ndef say(c): sys.stdout.write(c); sys.stdout.flush()\n{code}"
            ),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    (child, out)
}

/// Waits for the child's next word.
fn next_word(out: &mut std::process::ChildStdout) {
    let mut byte = [0u8; 1];
    std::io::Read::read_exact(out, &mut byte).unwrap();
}

#[test]
fn a_sleeping_process_costs_two_small_reads() {
    let mut child = Command::new("sleep").arg("20").spawn().unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(100));
    let mut w = watch(true);
    let t0 = Instant::now();
    let first = w.read(pid, t0, true).unwrap();
    assert!(first.first && first.split_exact);
    assert_eq!(first.split.total(), first.memory.resident);
    assert!(first.hwm >= first.memory.resident && first.stat.threads == 1);
    w.end_sample(|p| p != 0);
    let before = w.counts();
    for k in 1..=5 {
        let r = w.read(pid, t0 + REFRESH * k, true).unwrap();
        assert_eq!(
            (r.stat, r.split, r.hwm),
            (first.stat, first.split, first.hwm)
        );
        assert!(!r.first && r.split_exact);
        w.end_sample(|p| p != 0);
    }
    let after = w.counts();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(after.readings - before.readings, 5);
    assert_eq!(
        after.stat_reads, before.stat_reads,
        "it did not run: no stat"
    );
    assert_eq!(after.status_reads, before.status_reads);
    assert_eq!(after.smaps_reads, before.smaps_reads);
    assert_eq!(after.files.kept_reads - before.files.kept_reads, 10);
    // Gone: an error that says so, and forgotten at the end of the sample.
    assert!(w.read(pid, Instant::now(), true).unwrap_err().is_gone());
    w.end_sample(|p| p != pid);
    assert_eq!(w.files.held(), 0);
}

#[test]
fn a_process_that_grows_is_read_again_and_its_peak_is_the_kernels() {
    // Grows 64 MB, keeps it for a while.
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import time,sys; time.sleep(0.3); b=bytearray(64*10**6); \
             sys.stdout.write('x'); sys.stdout.flush(); time.sleep(5)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut w = watch(true);
    let t0 = Instant::now();
    let small = w.read(pid, t0, true).unwrap();
    w.end_sample(|p| p != 0);
    let mut out = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    std::io::Read::read_exact(&mut out, &mut byte).unwrap();
    // Deferred: the split is estimated from statm's change, the total exact.
    let est = w.read(pid, t0 + Duration::from_millis(10), false).unwrap();
    w.end_sample(|p| p != 0);
    let big = w.read(pid, t0 + Duration::from_millis(20), true).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(big.memory.resident > small.memory.resident + 60_000_000);
    assert!(big.hwm >= big.memory.resident);
    assert!(!est.split_exact && big.split_exact);
    assert_eq!(est.split.total(), est.memory.resident);
    assert!(
        est.split.private > small.split.private + 60_000_000,
        "new anonymous pages count as private: {est:?}"
    );
    assert!(big.split.private > small.split.private + 60_000_000);
    assert_eq!(w.counts().splits_estimated, 1);
    assert_eq!(w.counts().smaps_reads, 2);
}

#[test]
fn a_small_move_is_estimated_and_a_large_one_read_again() {
    // Says it has started, writes 150 KB (under the tolerance), then 64 MB (over it), saying
    // when after each.
    let (mut child, mut out) = python_saying(
        "say('s'); time.sleep(0.5); a=b'x'*150000; say('a'); time.sleep(0.5); \
         b=bytearray(64*10**6); say('b'); time.sleep(5)",
    );
    let pid = child.id();
    let mut w = watch(true);
    next_word(&mut out);
    let t0 = Instant::now();
    let first = w.read(pid, t0, true).unwrap();
    w.end_sample(|p| p != 0);
    next_word(&mut out);
    let small = w.read(pid, t0 + Duration::from_millis(10), true).unwrap();
    w.end_sample(|p| p != 0);
    let reads = w.counts().smaps_reads;
    next_word(&mut out);
    let big = w.read(pid, t0 + Duration::from_millis(20), true).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let moved = small.memory.resident.abs_diff(first.memory.resident);
    assert!(
        moved > 0 && moved <= split_tolerance(small.memory.resident),
        "{first:?} {small:?}"
    );
    assert_eq!(
        small.split.total(),
        small.memory.resident,
        "the total is statm's"
    );
    assert_eq!(reads, 1, "a small move reads no split: {:?}", w.counts());
    assert!(!small.split_exact);
    assert!(big.split_exact && big.split.private > first.split.private + 60_000_000);
    assert_eq!(w.counts().smaps_reads, 2);
}

/// A shell that starts a child once told to ([`start_its_child`]).
fn sh_waiting() -> std::process::Child {
    let sh = Command::new("sh")
        .args(["-c", "read x; sleep 5"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    sh
}

fn start_its_child(sh: &mut std::process::Child) {
    std::io::Write::write_all(sh.stdin.as_mut().unwrap(), b"go\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn a_new_child_makes_its_parent_read_its_split_again() {
    let mut sh = sh_waiting();
    let pid = sh.id();
    let mut w = watch(true);
    let t0 = Instant::now();
    w.read(pid, t0, true).unwrap();
    w.end_sample(|p| p != 0);
    let smaps = w.counts().smaps_reads;
    start_its_child(&mut sh);
    let kids = w.children(pid, t0).unwrap().unwrap();
    assert_eq!(kids.len(), 1, "{kids:?}");
    w.read(pid, t0, true).unwrap();
    let kid = w.read(kids[0], t0, true).unwrap();
    assert!(kid.first);
    w.end_sample(|p| p != 0);
    let again = w.counts().smaps_reads;
    w.read(pid, t0, true).unwrap();
    w.end_sample(|p| p != 0);
    let _ = Command::new("kill").arg(kids[0].to_string()).status();
    sh.wait().unwrap();
    // The parent (and the new child) at the sample it appeared; the parent once more after.
    assert!(again > smaps);
    assert_eq!(w.counts().smaps_reads, again + 1);
}

#[test]
fn without_smaps_the_split_is_statms() {
    let me = std::process::id();
    let mut w = watch(false);
    let r = w.read(me, Instant::now(), true).unwrap();
    assert!(!r.split_exact);
    assert_eq!(r.split, r.memory.split());
    assert_eq!(w.counts().smaps_reads, 0);
}

#[test]
fn an_estimate_keeps_the_total_and_moves_each_side_by_its_change() {
    let mb = 1_000_000;
    let s = MemSplit {
        private: 10 * mb,
        shared: 5 * mb,
    };
    let at = Statm {
        resident: 15 * mb,
        shared: 6 * mb,
    };
    let grown = estimate(
        s,
        at,
        Statm {
            resident: 115 * mb,
            shared: 6 * mb,
        },
    );
    assert_eq!((grown.private, grown.shared), (110 * mb, 5 * mb));
    let files = estimate(
        s,
        at,
        Statm {
            resident: 25 * mb,
            shared: 16 * mb,
        },
    );
    assert_eq!((files.private, files.shared), (10 * mb, 15 * mb));
    let shrunk = estimate(
        s,
        at,
        Statm {
            resident: mb,
            shared: 0,
        },
    );
    assert_eq!(shrunk.total(), mb);
}

#[test]
fn a_costly_split_is_read_again_only_once_its_cost_has_passed() {
    // Says it has started, then grows 64 MB (far past the tolerance) and says so.
    let (mut child, mut out) =
        python_saying("say('s'); time.sleep(0.3); b=bytearray(64*10**6); say('b'); time.sleep(5)");
    let pid = child.id();
    let mut w = watch(true);
    // Every read counts as costly: the next waits its CPU time over the share (some µs of
    // CPU: tens of µs at least).
    w.paced_from = Duration::ZERO;
    next_word(&mut out);
    let t0 = Instant::now();
    let first = w.read(pid, t0, true).unwrap();
    w.end_sample(|p| p != 0);
    next_word(&mut out);
    let soon = w.read(pid, t0 + Duration::from_nanos(1), true).unwrap();
    w.end_sample(|p| p != 0);
    let later = w.read(pid, t0 + Duration::from_secs(60), true).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(first.split_exact);
    // Allowed by the caller and far off, but too soon after a costly read: estimated, the
    // total exact and the new pages private.
    assert!(!soon.split_exact, "{soon:?}");
    assert_eq!(soon.split.total(), soon.memory.resident);
    assert!(soon.split.private > first.split.private + 60_000_000);
    assert!(later.split_exact && later.split.private > first.split.private + 60_000_000);
    assert_eq!(w.counts().smaps_reads, 2);
    assert_eq!(w.counts().splits_estimated, 1);
}

#[test]
fn a_new_child_beside_a_paced_process_is_read_once_the_pace_allows() {
    let mut sh = sh_waiting();
    let pid = sh.id();
    let mut w = watch(true);
    w.paced_from = Duration::ZERO;
    let t0 = Instant::now();
    w.read(pid, t0, true).unwrap();
    w.end_sample(|p| p != 0);
    start_its_child(&mut sh);
    let kids = w.children(pid, t0).unwrap().unwrap();
    assert_eq!(kids.len(), 1, "{kids:?}");
    w.read(kids[0], t0, true).unwrap();
    let reads = w.counts().smaps_reads;
    // The parent shares pages with its new child now, but its last read was just now.
    let paced = w.read(pid, t0 + Duration::from_nanos(1), true).unwrap();
    w.end_sample(|p| p != 0);
    let paced_reads = w.counts().smaps_reads;
    // Its memory has not moved: only the change beside it, kept while it waited, reads it.
    let after = w.read(pid, t0 + Duration::from_secs(60), true).unwrap();
    w.end_sample(|p| p != 0);
    let _ = Command::new("kill").arg(kids[0].to_string()).status();
    sh.wait().unwrap();
    assert!(!paced.split_exact);
    assert_eq!(paced_reads, reads);
    assert!(after.split_exact);
    assert_eq!(w.counts().smaps_reads, reads + 1);
}
