//! Parsing Slurm's `gres.conf`: the GPU lines that apply to one node, in the order slurmd
//! numbers them. Pure: text in, facts out; the reader is in `mod.rs`.
//!
//! What slurmd does (read in Slurm 22.05.8, 24.11.5 and 26.05.3; see `slurm/README.md`):
//! - Keys are case-insensitive; `#` starts a comment (`\#` is a literal `#`); a line ending in
//!   an odd number of `\` continues on the next line; values may be quoted.
//! - A line's first key makes its kind: `Name=` lines apply to every node, `NodeName=<hostlist>`
//!   lines only to the nodes listed; a line `AutoDetect=<x>` alone sets the default that a
//!   `NodeName=... AutoDetect=<x>` line overrides for its nodes.
//! - All `Name=` lines come first, then all `NodeName=` lines, each group in file order.
//! - `File=` (or `Files=`) is a hostlist: `/dev/nvidia[0-3]`, `/dev/nvidia[0,2]`, comma lists;
//!   its names are taken in the order written, never sorted.

/// One GPU line of gres.conf that applies to the node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuLine {
    /// `Type=`, when given.
    pub type_name: Option<String>,
    /// The device files of `File=`/`Files=`/`MultipleFiles=`, expanded, in the order written;
    /// empty without one.
    pub files: Vec<String>,
    /// `MultipleFiles=`: the files are ONE GPU's (a MIG instance: the parent GPU's file and its
    /// capability files), not one GPU each.
    pub multiple: bool,
    /// `Count=`, when given.
    pub count: Option<u64>,
}

/// What gres.conf says about the GPUs of one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeGres {
    /// The node's GPU lines, in slurmd's order (`Name=` lines, then `NodeName=` lines).
    pub gpus: Vec<GpuLine>,
    /// The AutoDetect mechanism for the node, lower case (`nvml`, `nvidia`, `off`, ...):
    /// the node's own `NodeName= AutoDetect=` when given, else the file's global one.
    pub autodetect: Option<String>,
    /// `Include` lines seen (not followed).
    pub includes: Vec<String>,
    /// The node's lines name more than [`MAX_NODE_DEVICES`] device files: those past it are
    /// left out, so the GPU order is not known.
    pub too_many_files: bool,
}

/// Most device files taken for one node from all its lines: far more than a node's GPUs and
/// their MIG capability files, far fewer than lines of bounded hostlists add up to.
pub const MAX_NODE_DEVICES: usize = 1024;

impl NodeGres {
    /// Each GPU's device files, in slurmd's order (before any AutoDetect merge): one file a GPU
    /// for `File=`, all of them for a `MultipleFiles=` line.
    pub fn devices(&self) -> Vec<Vec<String>> {
        self.gpus
            .iter()
            .flat_map(|g| {
                if g.multiple {
                    vec![g.files.clone()]
                } else {
                    g.files.iter().map(|f| vec![f.clone()]).collect()
                }
            })
            .collect()
    }

    /// Each GPU's first device file (a MIG instance's parent GPU's), in slurmd's order.
    pub fn files(&self) -> Vec<String> {
        self.devices()
            .into_iter()
            .filter_map(|d| d.into_iter().next())
            .collect()
    }
}

/// Parses gres.conf text for the node `node`.
pub fn parse_gres_conf(text: &str, node: &str) -> NodeGres {
    let mut out = NodeGres::default();
    let (mut name_lines, mut node_lines) = (Vec::new(), Vec::new());
    let (mut global_auto, mut local_auto) = (None, None);
    // Device files still to take for the node, over all its lines.
    let mut budget = MAX_NODE_DEVICES;
    for line in logical_lines(text) {
        let trimmed = line.trim();
        if let Some(file) = include_file(trimmed) {
            out.includes.push(file.to_string());
            continue;
        }
        let pairs = key_values(trimmed);
        let Some((first, first_value)) = pairs.first() else {
            continue;
        };
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        if first.eq_ignore_ascii_case("autodetect") {
            global_auto = Some(first_value.to_ascii_lowercase());
            continue;
        }
        let for_node = first.eq_ignore_ascii_case("nodename");
        if for_node {
            if !expand_hostlist(first_value).iter().any(|n| n == node) {
                continue;
            }
            if let Some(a) = get("autodetect") {
                local_auto = Some(a.to_ascii_lowercase());
            }
        } else if !first.eq_ignore_ascii_case("name") {
            continue;
        }
        if !get("name").is_some_and(|n| n.eq_ignore_ascii_case("gpu")) {
            continue;
        }
        let multiple = get("multiplefiles");
        let mut files = get("file")
            .or_else(|| get("files"))
            .or(multiple)
            .map(|l| expand_at_most(l, budget + 1))
            .unwrap_or_default();
        if files.len() > budget {
            files.truncate(budget);
            out.too_many_files = true;
        }
        budget -= files.len();
        let gpu = GpuLine {
            type_name: get("type").map(str::to_string),
            files,
            multiple: multiple.is_some(),
            count: get("count").and_then(|c| c.parse().ok()),
        };
        if for_node {
            node_lines.push(gpu);
        } else {
            name_lines.push(gpu);
        }
    }
    out.gpus = name_lines.into_iter().chain(node_lines).collect();
    out.autodetect = local_auto.or(global_auto);
    out
}

/// The file of an `include FILE` line, as slurmd reads one (`_parse_include_directive`): the
/// word `include` in any case, a blank, then the file's name up to the next blank. The line is
/// the site's text, any bytes: looked at by `get`, never sliced where a character may not end.
fn include_file(line: &str) -> Option<&str> {
    let word = line.get(..7)?;
    let rest = line.get(7..)?;
    if !word.eq_ignore_ascii_case("include") || !rest.starts_with(|c: char| c.is_ascii_whitespace())
    {
        return None;
    }
    Some(rest.split_ascii_whitespace().next().unwrap_or(""))
}

/// Lines with comments removed and continuations joined.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut acc = String::new();
    for raw in text.lines() {
        let line = strip_comment(raw);
        let trailing = line.len() - line.trim_end().len();
        let body = &line[..line.len() - trailing];
        let slashes = body.len() - body.trim_end_matches('\\').len();
        if slashes % 2 == 1 {
            acc.push_str(&body[..body.len() - 1]);
            continue;
        }
        acc.push_str(&line);
        out.push(std::mem::take(&mut acc));
    }
    if !acc.is_empty() {
        out.push(acc);
    }
    out
}

/// The line up to an unescaped `#`, with `\#` turned into `#`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '\\' if chars.peek() == Some(&'\\') => {
                out.push_str("\\\\");
                chars.next();
            }
            '#' => break,
            _ => out.push(c),
        }
    }
    out
}

/// `key=value` pairs separated by blanks; a value may be quoted.
fn key_values(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            // Not a key=value pair: skip this word.
            let skip = rest.find(char::is_whitespace).unwrap_or(rest.len());
            rest = rest[skip..].trim_start();
            continue;
        }
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"').unwrap_or(q.len());
            (&q[..end], q.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push((key.to_string(), value.to_string()));
        rest = next.trim_start();
    }
    out
}

/// Expands a Slurm hostlist (`n[1-3,7]`, `/dev/nvidia[0-1],/dev/nvidia3`, `a[1-2]b[0-1]`) in
/// the order written. Zero padding follows the range's first number (`n[01-10]`).
///
/// Bounded, whatever the list (it may come from a record a user could have a hand in): at most
/// [`MAX_HOSTLIST_NAMES`] names and [`MAX_HOSTLIST_BYTES`] bytes of them, the first ones in
/// order; each range is cut to [`MAX_RANGE`] + 1 numbers; a name with more than
/// [`MAX_BRACKETS`] brackets is not one Slurm makes and expands to nothing. The work is linear
/// in the list's length plus the names made.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    expand_at_most(list, MAX_HOSTLIST_NAMES)
}

/// [`expand_hostlist`], making at most `max` names (and never more than its bounds).
fn expand_at_most(list: &str, max: usize) -> Vec<String> {
    let mut out = Out {
        names: Vec::new(),
        bytes: 0,
        max: max.min(MAX_HOSTLIST_NAMES),
    };
    for p in split_outside_brackets(list) {
        if !p.is_empty() && !expand_one(&p, &mut out) {
            break;
        }
    }
    out.names
}

/// Most names [`expand_hostlist`] makes (Slurm's largest clusters have some tens of thousands
/// of nodes).
pub const MAX_HOSTLIST_NAMES: usize = 65_536;
/// Most bytes of names [`expand_hostlist`] makes.
pub const MAX_HOSTLIST_BYTES: usize = 4 << 20;
/// Most brackets in one name: Slurm's names have one per dimension, at most five.
pub const MAX_BRACKETS: usize = 8;
/// Most numbers one bracket range may produce, less one: a typo must not eat memory in
/// slurmstepd.
pub const MAX_RANGE: u64 = 65_536;

/// The names made so far, within the bounds.
struct Out {
    names: Vec<String>,
    bytes: usize,
    /// Most names to make.
    max: usize,
}

impl Out {
    /// Adds `name`; false (and nothing added) once a bound is reached.
    fn push(&mut self, name: String) -> bool {
        if self.names.len() >= self.max || self.bytes + name.len() > MAX_HOSTLIST_BYTES {
            return false;
        }
        self.bytes += name.len();
        self.names.push(name);
        true
    }
}

fn split_outside_brackets(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

/// One bracket's numbers: `(first, last, width)` per range, in the order written; parts that
/// are not numbers are skipped.
fn bracket_ranges(inner: &str) -> Vec<(u64, u64, usize)> {
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(|part| {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let (a, b) = (
                lo.trim().parse::<u64>().ok()?,
                hi.trim().parse::<u64>().ok()?,
            );
            Some((a, b.min(a.saturating_add(MAX_RANGE)), lo.trim().len()))
        })
        .collect()
}

/// Expands one name of a hostlist into `out`; false once `out` is full.
fn expand_one(name: &str, out: &mut Out) -> bool {
    // The name as literal text and brackets: `pieces[0] [b0] pieces[1] [b1] ... pieces[n]`.
    let mut pieces = Vec::new();
    let mut brackets = Vec::new();
    let mut rest = name;
    while let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) {
        if close < open {
            break;
        }
        if brackets.len() == MAX_BRACKETS {
            return true;
        }
        pieces.push(&rest[..open]);
        brackets.push(bracket_ranges(&rest[open + 1..close]));
        rest = &rest[close + 1..];
    }
    pieces.push(rest);
    // Odometer over the brackets' numbers, the first bracket turning slowest: the order written.
    // No bracket needs more numbers than names are to be made.
    let max = out.max;
    let numbers: Vec<Vec<(u64, usize)>> = brackets
        .iter()
        .map(|ranges| {
            ranges
                .iter()
                .flat_map(|&(a, b, w)| (a..=b).map(move |n| (n, w)))
                .take(max)
                .collect()
        })
        .collect();
    if numbers.iter().any(Vec::is_empty) {
        return true;
    }
    let mut at = vec![0usize; numbers.len()];
    loop {
        let mut s = String::from(pieces[0]);
        for (k, &i) in at.iter().enumerate() {
            let (n, width) = numbers[k][i];
            s.push_str(&format!("{n:0width$}"));
            s.push_str(pieces[k + 1]);
        }
        if !out.push(s) {
            return false;
        }
        // Next combination; done when every bracket has turned over.
        let mut k = at.len();
        loop {
            if k == 0 {
                return true;
            }
            k -= 1;
            at[k] += 1;
            if at[k] < numbers[k].len() {
                break;
            }
            at[k] = 0;
        }
    }
}

/// Slurm's natural string order (`strnatcmp`): digit runs compare as numbers, so
/// `/dev/nvidia2` sorts before `/dev/nvidia10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let da = trim_zeros(&a[..na]);
                let db = trim_zeros(&b[..nb]);
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|c| **c == b'0').count();
    &d[z.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_in_the_order_written() {
        assert_eq!(
            expand_hostlist("/dev/nvidia[0-2]"),
            ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
        );
        assert_eq!(
            expand_hostlist("/dev/nvidia[3,1]"),
            ["/dev/nvidia3", "/dev/nvidia1"]
        );
        assert_eq!(
            expand_hostlist("/dev/nvidia2,/dev/nvidia[0-1]"),
            ["/dev/nvidia2", "/dev/nvidia0", "/dev/nvidia1"]
        );
        assert_eq!(expand_hostlist("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(
            expand_hostlist("r[1-2]n[0-1]"),
            ["r1n0", "r1n1", "r2n0", "r2n1"]
        );
        assert_eq!(expand_hostlist("gpu01"), ["gpu01"]);
        assert!(expand_hostlist("").is_empty());
    }

    #[test]
    fn hostlists_are_bounded_whatever_they_say() {
        // Found by fuzzing the record reader (a record's `job.node_list`): the product of
        // ranges made billions of names, and one recursion per bracket overflowed the stack.
        let started = std::time::Instant::now();
        let product = expand_hostlist("a[0-65536][0-65536]");
        assert_eq!(product.len(), MAX_HOSTLIST_NAMES);
        assert_eq!(product[0], "a00");
        assert_eq!(product[1], "a01");
        assert_eq!(product[65_536 - 1], "a065535");
        let deep = format!("n{}", "[0]".repeat(20_000));
        assert!(expand_hostlist(&deep).is_empty());
        let five = format!("n{}", "[0-1]".repeat(5));
        assert_eq!(expand_hostlist(&five).len(), 32);
        let long = format!("{}[0-65535]", "x".repeat(1 << 20));
        let names = expand_hostlist(&long);
        assert!(names.iter().map(String::len).sum::<usize>() <= MAX_HOSTLIST_BYTES);
        assert_eq!(names.len(), 3);
        let many = vec!["n[0-65535]"; 1000].join(",");
        assert_eq!(expand_hostlist(&many).len(), MAX_HOSTLIST_NAMES);
        // A range past the bound ends at it; a bracket of no number makes no name.
        let cut = expand_hostlist("n[5-99999999999]");
        assert_eq!(cut.len(), MAX_HOSTLIST_NAMES);
        assert_eq!(cut.last().map(String::as_str), Some("n65540"));
        assert!(expand_hostlist("n[x-y]").is_empty());
        assert_eq!(expand_hostlist("n]0[1"), ["n]0[1"]);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn name_lines_come_before_node_lines_and_other_nodes_are_skipped() {
        let conf = "\
# A comment line
NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia[2-3]   # the node's own
Name=gpu File=/dev/nvidia9
nodename=n[2-4] name=gpu file=/dev/nvidia[0-1]
NodeName=n[1,5] Name=gpu Files=/dev/nvidia[5,4]
Name=mps Count=200 File=/dev/nvidia[0-1]
";
        let n1 = parse_gres_conf(conf, "n1");
        assert_eq!(
            n1.files(),
            [
                "/dev/nvidia9",
                "/dev/nvidia2",
                "/dev/nvidia3",
                "/dev/nvidia5",
                "/dev/nvidia4"
            ]
        );
        assert_eq!(n1.gpus[1].type_name.as_deref(), Some("a100"));
        assert_eq!(n1.autodetect, None);
        let n3 = parse_gres_conf(conf, "n3");
        assert_eq!(n3.files(), ["/dev/nvidia9", "/dev/nvidia0", "/dev/nvidia1"]);
        assert_eq!(parse_gres_conf(conf, "x").files(), ["/dev/nvidia9"]);
    }

    #[test]
    fn a_multiple_files_line_is_one_gpu() {
        let conf = "NodeName=m1 Name=gpu Type=sim File=/dev/nvidia1\n\
            NodeName=m1 Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap[12-13]\n\
            NodeName=m1 Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22\n";
        let g = parse_gres_conf(conf, "m1");
        assert_eq!(
            g.devices(),
            [
                vec!["/dev/nvidia1"],
                vec![
                    "/dev/nvidia0",
                    "/dev/nvidia-caps/nvidia-cap12",
                    "/dev/nvidia-caps/nvidia-cap13"
                ],
                vec![
                    "/dev/nvidia0",
                    "/dev/nvidia-caps/nvidia-cap21",
                    "/dev/nvidia-caps/nvidia-cap22"
                ],
            ]
        );
        assert_eq!(g.files(), ["/dev/nvidia1", "/dev/nvidia0", "/dev/nvidia0"]);
        assert_eq!(g.gpus[1].type_name.as_deref(), Some("1g.10gb"));
    }

    #[test]
    fn autodetect_is_global_unless_the_node_says_otherwise() {
        let conf = "AutoDetect=nvml\nNodeName=n2 AutoDetect=off\nNAME=GPU Type=v100 Count=2\n";
        let n1 = parse_gres_conf(conf, "n1");
        assert_eq!(n1.autodetect.as_deref(), Some("nvml"));
        assert_eq!(
            n1.gpus,
            [GpuLine {
                type_name: Some("v100".into()),
                files: vec![],
                multiple: false,
                count: Some(2)
            }]
        );
        assert_eq!(
            parse_gres_conf(conf, "n2").autodetect.as_deref(),
            Some("off")
        );
        let local = "NodeName=n1 AutoDetect=NVIDIA Name=gpu\n";
        assert_eq!(
            parse_gres_conf(local, "n1").autodetect.as_deref(),
            Some("nvidia")
        );
        assert_eq!(parse_gres_conf(local, "n2").autodetect, None);
    }

    #[test]
    fn continuations_quotes_escapes_and_includes() {
        let conf = "Name=gpu \\\n  File=\"/dev/nvidia[0-1]\"\n\
                    Include /etc/slurm/more.conf\nName=gpu File=/dev/a\\#b # c\n";
        let g = parse_gres_conf(conf, "n1");
        assert_eq!(g.files(), ["/dev/nvidia0", "/dev/nvidia1", "/dev/a#b"]);
        assert_eq!(g.includes, ["/etc/slurm/more.conf"]);
    }

    #[test]
    fn a_multi_byte_character_where_include_would_end_is_no_panic() {
        // Byte 7 falls inside `é` (bytes 6 and 7): slicing the line there panicked, and the
        // plugin then tracked no step on the node.
        let g = parse_gres_conf("Count=é1\nName=gpu File=/dev/nvidia0\n", "n1");
        assert_eq!(g.files(), ["/dev/nvidia0"]);
        assert!(g.includes.is_empty());
        for line in [
            "Includé x",
            "INCLUDE\u{e9}",
            "incl\u{1F600}",
            "é",
            "Include",
        ] {
            parse_gres_conf(line, "n1");
        }
        // As slurmd: `include` then a blank, then the file; anything else is no include.
        let g = parse_gres_conf("includé /a\nINCLUDE\t/b/ç.conf\nIncludeX /c\n", "n1");
        assert_eq!(g.includes, ["/b/ç.conf"]);
    }

    #[test]
    fn a_nodes_device_files_are_bounded_across_lines() {
        // Each line's hostlist is bounded, but lines add up: 1 MiB of such lines made billions
        // of names in slurmstepd. At most MAX_NODE_DEVICES files, and the file says so.
        let started = std::time::Instant::now();
        let conf = "Name=gpu File=/dev/nvidia[0-65535]\n".repeat(100);
        let g = parse_gres_conf(&conf, "n1");
        assert_eq!(g.files().len(), MAX_NODE_DEVICES);
        assert_eq!(g.files()[1000], "/dev/nvidia1000");
        assert!(g.too_many_files);
        let full = "Name=gpu File=a[0-65535]\n".repeat((1 << 20) / 25);
        assert_eq!(parse_gres_conf(&full, "n1").files().len(), MAX_NODE_DEVICES);
        // Billions of names take minutes; a busy 2-core machine (two emulated guests beside)
        // took 1.8 s for the bounded parse, so the bound is 10 s.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        let g = parse_gres_conf("Name=gpu File=/dev/nvidia[0-1023]\n", "n1");
        assert_eq!((g.files().len(), g.too_many_files), (1024, false));
        let g = parse_gres_conf(
            "Name=gpu File=/dev/nvidia[0-1023]\nName=gpu File=/x\n",
            "n1",
        );
        assert!(g.too_many_files);
    }

    #[test]
    fn natural_order_compares_numbers_as_numbers() {
        let mut v = vec![
            "/dev/nvidia10",
            "/dev/nvidia2",
            "/dev/nvidia1",
            "/dev/nvidia02",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            [
                "/dev/nvidia1",
                "/dev/nvidia2",
                "/dev/nvidia02",
                "/dev/nvidia10"
            ]
        );
    }
}
