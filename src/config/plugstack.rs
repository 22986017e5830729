//! plugstack.conf as Slurm reads it (`src/common/plugstack.c`), for finding the line that loads
//! the gpu-tracker plugin and its arguments.
//!
//! Each line is one directive; `#` starts a comment to the end of the line; words are split at
//! blanks. `required PATH [ARGS...]` and `optional PATH [ARGS...]` load a SPANK plugin with its
//! arguments. `include PATTERN` reads every file the glob(3) pattern matches, in sorted order;
//! a relative pattern is taken from the directory of the file that includes it. Any other line
//! is invalid: Slurm logs it and skips it. A missing file reads as an empty one.
//!
//! Pure: parsing text and matching names. Reading the files is `config::discover`'s job.

use std::path::{Path, PathBuf};

/// One directive of plugstack.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    /// `required PATH ARGS...` or `optional PATH ARGS...`: a plugin to load.
    Plugin {
        /// `required` (a failure to load aborts) rather than `optional`.
        required: bool,
        /// The plugin's file, as written (a relative one is looked up in Slurm's PluginDir).
        path: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// `include PATTERN`: more plugstack files.
    Include(String),
}

/// A plugstack file's directives, each with its line number (from 1), and the numbers of the
/// lines Slurm would skip as invalid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugstack {
    /// The directives, in order.
    pub directives: Vec<(usize, Directive)>,
    /// Lines that are neither blank, a comment nor a directive.
    pub invalid: Vec<usize>,
}

/// Parses plugstack.conf text.
pub fn parse_plugstack(text: &str) -> Plugstack {
    let mut out = Plugstack::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
        let Some(kind) = words.next() else {
            continue;
        };
        let Some(path) = words.next() else {
            out.invalid.push(i + 1);
            continue;
        };
        // Slurm compares the keyword case-sensitively.
        let d = match kind {
            "required" | "optional" => Directive::Plugin {
                required: kind == "required",
                path: path.to_string(),
                args: words.map(str::to_string).collect(),
            },
            "include" => Directive::Include(path.to_string()),
            _ => {
                out.invalid.push(i + 1);
                continue;
            }
        };
        out.directives.push((i + 1, d));
    }
    out
}

/// Whether a plugin path names gpu-tracker's plugin: a file named `gpu_tracker.so` or
/// `libgpu_tracker.so` (as cargo builds it), `-` for `_` allowed, with any version after `.so`.
pub fn is_gpu_tracker_plugin(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let name = name.strip_prefix("lib").unwrap_or(name);
    match name.split_once(".so") {
        Some((stem, rest)) => {
            matches!(stem, "gpu_tracker" | "gpu-tracker")
                && (rest.is_empty() || rest.starts_with('.'))
        }
        None => false,
    }
}

/// The pattern an `include` line of `including_file` reads: a relative pattern is taken from
/// that file's directory, as Slurm does.
pub fn include_pattern(including_file: &Path, pattern: &str) -> PathBuf {
    if pattern.starts_with('/') {
        return PathBuf::from(pattern);
    }
    including_file
        .parent()
        .unwrap_or(Path::new("/"))
        .join(pattern)
}

/// Whether one component of a path pattern holds a glob(3) wildcard (`*`, `?`, `[`).
pub fn has_wildcard(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// Whether a file name matches one component of a glob(3) pattern: `*` any run of characters,
/// `?` one, `[abc]`, `[a-z]` and `[!a]` (or `[^a]`) one of a set, `\` takes the next character
/// as it is. As in glob(3), a name starting with `.` is matched only by a pattern starting with
/// a literal `.`.
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches_from(&p, &n)
}

fn matches_from(p: &[char], n: &[char]) -> bool {
    // Iterative, with one backtrack point for the last `*`: linear in practice, never
    // exponential on patterns with many stars.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => set_match(&p[pi..], n[ni]),
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == n[ni]).then_some(2),
            Some(c) => (*c == n[ni]).then_some(1),
            None => None,
        };
        match step {
            Some(len) => {
                pi += len;
                ni += 1;
            }
            None => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Matches `c` against the set at the start of `p` (`[...]`): the set's length in `p` when it
/// matches, `None` when it does not. An unclosed `[` is a literal `[`.
fn set_match(p: &[char], c: char) -> Option<usize> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    while i < p.len() && (first || p[i] != ']') {
        first = false;
        let lo = p[i];
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|h| *h != ']') {
            found |= lo <= c && c <= p[i + 2];
            i += 3;
        } else {
            found |= lo == c;
            i += 1;
        }
    }
    if i >= p.len() {
        return (c == '[').then_some(1);
    }
    (found != negate).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_comments_and_invalid_lines() {
        let text = "# SPANK plugins\n\
                    \n\
                    optional /usr/lib/slurm/other.so x=1 # trailing comment\n\
                    required\tgpu_tracker.so  config=/etc/slurm/gt.toml\n\
                    include plugstack.conf.d/*.conf\n\
                    Optional /x.so\n\
                    include\n\
                    \t   # only a comment\n";
        let p = parse_plugstack(text);
        assert_eq!(
            p.directives,
            vec![
                (
                    3,
                    Directive::Plugin {
                        required: false,
                        path: "/usr/lib/slurm/other.so".into(),
                        args: vec!["x=1".into()],
                    }
                ),
                (
                    4,
                    Directive::Plugin {
                        required: true,
                        path: "gpu_tracker.so".into(),
                        args: vec!["config=/etc/slurm/gt.toml".into()],
                    }
                ),
                (5, Directive::Include("plugstack.conf.d/*.conf".into())),
            ]
        );
        assert_eq!(p.invalid, vec![6, 7]);
        assert_eq!(parse_plugstack(""), Plugstack::default());
    }

    #[test]
    fn the_plugin_is_known_by_its_file_name() {
        for yes in [
            "/usr/lib/x86_64-linux-gnu/slurm/gpu_tracker.so",
            "/opt/gt/target/release/libgpu_tracker.so",
            "gpu-tracker.so",
            "/x/libgpu_tracker.so.1",
        ] {
            assert!(is_gpu_tracker_plugin(yes), "{yes}");
        }
        for no in [
            "/usr/lib/slurm/gpu_tracker_old.so",
            "/gpu_tracker.so/other.so",
            "gpu_tracker",
            "/x/gpu_tracker.sox",
            "/x/libnvidia-ml.so.1",
        ] {
            assert!(!is_gpu_tracker_plugin(no), "{no}");
        }
    }

    #[test]
    fn includes_are_taken_from_the_including_files_directory() {
        let f = Path::new("/etc/slurm/plugstack.conf");
        assert_eq!(
            include_pattern(f, "plugstack.conf.d/*.conf"),
            Path::new("/etc/slurm/plugstack.conf.d/*.conf")
        );
        assert_eq!(include_pattern(f, "/srv/*.conf"), Path::new("/srv/*.conf"));
        assert!(has_wildcard("*.conf") && has_wildcard("a?") && has_wildcard("[ab]"));
        assert!(!has_wildcard("plugstack.conf.d"));
    }

    #[test]
    fn wildcards_match_as_glob_does() {
        for (p, n) in [
            ("*.conf", "gpu-tracker.conf"),
            ("*.conf", "conf.conf"),
            ("*", "x"),
            ("a*b*c", "aXXbYYbc"),
            ("?.conf", "1.conf"),
            ("[0-9]*.conf", "10-gt.conf"),
            ("[!x]*", "y"),
            ("[^x]*", "y"),
            ("[]a]", "]"),
            ("\\*", "*"),
            ("a[", "a["),
            (".*", ".hidden"),
        ] {
            assert!(wildcard_match(p, n), "{p} {n}");
        }
        for (p, n) in [
            ("*.conf", "gpu-tracker.conf.bak"),
            ("*.conf", ".hidden.conf"),
            ("?", "."),
            ("?.conf", "10.conf"),
            ("[0-9]*", "x1"),
            ("[!x]*", "x"),
            ("\\*", "a"),
            ("a*b", "aXXbc"),
        ] {
            assert!(!wildcard_match(p, n), "{p} {n}");
        }
        // Many stars against a long name: no blow-up.
        let name = "a".repeat(200);
        assert!(!wildcard_match(&format!("{}b", "*a".repeat(30)), &name));
    }
}
