//! Tests of the live directory's reading.

use super::*;
use crate::cgroup::fixture::TempTree;
use crate::exporter::testing::state;

fn me() -> Vec<u32> {
    vec![0, crate::sys::euid()]
}

#[test]
fn states_are_read_and_every_bad_file_is_counted_by_why() {
    let t = TempTree::new("exporter-read");
    let d = t.path().join("live");
    std::fs::create_dir(&d).unwrap();
    let now = 1_000_000.0;
    let put = |name: &str, s: &LiveState| {
        std::fs::write(d.join(name), serde_json::to_vec(s).unwrap()).unwrap();
    };
    // An earlier build's state, without the pressure field: read.
    let mut v = serde_json::to_value(state(2, "0", now - 1.0)).unwrap();
    v.as_object_mut().unwrap().remove("pressure");
    std::fs::write(d.join("c1.2.0.n1.json"), v.to_string()).unwrap();
    put("c1.1.batch.n1.json", &state(1, "batch", now - 2.0));
    // Half written (a writer that skipped the rename): bad_json.
    let whole = serde_json::to_vec(&state(3, "0", now)).unwrap();
    std::fs::write(d.join("c1.3.0.n1.json"), &whole[..whole.len() / 2]).unwrap();
    // A pressure counter below 0: bad_json.
    let mut v = serde_json::to_value(state(11, "0", now)).unwrap();
    v["pressure"] = serde_json::json!({"cpu": {"some_us": -1}});
    std::fs::write(d.join("c1.11.0.n1.json"), v.to_string()).unwrap();
    // Stale: 3 intervals of 5 s and 30 s ago, and a bit.
    put("c1.4.0.n1.json", &state(4, "0", now - 46.0));
    // A later version.
    let mut v = serde_json::to_value(state(5, "0", now)).unwrap();
    v["schema_version"] = 9.into();
    std::fs::write(d.join("c1.5.0.n1.json"), v.to_string()).unwrap();
    // Too large (sparse: nothing is read).
    let big = File::create(d.join("c1.6.0.n1.json")).unwrap();
    big.set_len(MAX_FILE_BYTES + 1).unwrap();
    // A link to a good state, a FIFO, a directory.
    std::os::unix::fs::symlink(d.join("c1.2.0.n1.json"), d.join("c1.7.0.n1.json")).unwrap();
    let fifo = d.join("c1.8.0.n1.json");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir(d.join("c1.9.0.n1.json")).unwrap();
    // The same step (cluster, job, step, node) in two files: the newest is exported.
    put("c2.1.batch.n1.json", &state(1, "batch", now - 0.5));
    // Not state files: ignored, not counted.
    put(".c1.10.0.n1.json.1.2.tmp", &state(10, "0", now));
    std::fs::write(d.join("README"), "x").unwrap();
    let started = std::time::Instant::now();
    let s = scan(&d, &me(), now);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "waited"
    );
    assert_eq!(s.dir_problem, None);
    let got: Vec<(u32, &str, f64)> = s
        .states
        .iter()
        .map(|s| (s.job_id, s.step.as_str(), s.written_at))
        .collect();
    assert_eq!(got, [(1, "batch", now - 0.5), (2, "0", now - 1.0)]);
    let count = |k: Skip| s.skipped[k.index()];
    assert_eq!(count(Skip::BadJson), 2);
    assert_eq!(count(Skip::Stale), 1);
    assert_eq!(count(Skip::NewerSchema), 1);
    assert_eq!(count(Skip::TooLarge), 1);
    assert_eq!(count(Skip::NotRegular), 3);
    assert_eq!(count(Skip::Duplicate), 1);
    assert_eq!(count(Skip::NotRoot) + count(Skip::Unreadable), 0);
    // Another user's file: only root can make one to test.
    if crate::sys::euid() == 0 {
        let p = d.join("c1.2.0.n1.json");
        std::os::unix::fs::chown(&p, Some(4242), None).unwrap();
        let s = scan(&d, &[0], now);
        assert_eq!(s.skipped[Skip::NotRoot.index()], 1);
        assert!(s.states.iter().all(|s| s.job_id != 2));
    } else {
        eprintln!("note: not root: a file of another owner cannot be made; that part skipped");
    }
}

#[test]
fn the_directory_checked_is_the_directory_listed() {
    let t = TempTree::new("exporter-swap");
    let d = t.path().join("live");
    std::fs::create_dir(&d).unwrap();
    let put = |name: &str, s: &LiveState| {
        std::fs::write(d.join(name), serde_json::to_vec(s).unwrap()).unwrap();
    };
    put("c1.1.0.n1.json", &state(1, "0", 0.0));
    let opened = open_dir(&d, &me()).unwrap();
    // Swapped for another directory once checked: the one checked is read, all of it.
    std::fs::rename(&d, t.path().join("old")).unwrap();
    std::fs::create_dir(&d).unwrap();
    put("c1.2.0.n1.json", &state(2, "0", 0.0));
    let s = scan_open(&opened, &me(), 1.0);
    let jobs: Vec<u32> = s.states.iter().map(|s| s.job_id).collect();
    assert_eq!(jobs, [1]);
}

#[test]
fn a_listing_that_fails_is_said_not_taken_for_an_empty_directory() {
    let t = TempTree::new("exporter-gone");
    let d = t.path().join("live");
    std::fs::create_dir(&d).unwrap();
    let opened = open_dir(&d, &me()).unwrap();
    // Removed once judged: the kernel refuses to list it (ENOENT).
    std::fs::remove_dir(&d).unwrap();
    let s = scan_open(&opened, &me(), 1.0);
    let problem = s.dir_problem.expect("a listing error");
    assert!(
        matches!(&problem, DirState::ListFailed(w) if w.contains("No such file")),
        "{problem:?}"
    );
    assert_eq!(problem.error(), Some(DirError::ListFailed));
    assert_eq!(
        problem.to_string(),
        "listing failed: No such file or directory (os error 2)"
    );
    assert_eq!(DirState::Missing.error(), None);
}

#[test]
fn steps_of_two_clusters_sharing_the_directory_are_not_duplicates() {
    let t = TempTree::new("exporter-clusters");
    let d = t.path().join("live");
    std::fs::create_dir(&d).unwrap();
    let put = |name: &str, s: &LiveState| {
        std::fs::write(d.join(name), serde_json::to_vec(s).unwrap()).unwrap();
    };
    let mut other = state(5, "0", 0.0);
    other.cluster = "c2".into();
    put("c1.5.0.n1.json", &state(5, "0", 0.0));
    put("c2.5.0.n1.json", &other);
    let s = scan(&d, &me(), 1.0);
    let got: Vec<(&str, u32)> = s
        .states
        .iter()
        .map(|s| (s.cluster.as_str(), s.job_id))
        .collect();
    assert_eq!(got, [("c1", 5), ("c2", 5)]);
    assert_eq!(s.skipped[Skip::Duplicate.index()], 0);
}

#[test]
fn at_most_max_files_are_read() {
    let t = TempTree::new("exporter-many");
    let d = t.path().join("live");
    std::fs::create_dir(&d).unwrap();
    for i in 0..MAX_FILES + 3 {
        std::fs::write(d.join(format!("c.{i}.0.n1.json")), "{").unwrap();
    }
    let s = scan(&d, &me(), 0.0);
    assert_eq!(s.skipped[Skip::OverLimit.index()], 3);
    assert_eq!(s.skipped[Skip::BadJson.index()], MAX_FILES as u64);
}

#[test]
fn a_directory_others_could_fill_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempTree::new("exporter-dir");
    let d = t.path().join("live");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(
        d.join("c.1.0.n1.json"),
        serde_json::to_vec(&state(1, "0", 0.0)).unwrap(),
    )
    .unwrap();
    assert_eq!(scan(&d, &me(), 1.0).states.len(), 1);
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = scan(&d, &me(), 1.0);
    assert!(s.states.is_empty());
    assert!(
        matches!(&s.dir_problem, Some(DirState::Refused(w)) if w.contains("writable")),
        "{:?}",
        s.dir_problem
    );
    let link = t.path().join("link");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink(&d, &link).unwrap();
    assert!(matches!(
        scan(&link, &me(), 1.0).dir_problem,
        Some(DirState::Refused(_))
    ));
    assert_eq!(
        scan(&t.path().join("none"), &me(), 1.0).dir_problem,
        Some(DirState::Missing)
    );
    assert!(is_state_name(b"a.json") && !is_state_name(b".a.json"));
    assert!(!is_state_name(b".json") && !is_state_name(b"a.json.tmp"));
}
