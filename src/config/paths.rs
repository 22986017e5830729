//! Where the plugin's directories lie against each other: `live_dir` must be apart from
//! `spool_dir` and `mark_dir`.

use std::path::{Path, PathBuf};

use super::Config;

impl Config {
    /// Why `live_dir` cannot be used (live state is then off, tracking stays on): it is
    /// `spool_dir` or `mark_dir`, inside one, or holds one; as written, and with the links of
    /// the part that exists resolved. The plugin writes and removes files in it as root, and
    /// gives it to `live_group`: the spool's records are root's and their users', the mark
    /// sockets every user's.
    pub fn live_dir_conflict(&self) -> Option<String> {
        if self.live_dir.is_empty() {
            return None;
        }
        let live = Path::new(&self.live_dir);
        let others = [
            ("spool_dir", self.spool_dir.as_path()),
            ("mark_dir", Path::new(&self.mark_dir)),
        ];
        for (key, other) in others {
            if other.as_os_str().is_empty() {
                continue;
            }
            let (a, b) = (lexical(live), lexical(other));
            let (a, b) = if a.starts_with(&b) || b.starts_with(&a) {
                (a, b)
            } else {
                (resolved(live), resolved(other))
            };
            let how = if a == b {
                "is"
            } else if a.starts_with(&b) {
                "is inside"
            } else if b.starts_with(&a) {
                "holds"
            } else {
                continue;
            };
            return Some(format!(
                "live_dir {:?} {how} {key} {:?}: it must be a directory of its own, apart from \
                 spool_dir and mark_dir",
                self.live_dir,
                other.display().to_string()
            ));
        }
        None
    }
}

/// `path` with `.` and `..` taken out as words (a trailing `/` too).
pub fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `path` with the links of its longest part that exists resolved (`realpath`), and the rest
/// added as words; as words only when no part of it can be resolved.
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(mut r) = std::fs::canonicalize(at) {
            r.extend(rest.iter().rev());
            return lexical(&r);
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                at = parent;
            }
            _ => return lexical(path),
        }
    }
}
