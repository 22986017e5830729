//! The cache against other users: a directory they own or can write is not used, a FIFO or a
//! link they could have put there neither holds the submission nor leads a write elsewhere,
//! and root keeps nothing.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Key;
use super::history::{self, Cache, Place};
use super::own_dir::OwnDir;
use super::submit::{self, Context, Outcome};
use crate::cgroup::fixture::{TempTree, within};
use crate::config::Config;

/// Another user, for `chown` (as root only).
const NOBODY: u32 = 65534;

fn me() -> u32 {
    crate::sys::euid()
}

fn root() -> bool {
    me() == 0
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A temporary tree only its owner can write (whatever the umask).
fn tree(tag: &str) -> TempTree {
    let t = TempTree::new(tag);
    chmod(t.path(), 0o755);
    t
}

/// The names in directory `d`.
fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn submission() -> BTreeMap<String, String> {
    [
        ("type", "sbatch"),
        ("job-name", "train"),
        ("gpu_track", "set"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The submission's outcome with its cache at `place` (Slurm's database never answering in
/// time), on a thread of its own: `None` when it has not returned within 2 s.
fn submit_within_2s(place: Place) -> Option<Outcome> {
    within(Duration::from_secs(2), move || {
        let cfg = Config::default();
        let ctx = Context {
            cfg: &cfg,
            cluster: "c",
            uid: 1001,
            cwd: Path::new("/home/alice"),
            cache: Ok(&place),
            now: 1_764_000_000,
            report: "gpu-tracker-report",
        };
        submit::at_submission(&submission(), &ctx, |_| Ok(false))
    })
}

/// `victim` holds what it held.
fn untouched(victim: &Path) {
    assert_eq!(std::fs::read_to_string(victim).unwrap(), "precious\n");
}

#[test]
fn a_cache_directory_another_user_owns_or_can_write_is_not_used() {
    let t = tree("advise-dirs");
    let refused = |dir: &Path, why: &str| {
        let e = Place::open(dir, me(), "c").unwrap_err();
        assert!(e.contains(why), "{e}");
    };
    // Writable by its group, or by anyone: refused, also as a parent (not sticky).
    let group = t.path().join("group");
    std::fs::create_dir(&group).unwrap();
    chmod(&group, 0o770);
    refused(&group, "can be written by others (mode 770)");
    refused(
        &group.join("gpu-tracker"),
        "can be written by others (mode 770)",
    );
    assert!(names(&group).is_empty());
    let world = t.path().join("world");
    std::fs::create_dir(&world).unwrap();
    chmod(&world, 0o777);
    refused(
        &world.join("gpu-tracker"),
        "can be written by others (mode 777)",
    );
    assert!(names(&world).is_empty(), "nothing made in it");
    // Sticky (as /tmp): its entries can be replaced only by their owners, so an entry of
    // the caller's own in it is used.
    let sticky = t.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    chmod(&sticky, 0o1777);
    let mine = Place::open(&sticky.join("mine"), me(), "c").unwrap();
    assert_eq!(mine.path(), sticky.join("mine/advice-c.json"));
    let made = std::fs::metadata(sticky.join("mine")).unwrap();
    assert_eq!((made.uid(), made.mode() & 0o7777), (me(), 0o700));
    // The cache directory itself may not be sticky and writable by others.
    refused(&sticky, "can be written by others (mode 1777)");
    // A symbolic link on the way of the caller's own is followed.
    std::os::unix::fs::symlink("sticky/mine", t.path().join("link")).unwrap();
    Place::open(&t.path().join("link"), me(), "c").unwrap();
    // A file where a directory should be.
    std::fs::write(t.path().join("file"), "").unwrap();
    refused(&t.path().join("file/gpu-tracker"), "not a directory");
    if !root() {
        eprintln!("note: not root: another user's directories cannot be made; that part skipped");
        return;
    }
    // Another user's: the directory itself, a parent, one they made first in a sticky
    // directory (/tmp), and their link on the way.
    let theirs = t.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    chmod(&theirs, 0o700);
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    refused(&theirs, "belongs to uid 65534, not to you");
    refused(
        &theirs.join("cache"),
        "belongs to uid 65534, neither you nor root",
    );
    assert!(names(&theirs).is_empty(), "nothing made in it");
    let first = sticky.join("first");
    std::fs::create_dir(&first).unwrap();
    std::os::unix::fs::chown(&first, Some(NOBODY), Some(NOBODY)).unwrap();
    chmod(&first, 0o755);
    refused(&first, "belongs to uid 65534, not to you");
    let planted = sticky.join("planted");
    std::os::unix::fs::symlink(sticky.join("mine"), &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(NOBODY), Some(NOBODY)).unwrap();
    refused(&planted, "a symbolic link of uid 65534");
    // The submission with such a directory: no note, no history, nothing written.
    let cfg = Config::default();
    let ctx = Context {
        cfg: &cfg,
        cluster: "c",
        uid: 1001,
        cwd: Path::new("/home/alice"),
        cache: Err("refused"),
        now: 1_764_000_000,
        report: "gpu-tracker-report",
    };
    let never = |_| -> Result<bool, String> { panic!("no cache: no question") };
    assert_eq!(
        submit::at_submission(&submission(), &ctx, never),
        Outcome::Quiet("no history is kept: refused".into())
    );
}

#[test]
fn a_fifo_at_the_lock_or_the_cache_does_not_hold_the_submission() {
    let t = tree("advise-fifo");
    let dir = t.path().join("gpu-tracker");
    let open = || Place::open(&dir, me(), "c").unwrap();
    drop(open());
    t.fifo("gpu-tracker/advice-c.lock");
    let out = submit_within_2s(open()).expect("held by a FIFO at the lock");
    let Outcome::Quiet(why) = out else {
        panic!("{out:?}")
    };
    assert!(why.contains("advice-c.lock: not a regular file"), "{why}");
    std::fs::remove_file(dir.join("advice-c.lock")).unwrap();
    // At the cache and at the submissions noted: read as none; the submission is noted.
    t.fifo("gpu-tracker/advice-c.json");
    t.fifo("gpu-tracker/advice-c.submitted");
    let out = submit_within_2s(open()).expect("held by a FIFO at the cache");
    assert!(matches!(&out, Outcome::Quiet(w) if !w.contains("could not be kept")));
    let place = open();
    assert_eq!(
        history::submissions(&place),
        vec![("n:train".to_string(), 1_764_000_000)]
    );
    assert_eq!(history::load(&place, 1001, "c"), None);
    // Written whole over the FIFO, and read back.
    history::save(&place, &Cache::new(1001, "c")).unwrap();
    assert_eq!(
        history::load(&place, 1001, "c"),
        Some(Cache::new(1001, "c"))
    );
}

#[test]
fn a_link_at_the_cache_or_its_temporary_file_leaves_its_target_alone() {
    let t = tree("advise-links");
    let victim = t.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let dir = t.path().join("gpu-tracker");
    let place = Place::open(&dir, me(), "c").unwrap();
    let link = |name: &str, to: &Path| {
        let _ = std::fs::remove_file(dir.join(name));
        std::os::unix::fs::symlink(to, dir.join(name)).unwrap();
    };
    let pid = std::process::id();
    // At the cache, the submissions noted, and the temporary file of each.
    link("advice-c.json", &victim);
    link("advice-c.submitted", &victim);
    link(&format!(".advice-c.json.{pid}"), &victim);
    link(&format!(".advice-c.submitted.{pid}"), &victim);
    assert_eq!(history::load(&place, 1001, "c"), None, "not read through");
    assert!(history::submissions(&place).is_empty(), "not read through");
    history::note_submission(&place, &Key::Name("train".into()), 5).unwrap();
    history::save(&place, &Cache::new(1001, "c")).unwrap();
    untouched(&victim);
    // The links were replaced by files of their own.
    for name in ["advice-c.json", "advice-c.submitted"] {
        let m = std::fs::symlink_metadata(dir.join(name)).unwrap();
        assert!(m.is_file(), "{name}");
        assert_eq!(m.mode() & 0o777, 0o600, "{name}");
    }
    assert_eq!(
        history::submissions(&place),
        vec![("n:train".to_string(), 5)]
    );
    assert_eq!(
        history::load(&place, 1001, "c"),
        Some(Cache::new(1001, "c"))
    );
    assert!(
        !names(&dir).iter().any(|n| n.starts_with(".advice-c")),
        "{:?}",
        names(&dir)
    );
    // At a lock: refused, nothing made where it points.
    let missing = t.path().join("made-through-the-link");
    link("advice-c.lock", &missing);
    let e = history::note_submission(&place, &Key::Name("x".into()), 6).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    assert!(!missing.exists());
    link("advice-c.lock", &victim);
    assert!(history::lock(&place, "lock").is_err());
    untouched(&victim);
}

#[test]
fn only_the_callers_own_files_that_nobody_else_can_write_are_used() {
    let t = tree("advise-files");
    let dir = t.path().join("gpu-tracker");
    let place = Place::open(&dir, me(), "c").unwrap();
    history::save(&place, &Cache::new(1001, "c")).unwrap();
    let cache = dir.join("advice-c.json");
    assert!(history::load(&place, 1001, "c").is_some());
    chmod(&cache, 0o666);
    assert_eq!(history::load(&place, 1001, "c"), None, "writable by others");
    chmod(&cache, 0o600);
    assert!(history::load(&place, 1001, "c").is_some());
    if root() {
        std::os::unix::fs::chown(&cache, Some(NOBODY), None).unwrap();
        assert_eq!(history::load(&place, 1001, "c"), None, "another user's");
    }
    // Whose files count is the caller's (a parameter, so that root can test it): a lock
    // file this process made is not another caller's.
    drop(history::lock(&place, "lock").unwrap());
    if root() {
        std::os::unix::fs::chown(&dir, Some(NOBODY), None).unwrap();
        let theirs = OwnDir::open(&dir, NOBODY).unwrap();
        let e = theirs.try_lock("advice-c.lock").unwrap_err();
        assert!(
            e.to_string().contains("belongs to uid 0, not to you"),
            "{e}"
        );
    }
}

#[test]
fn root_keeps_nothing() {
    let t = tree("advise-root");
    let dir: PathBuf = t.path().join("cache/gpu-tracker");
    let got = Place::for_caller(&dir, "c");
    if root() {
        assert_eq!(got.unwrap_err(), "nothing is kept for root");
        assert!(names(t.path()).is_empty(), "nothing made");
        let e = OwnDir::for_caller(&dir).unwrap_err();
        assert_eq!(e, "nothing is kept for root");
    } else {
        // Anyone else keeps their cache.
        let place = got.unwrap();
        history::save(&place, &Cache::new(1001, "c")).unwrap();
        assert!(dir.join("advice-c.json").is_file());
    }
}
