//! Whether a path is root's alone: the plugin runs as root in every slurmstepd, so a settings
//! file, a library it loads, or a directory it writes to that another user can change (or swap
//! for something else) would give that user root.
//!
//! A path is trusted when it and every directory on the way to it, from `/` down, is owned by
//! root and writable by no group and no other user. Symbolic links are followed one component
//! at a time, as the kernel does, and only when the link itself is root's; the path it points to
//! is checked the same way. One exception: a directory on the way may be writable by everyone
//! when it is root's and has the sticky bit (`/tmp`, `/var/tmp`, mode 1777), because in such a
//! directory only an entry's owner can rename or remove it, so root's entries there stay put.
//! The file or directory at the end never gets that exception.
//!
//! A POSIX ACL that grants write access to a named user or group also shows in the mode: the
//! group bits are the ACL's mask, which bounds every such entry, so it reads as group-writable.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Most symbolic links followed in one path (the kernel's limit too).
pub const MAX_LINKS: usize = 40;

/// What is expected at the end of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    File,
    /// A directory, which may not exist yet: then the directories that do exist on its way are
    /// checked.
    Dir,
}

/// Checks that `path` is a regular file that only root can change, through directories that
/// only root can change (see the module's description). `what` names it in the error, which is
/// one line: `"{what} {path}: not trusted: {why}"`, where `why` names the offending component,
/// e.g. `settings file /etc/slurm/gpu-tracker.toml: not trusted: /etc/slurm is writable by
/// group (mode 775)`. A relative path is refused.
pub fn check_root_trusted(path: &Path, what: &str) -> Result<(), String> {
    check(path, what, Expect::File)
}

/// As [`check_root_trusted`], for a directory (the spool directory). A directory that does not
/// exist yet passes when the directories that do exist on its way are trusted: whoever creates
/// the rest must then check what it got (`Spool::open` does: the directory must be a real one,
/// the writer's, writable by no one else).
pub fn check_root_trusted_dir(path: &Path, what: &str) -> Result<(), String> {
    check(path, what, Expect::Dir)
}

fn check(path: &Path, what: &str, expect: Expect) -> Result<(), String> {
    let fail = |why: String| {
        let sep = if what.is_empty() { "" } else { " " };
        Err(format!("{what}{sep}{}: not trusted: {why}", path.display()))
    };
    if !path.is_absolute() {
        return fail("not an absolute path".into());
    }
    // The components still to walk, and the directory reached so far (resolved and checked).
    let mut todo = components(path);
    let mut at = PathBuf::from("/");
    let mut links = 0;
    if let Err(why) = examine(&at).and_then(|m| check_on_the_way(&at, &m)) {
        return fail(why);
    }
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            // `at` is resolved, so its parent is a directory already checked on the way.
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let m = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && expect == Expect::Dir => {
                return Ok(());
            }
            Err(e) => return fail(format!("{}: {e}", next.display())),
        };
        if m.file_type().is_symlink() {
            if m.uid() != 0 {
                return fail(format!(
                    "{} is a symbolic link owned by uid {}, not root",
                    next.display(),
                    m.uid()
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return fail(format!("more than {MAX_LINKS} symbolic links"));
            }
            let target = match std::fs::read_link(&next) {
                Ok(t) => t,
                Err(e) => return fail(format!("{}: {e}", next.display())),
            };
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for c in components(&target).into_iter().rev() {
                todo.push_front(c);
            }
            continue;
        }
        if let Err(why) = check_on_the_way(&next, &m) {
            return fail(why);
        }
        if !todo.is_empty() && !m.is_dir() {
            return fail(format!("{} is not a directory", next.display()));
        }
        at = next;
    }
    // The end of the path, with no exception for sticky directories.
    let m = match examine(&at) {
        Ok(m) => m,
        Err(why) => return fail(why),
    };
    if let Some(who) = writable_by(m.mode()) {
        return fail(format!(
            "{} is writable by {who} (mode {:o})",
            at.display(),
            m.mode() & 0o7777
        ));
    }
    match expect {
        Expect::File if !m.is_file() => fail(format!("{} is not a regular file", at.display())),
        Expect::Dir if !m.is_dir() => fail(format!("{} is not a directory", at.display())),
        _ => Ok(()),
    }
}

/// The names in `path`, `..` included and `.` left out.
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// `lstat` of `p`, with the error as a reason.
fn examine(p: &Path) -> Result<Metadata, String> {
    std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Root's, and writable by no one else unless it is a sticky directory.
fn check_on_the_way(p: &Path, m: &Metadata) -> Result<(), String> {
    if m.uid() != 0 {
        return Err(format!(
            "{} is owned by uid {}, not root",
            p.display(),
            m.uid()
        ));
    }
    let sticky = m.is_dir() && m.mode() & libc::S_ISVTX != 0;
    match writable_by(m.mode()) {
        Some(who) if !sticky => Err(format!(
            "{} is writable by {who} (mode {:o})",
            p.display(),
            m.mode() & 0o7777
        )),
        _ => Ok(()),
    }
}

/// Who other than the owner may write, going by the mode: `None` when no one.
fn writable_by(mode: u32) -> Option<&'static str> {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => None,
        (true, false) => Some("group"),
        (false, true) => Some("others"),
        (true, true) => Some("group and others"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use std::os::unix::fs::{PermissionsExt, chown, lchown, symlink};

    const OTHER: u32 = 4242;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A root-owned tree: `<tmp>/etc/conf.toml` (0644) under 0755 directories.
    fn tree(tag: &str) -> TempTree {
        let t = TempTree::new(tag);
        t.write("etc/conf.toml", "x = 1\n");
        chmod(t.path(), 0o755);
        chmod(&t.path().join("etc"), 0o755);
        chmod(&t.path().join("etc/conf.toml"), 0o644);
        t
    }

    fn why(r: Result<(), String>, path: &Path) -> String {
        let e = r.unwrap_err();
        let head = format!("settings file {}: not trusted: ", path.display());
        assert!(e.starts_with(&head), "{e}");
        assert!(!e.contains('\n'), "{e}");
        e[head.len()..].to_string()
    }

    fn is_root() -> bool {
        crate::sys::euid() == 0
    }

    /// Whether the test can run: only root can make root's trees (and files of other owners);
    /// otherwise it says it was skipped.
    fn root_or_skip() -> bool {
        let root = is_root();
        if !root {
            eprintln!("note: not root: a tree of root's own cannot be made; skipped");
        }
        root
    }

    #[test]
    fn a_tree_of_another_user_is_refused() {
        if is_root() {
            // Root's own case is the tests below.
            eprintln!("note: root: root owns any tree it makes; skipped");
            return;
        }
        let t = tree("trust-user");
        let f = t.path().join("etc/conf.toml");
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert_eq!(
            w,
            format!(
                "{} is owned by uid {}, not root",
                t.path().display(),
                crate::sys::euid()
            )
        );
    }

    #[test]
    fn roots_file_under_roots_directories_is_trusted() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-ok");
        let f = t.path().join("etc/conf.toml");
        check_root_trusted(&f, "settings file").unwrap();
        check_root_trusted_dir(&t.path().join("etc"), "spool").unwrap();
        // Group ownership does not matter while the group cannot write.
        chown(&f, None, Some(OTHER)).unwrap();
        check_root_trusted(&f, "settings file").unwrap();
        // `.` and `..` are walked as the kernel walks them.
        let dotted = t.path().join("etc/./../etc/conf.toml");
        check_root_trusted(&dotted, "settings file").unwrap();
    }

    #[test]
    fn the_systems_own_paths_are_trusted() {
        if !root_or_skip() {
            return;
        }
        check_root_trusted_dir(Path::new("/"), "").unwrap();
        check_root_trusted_dir(Path::new("/etc"), "").unwrap();
        check_root_trusted(Path::new("/etc/passwd"), "").unwrap();
        // Under the sticky /tmp and /var/tmp (where test trees live).
        let t = tree("trust-tmp");
        check_root_trusted(&t.path().join("etc/conf.toml"), "").unwrap();
        let v = Path::new("/var/tmp").join(format!("gpu-tracker-trust-{}", std::process::id()));
        std::fs::create_dir(&v).unwrap();
        chmod(&v, 0o755);
        let r = check_root_trusted_dir(&v, "");
        std::fs::remove_dir(&v).unwrap();
        r.unwrap();
    }

    #[test]
    fn a_directory_on_the_way_that_others_can_write_is_named() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-mode");
        let etc = t.path().join("etc");
        let f = etc.join("conf.toml");
        for (mode, who) in [
            (0o775, "group"),
            (0o757, "others"),
            (0o777, "group and others"),
        ] {
            chmod(&etc, mode);
            let w = why(check_root_trusted(&f, "settings file"), &f);
            assert_eq!(
                w,
                format!("{} is writable by {who} (mode {mode:o})", etc.display())
            );
        }
        // The top of the tree too.
        chmod(&etc, 0o755);
        chmod(t.path(), 0o775);
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert_eq!(
            w,
            format!("{} is writable by group (mode 775)", t.path().display())
        );
    }

    #[test]
    fn anything_on_the_way_owned_by_another_user_is_named() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-owner");
        let etc = t.path().join("etc");
        let f = etc.join("conf.toml");
        chown(&etc, Some(OTHER), None).unwrap();
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert_eq!(
            w,
            format!("{} is owned by uid 4242, not root", etc.display())
        );
        chown(&etc, Some(0), None).unwrap();
        chown(&f, Some(OTHER), None).unwrap();
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert_eq!(w, format!("{} is owned by uid 4242, not root", f.display()));
    }

    #[test]
    fn the_file_itself_must_be_roots_alone_and_of_the_right_kind() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-file");
        let etc = t.path().join("etc");
        let f = etc.join("conf.toml");
        chmod(&f, 0o664);
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert_eq!(
            w,
            format!("{} is writable by group (mode 664)", f.display())
        );
        chmod(&f, 0o644);
        let w = why(check_root_trusted(&etc, "settings file"), &etc);
        assert_eq!(w, format!("{} is not a regular file", etc.display()));
        let w = why(check_root_trusted_dir(&f, "settings file"), &f);
        assert_eq!(w, format!("{} is not a directory", f.display()));
        let under = f.join("x");
        let w = why(check_root_trusted(&under, "settings file"), &under);
        assert_eq!(w, format!("{} is not a directory", f.display()));
        let missing = etc.join("missing.toml");
        let w = why(check_root_trusted(&missing, "settings file"), &missing);
        assert!(w.starts_with(&format!("{}: ", missing.display())), "{w}");
        let w = why(
            check_root_trusted(Path::new("etc/conf.toml"), "settings file"),
            Path::new("etc/conf.toml"),
        );
        assert_eq!(w, "not an absolute path");
    }

    #[test]
    fn a_sticky_root_directory_may_be_on_the_way_but_not_at_the_end() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-sticky");
        let etc = t.path().join("etc");
        let f = etc.join("conf.toml");
        chmod(&etc, 0o1777);
        check_root_trusted(&f, "settings file").unwrap();
        let w = why(check_root_trusted_dir(&etc, "settings file"), &etc);
        assert_eq!(
            w,
            format!(
                "{} is writable by group and others (mode 1777)",
                etc.display()
            )
        );
        // Not root's: the sticky bit protects the owner's entries, and the owner is another.
        chown(&etc, Some(OTHER), None).unwrap();
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert_eq!(
            w,
            format!("{} is owned by uid 4242, not root", etc.display())
        );
        // The sticky bit on a file means nothing.
        chown(&etc, Some(0), None).unwrap();
        chmod(&f, 0o1666);
        let w = why(check_root_trusted(&f, "settings file"), &f);
        assert!(
            w.ends_with("is writable by group and others (mode 1666)"),
            "{w}"
        );
    }

    #[test]
    fn symbolic_links_are_followed_only_when_roots_and_to_trusted_places() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-link");
        let top = t.path();
        let f = top.join("etc/conf.toml");
        // A link to the file, absolute and relative, and a link to a directory on the way.
        symlink(&f, top.join("abs.toml")).unwrap();
        check_root_trusted(&top.join("abs.toml"), "settings file").unwrap();
        symlink("etc/conf.toml", top.join("rel.toml")).unwrap();
        check_root_trusted(&top.join("rel.toml"), "settings file").unwrap();
        symlink("etc", top.join("etc-link")).unwrap();
        check_root_trusted(&top.join("etc-link/conf.toml"), "settings file").unwrap();
        // Someone else's link, even to root's file.
        let mine = top.join("mine.toml");
        symlink(&f, &mine).unwrap();
        lchown(&mine, Some(OTHER), None).unwrap();
        let w = why(check_root_trusted(&mine, "settings file"), &mine);
        assert_eq!(
            w,
            format!(
                "{} is a symbolic link owned by uid 4242, not root",
                mine.display()
            )
        );
        // Root's link to a file in a directory others can write: the target's directory is named.
        std::fs::create_dir(top.join("open")).unwrap();
        chmod(&top.join("open"), 0o777);
        std::fs::write(top.join("open/conf.toml"), "").unwrap();
        symlink(top.join("open/conf.toml"), top.join("to-open.toml")).unwrap();
        let p = top.join("to-open.toml");
        let w = why(check_root_trusted(&p, "settings file"), &p);
        assert_eq!(
            w,
            format!(
                "{} is writable by group and others (mode 777)",
                top.join("open").display()
            )
        );
        // `..` after a link goes up from where the link points, as in the kernel: here to `etc`,
        // not back to the top (which has no conf.toml).
        std::fs::create_dir(top.join("etc/sub")).unwrap();
        symlink("etc/sub", top.join("sub-link")).unwrap();
        check_root_trusted(&top.join("sub-link/../conf.toml"), "settings file").unwrap();
        // A chain of MAX_LINKS links is followed; one more is too many.
        symlink("etc/conf.toml", top.join("chain-0")).unwrap();
        for i in 1..=MAX_LINKS {
            symlink(format!("chain-{}", i - 1), top.join(format!("chain-{i}"))).unwrap();
        }
        check_root_trusted(&top.join(format!("chain-{}", MAX_LINKS - 1)), "").unwrap();
        let p = top.join(format!("chain-{MAX_LINKS}"));
        let w = why(check_root_trusted(&p, "settings file"), &p);
        assert_eq!(w, format!("more than {MAX_LINKS} symbolic links"));
        // A loop.
        symlink("loop-b", top.join("loop-a")).unwrap();
        symlink("loop-a", top.join("loop-b")).unwrap();
        let p = top.join("loop-a");
        let w = why(check_root_trusted(&p, "settings file"), &p);
        assert_eq!(w, format!("more than {MAX_LINKS} symbolic links"));
    }

    #[test]
    fn a_spool_directory_not_made_yet_is_judged_by_its_parents() {
        if !root_or_skip() {
            return;
        }
        let t = tree("trust-spool");
        let etc = t.path().join("etc");
        check_root_trusted_dir(&etc.join("spool"), "spool").unwrap();
        check_root_trusted_dir(&etc.join("a/b/spool"), "spool").unwrap();
        chmod(&etc, 0o775);
        let p = etc.join("spool");
        let e = check_root_trusted_dir(&p, "spool").unwrap_err();
        assert_eq!(
            e,
            format!(
                "spool {}: not trusted: {} is writable by group (mode 775)",
                p.display(),
                etc.display()
            )
        );
    }
}
