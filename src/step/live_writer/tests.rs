//! The live writer's tests.

use super::*;
use crate::cgroup::fixture::TempTree;
use crate::step::live::Parsed;
use std::path::PathBuf;
use std::time::SystemTime;

fn setup(dir: PathBuf, gid: Option<u32>, interval: Duration) -> LiveSetup {
    LiveSetup {
        dir,
        gid,
        interval,
        problem: None,
    }
}

fn id(node: &str, job: u32) -> Identity {
    Identity {
        cluster: "c1".into(),
        job_id: job,
        step: "0".into(),
        user: "alice".into(),
        uid: 1001,
        node: node.into(),
        stepd_pid: std::process::id(),
        started_at: 1.0,
        alloc_cpus: Some(2),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn acc(cpu: f64) -> Acc {
    let mut a = Acc::new(Duration::from_secs(1));
    a.latest.cpu_seconds = Some(cpu);
    a
}

fn read(p: &Path) -> LiveState {
    match live::parse(&fs::read(p).unwrap()) {
        Parsed::State(s) => *s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn writes_atomically_at_most_once_an_interval_and_removes_at_the_end() {
    let t = TempTree::new("live-write");
    let dir = t.path().join("live");
    let root = sys::euid() == 0;
    // As root the directory and file go to a group; a user can give them only to its own.
    let gid = root.then_some(4242);
    let mut w = LiveWriter::new(setup(dir.clone(), gid, Duration::from_secs(5)), id("n1", 7));
    let t0 = Instant::now();
    assert_eq!(w.after_sample(&acc(1.0), t0), None);
    let file = dir.join("c1.7.0.n1.json");
    assert_eq!(read(&file).cpu.seconds, Some(1.0));
    let (dm, fm) = (fs::metadata(&dir).unwrap(), fs::metadata(&file).unwrap());
    if root {
        assert_eq!((dm.mode() & 0o7777, dm.gid()), (0o750, 4242));
        assert_eq!((fm.mode() & 0o7777, fm.gid(), fm.uid()), (0o640, 4242, 0));
    } else {
        assert_eq!((dm.mode() & 0o7777, fm.mode() & 0o7777), (0o700, 0o600));
    }
    // Not due yet: unchanged; due: rewritten. No temporary file is left (the mark says the
    // plugin made the directory).
    assert_eq!(w.after_sample(&acc(2.0), t0 + Duration::from_secs(1)), None);
    assert_eq!(read(&file).cpu.seconds, Some(1.0));
    assert_eq!(w.after_sample(&acc(3.0), t0 + Duration::from_secs(5)), None);
    assert_eq!(read(&file).cpu.seconds, Some(3.0));
    assert_eq!(names(&dir), [MADE_MARK, "c1.7.0.n1.json"]);
    w.close();
    assert_eq!(names(&dir), [MADE_MARK]);
    // Closed: a sampler that comes back late writes nothing.
    assert_eq!(
        w.after_sample(&acc(4.0), t0 + Duration::from_secs(60)),
        None
    );
    assert_eq!(names(&dir), [MADE_MARK]);
}

#[test]
fn an_untrusted_directory_is_refused_with_one_fault() {
    let t = TempTree::new("live-refuse");
    let open = t.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, Permissions::from_mode(0o777)).unwrap();
    let mut w = LiveWriter::new(setup(open.clone(), None, Duration::ZERO), id("n1", 8));
    let now = Instant::now();
    let f = w.after_sample(&acc(1.0), now).expect("a fault");
    assert!(f.contains("writable by group"), "{f}");
    assert!(!f.contains('\n'), "{f}");
    // Said once; nothing written, ever.
    assert_eq!(w.after_sample(&acc(1.0), now), None);
    assert!(names(&open).is_empty());
    // A link to a good directory is not followed.
    let good = t.path().join("good");
    fs::create_dir(&good).unwrap();
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let mut w = LiveWriter::new(setup(link, None, Duration::ZERO), id("n1", 8));
    let f = w.after_sample(&acc(1.0), now).expect("a fault");
    assert!(f.contains("not a directory"), "{f}");
    assert!(names(&good).is_empty());
    // Another user's directory (only root can make one to test).
    if sys::euid() == 0 {
        std::os::unix::fs::chown(&good, Some(4242), None).unwrap();
        let mut w = LiveWriter::new(setup(good.clone(), None, Duration::ZERO), id("n1", 8));
        let f = w.after_sample(&acc(1.0), now).expect("a fault");
        assert!(f.contains("owned by uid 4242"), "{f}");
        assert!(names(&good).is_empty());
    } else {
        eprintln!("note: not root: another user's directory cannot be made; that part skipped");
    }
    // A problem found at the start (an unknown group): one fault, nothing written.
    let mut s = setup(t.path().join("new"), None, Duration::ZERO);
    s.problem = Some("live_group \"nope\": no such group".into());
    let mut w = LiveWriter::new(s, id("n1", 8));
    let f = w.after_sample(&acc(1.0), now).expect("a fault");
    assert!(f.contains("no such group"), "{f}");
    assert_eq!(w.after_sample(&acc(1.0), now), None);
    assert!(!t.path().join("new").exists());
}

#[test]
fn a_temporary_file_left_by_an_interrupted_write_is_replaced_at_the_next_write() {
    // A write interrupted after its temporary file was made (slurmstepd took the user's id
    // meanwhile, so the clean-up failed) leaves the file behind; the same thread's next
    // write uses the same name.
    let t = TempTree::new("live-left");
    let dir = t.path().join("live");
    fs::create_dir(&dir).unwrap();
    let tmp = dir.join(format!(
        ".c1.7.0.n1.json.{}.{}.tmp",
        std::process::id(),
        sys::gettid()
    ));
    fs::write(&tmp, b"{\"half").unwrap();
    let mut w = LiveWriter::new(
        setup(dir.clone(), None, Duration::from_secs(5)),
        id("n1", 7),
    );
    let t0 = Instant::now();
    assert_eq!(w.after_sample(&acc(1.0), t0), None);
    assert_eq!(read(&dir.join("c1.7.0.n1.json")).cpu.seconds, Some(1.0));
    assert_eq!(names(&dir), ["c1.7.0.n1.json"]);
    // Something other than a regular file of the writer's is not removed, nor written
    // through: the write fails (one fault) and what is there stays.
    let outside = t.path().join("outside");
    fs::write(&outside, b"keep").unwrap();
    std::os::unix::fs::symlink(&outside, &tmp).unwrap();
    let f = w
        .after_sample(&acc(2.0), t0 + Duration::from_secs(5))
        .expect("a fault");
    assert!(f.contains("exists"), "{f}");
    assert_eq!(fs::read(&outside).unwrap(), b"keep");
    assert!(fs::symlink_metadata(&tmp).unwrap().file_type().is_symlink());
    assert_eq!(read(&dir.join("c1.7.0.n1.json")).cpu.seconds, Some(1.0));
}

#[test]
fn files_of_killed_steps_of_this_node_are_removed_once_old() {
    let t = TempTree::new("live-stale");
    let dir = t.path().join("live");
    fs::create_dir(&dir).unwrap();
    let long_ago = SystemTime::now() - Duration::from_secs(7200);
    let now = crate::clock::unix_now();
    let state = |job: u32, written_at: f64, interval: f64| {
        let mut s = live::state_of(&id("n1", job), &acc(1.0), interval, written_at);
        s.interval_seconds = interval;
        serde_json::to_vec(&s).unwrap()
    };
    let put = |name: &str, bytes: &[u8], old: bool| {
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        if old {
            let f = fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(long_ago).unwrap();
        }
    };
    put("c1.1.0.n1.json", &state(1, now - 7200.0, 5.0), true); // killed: removed
    put(".c1.2.0.n1.json.77.78.tmp", b"{", true); // half written, killed: removed
    put("c1.3.0.n1.json", &state(3, now - 7200.0, 5.0), false); // changed lately: kept
    put("c1.4.0.n2.json", &state(4, now - 7200.0, 5.0), true); // another node's: kept
    put("c1.5.0.n1.json", &state(5, now - 100.0, 86400.0), true); // sampled daily: kept
    put("notes.txt", b"", true); // not a live file: kept
    let mut w = LiveWriter::new(
        setup(dir.clone(), None, Duration::from_secs(5)),
        id("n1", 9),
    );
    assert_eq!(w.after_sample(&acc(1.0), Instant::now()), None);
    assert_eq!(
        names(&dir),
        [
            "c1.3.0.n1.json",
            "c1.4.0.n2.json",
            "c1.5.0.n1.json",
            "c1.9.0.n1.json",
            "notes.txt"
        ]
    );
}

#[test]
fn only_files_this_plugin_wrote_are_removed_from_the_directory() {
    // A `live_dir` set by mistake to a directory that holds other files of root's (`/run`):
    // only a file named as a live state of this cluster and node, that holds the state its
    // name says, is removed (or a temporary file named as one of them).
    let t = TempTree::new("live-strict");
    let dir = t.path().join("run");
    fs::create_dir(&dir).unwrap();
    let long_ago = SystemTime::now() - Duration::from_secs(7200);
    let old_state = |job: u32| {
        let s = live::state_of(
            &id("n1", job),
            &acc(1.0),
            5.0,
            crate::clock::unix_now() - 7200.0,
        );
        serde_json::to_vec(&s).unwrap()
    };
    let put = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        let f = fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(long_ago).unwrap();
    };
    put("c1.1.0.n1.json", &old_state(1)); // this plugin's, killed: removed
    put(".c1.2.0.n1.json.77.78.tmp", b"{"); // this plugin's, half written: removed
    put("c1.6.0.n1.json", b"not a state"); // not a state: not this plugin's
    put("notes.n1.json", &old_state(1)); // not named as a live state
    put("db.backup.n1.json", &old_state(1));
    put("c1.01.0.n1.json", &old_state(1)); // not a job id as Slurm writes it
    put("c1.3.x.n1.json", &old_state(3)); // not a step
    put("c1.4.0.n1.json", &old_state(5)); // holds another step's state
    put("c2.1.0.n1.json", &old_state(1)); // another cluster's name
    put(".notes.n1.json.tmp", b"");
    put(".c1.2.0.n1.json.tmp", b"");
    put(".c1.2.0.n1.json.77.x.tmp", b"");
    let mut w = LiveWriter::new(
        setup(dir.clone(), None, Duration::from_secs(5)),
        id("n1", 9),
    );
    assert_eq!(w.after_sample(&acc(1.0), Instant::now()), None);
    assert_eq!(
        names(&dir),
        [
            ".c1.2.0.n1.json.77.x.tmp",
            ".c1.2.0.n1.json.tmp",
            ".notes.n1.json.tmp",
            "c1.01.0.n1.json",
            "c1.3.x.n1.json",
            "c1.4.0.n1.json",
            "c1.6.0.n1.json",
            "c1.9.0.n1.json",
            "c2.1.0.n1.json",
            "db.backup.n1.json",
            "notes.n1.json",
        ]
    );
}

#[test]
fn only_a_directory_this_plugin_made_is_given_to_the_group() {
    let t = TempTree::new("live-group");
    let root = sys::euid() == 0;
    // As root the directory can go to any group; a user can give it only to its own.
    let gid = if root {
        4242
    } else {
        fs::metadata(t.path()).unwrap().gid()
    };
    let mode_gid = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.mode() & 0o7777, m.gid())
    };
    // An existing directory (`/run` by mistake): used as it is, its group and mode are not
    // the plugin's to change.
    let theirs = t.path().join("run");
    fs::create_dir(&theirs).unwrap();
    fs::set_permissions(&theirs, Permissions::from_mode(0o700)).unwrap();
    let before = mode_gid(&theirs);
    let mut w = LiveWriter::new(
        setup(theirs.clone(), Some(gid), Duration::from_secs(5)),
        id("n1", 7),
    );
    assert_eq!(w.after_sample(&acc(1.0), Instant::now()), None);
    assert_eq!(mode_gid(&theirs), before);
    assert_eq!(names(&theirs), ["c1.7.0.n1.json"]);
    // One the plugin makes is marked as its own, and kept for the group.
    let made = t.path().join("live");
    let mut w = LiveWriter::new(
        setup(made.clone(), Some(gid), Duration::from_secs(5)),
        id("n1", 7),
    );
    assert_eq!(w.after_sample(&acc(1.0), Instant::now()), None);
    assert_eq!(mode_gid(&made), (0o750, gid));
    assert_eq!(names(&made), [MADE_MARK, "c1.7.0.n1.json"]);
    if root {
        std::os::unix::fs::chown(&made, None, Some(0)).unwrap();
        fs::set_permissions(&made, Permissions::from_mode(0o700)).unwrap();
        let mut w = LiveWriter::new(
            setup(made.clone(), Some(gid), Duration::from_secs(5)),
            id("n1", 8),
        );
        assert_eq!(w.after_sample(&acc(1.0), Instant::now()), None);
        assert_eq!(mode_gid(&made), (0o750, gid));
    }
}
