//! What the exporter serves to whom: OpenMetrics 1.0.0 to a client that asks for it
//! (Prometheus does), the classic text format 0.0.4 to any other, as the official client
//! libraries negotiate; each checked by a strict reading here, the text format by `promtool
//! check metrics` too. And request targets in absolute form, as RFC 9112 says a server must
//! take them.

use std::collections::HashSet;
use std::process::Command;

use super::{PROMETHEUS_ACCEPT, Server, live_dir, put, state};
use crate::common::promtool_check;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric or label name of the exposition formats.
fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// The labels of a sample (`a="x",b="y"`), unescaped; an error on any fault.
fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").ok_or(format!("label in {s:?}"))?;
        if !is_name(name) || out.iter().any(|(n, _)| n == name) {
            return Err(format!("label name {name:?} in {s:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("escape {other:?} in {s:?}")),
                },
                Some((_, '\n')) | None => return Err(format!("unended value in {s:?}")),
                Some((_, c)) => value.push(c),
            }
        };
        out.push((name.to_string(), value));
        rest = &after[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.is_empty() {
            return Err(format!("after a label in {s:?}"));
        }
    }
    Ok(out)
}

/// A strict reading of OpenMetrics 1.0.0 text as this exporter writes it: families whole and
/// declared once, `# TYPE`, then `# UNIT` (the name ends in `_<unit>`), then `# HELP`, before
/// their samples; a counter's family named without `_total` and its samples with; every series
/// once; well-formed labels and values; `# EOF` at the end and nowhere else. Returns the
/// families' names.
fn check_openmetrics(text: &str) -> Result<Vec<String>, String> {
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or("does not end with # EOF")?;
    let mut families: Vec<String> = Vec::new();
    let mut kind = String::new();
    // What the current family has declared so far: 0 TYPE, 1 UNIT, 2 HELP, 3 samples.
    let mut stage = 3;
    let mut series = HashSet::new();
    for line in body.lines() {
        let family = families.last().cloned().unwrap_or_default();
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, k) = rest.split_once(' ').ok_or(line)?;
            if !is_name(name) || families.iter().any(|f| f == name) {
                return Err(format!("family declared twice or badly named: {line}"));
            }
            if !["gauge", "counter"].contains(&k) {
                return Err(format!("type: {line}"));
            }
            if k == "counter" && name.ends_with("_total") {
                return Err(format!("a counter family named with _total: {line}"));
            }
            families.push(name.into());
            kind = k.into();
            stage = 0;
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let (name, unit) = rest.split_once(' ').ok_or(line)?;
            if name != family || stage != 0 || !name.ends_with(&format!("_{unit}")) {
                return Err(format!(
                    "UNIT out of place or not the name's suffix: {line}"
                ));
            }
            stage = 1;
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').ok_or(line)?;
            if name != family || stage > 1 || help.is_empty() {
                return Err(format!("HELP out of place: {line}"));
            }
            stage = 2;
        } else if line.starts_with('#') || line.is_empty() {
            return Err(format!("not an OpenMetrics line: {line:?}"));
        } else {
            if stage < 2 {
                return Err(format!("a sample before its family's HELP: {line}"));
            }
            stage = 3;
            let (series_id, value) = line.rsplit_once(' ').ok_or(line)?;
            let (name, labels) = match series_id.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}').ok_or(line)?),
                None => (series_id, ""),
            };
            let expected = if kind == "counter" {
                format!("{family}_total")
            } else {
                family.clone()
            };
            if name != expected {
                return Err(format!(
                    "sample of {name}, family {family} ({kind}): {line}"
                ));
            }
            let v: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().map_err(|_| format!("value: {line}"))?,
            };
            if kind == "counter" && (v.is_nan() || v < 0.0) {
                return Err(format!("a counter below 0: {line}"));
            }
            let mut labels = parse_labels(labels)?;
            labels.sort();
            if !series.insert((name.to_string(), labels)) {
                return Err(format!("series twice: {line}"));
            }
        }
    }
    Ok(families)
}

/// A live directory with two steps, a GPU each, and a user name that needs escaping.
fn two_steps(tag: &str) -> (super::common::TempDir, Server) {
    let t = live_dir(tag);
    let dir = t.join("live");
    put(&dir, &state(21, "batch", 1));
    let mut odd = state(22, "0", 2);
    odd.user = "o\"brien\\x".into();
    put(&dir, &odd);
    let s = Server::start(&dir);
    (t, s)
}

fn content_type(head: &str) -> &str {
    head.lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or_default()
}

#[test]
fn prometheus_gets_openmetrics_and_other_clients_the_text_format_promtool_accepts() {
    let (_t, s) = two_steps("exporter-negotiate");
    // Prometheus asks for OpenMetrics first.
    let (status, head, om) = s.ask(&format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n"
    ));
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(content_type(&head), OPENMETRICS, "{head}");
    assert!(head.contains("\r\nVary: Accept\r\n"), "{head}");
    let families = check_openmetrics(&om).unwrap_or_else(|e| panic!("{e}\n{om}"));
    assert!(families.iter().any(|f| f == "gpu_tracker_cpu_seconds"));
    // The steps' pressure stall counters are among what the strict reading took.
    assert!(om.contains("\ngpu_tracker_step_pressure_stall_seconds_total{jobid=\"21\""));
    assert!(
        om.contains("# UNIT gpu_tracker_cpu_seconds seconds\n"),
        "{om}"
    );
    // A client that asks for nothing (curl, a collector), or for the text format, gets it.
    for accept in ["", "Accept: text/plain\r\n", "Accept: */*\r\n"] {
        let (status, head, text) = s.ask(&format!("GET /metrics HTTP/1.1\r\n{accept}\r\n"));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(content_type(&head), TEXT, "{accept:?}: {head}");
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(text.contains(
            "# HELP gpu_tracker_cpu_seconds_total CPU time used by the step's tasks on the node.\n\
             # TYPE gpu_tracker_cpu_seconds_total counter\n"
        ));
        let (ok, said) = promtool_check(&text);
        assert!(ok, "promtool check metrics: {said}\n{text}");
        // The same series as the OpenMetrics text, line for line.
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
                .collect()
        };
        assert_eq!(samples(&text), samples(&om));
    }
    // As the client libraries choose: the first by q (then the more specific) of those known.
    for (accept, want) in [
        ("application/openmetrics-text", OPENMETRICS),
        ("application/openmetrics-text; version=1.0.0", OPENMETRICS),
        ("application/openmetrics-text;version=0.0.1", OPENMETRICS),
        (
            "text/plain;q=0.5, application/openmetrics-text",
            OPENMETRICS,
        ),
        (
            "application/openmetrics-text;q=0.2,text/plain;version=0.0.4",
            TEXT,
        ),
        ("application/openmetrics-text;version=2.0.0", TEXT),
        ("application/openmetrics-text;q=0", TEXT),
        ("application/json", TEXT),
        ("*/*;q=0.1,Application/OpenMetrics-Text", OPENMETRICS),
    ] {
        let (_, head, body) = s.ask(&format!(
            "GET /metrics HTTP/1.1\r\nAccept: {accept}\r\n\r\n"
        ));
        assert_eq!(content_type(&head), want, "{accept}");
        assert_eq!(body.ends_with("# EOF\n"), want == OPENMETRICS, "{accept}");
    }
    // `HEAD` says the same type, with no body.
    let (_, head, body) = s.ask(&format!(
        "HEAD /metrics HTTP/1.1\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n"
    ));
    assert_eq!(content_type(&head), OPENMETRICS);
    assert!(body.is_empty());
}

#[test]
fn once_prints_the_text_format_or_openmetrics() {
    let t = live_dir("exporter-once-format");
    let dir = t.join("live");
    put(&dir, &state(31, "0", 1));
    let once = |extra: &[&str]| {
        let out = Command::new(super::exporter())
            .arg("--once")
            .arg("--live-dir")
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = once(&[]);
    let (ok, said) = promtool_check(&text);
    assert!(ok, "{said}\n{text}");
    let om = once(&["--format", "openmetrics"]);
    check_openmetrics(&om).unwrap_or_else(|e| panic!("{e}\n{om}"));
    // The same but for the time the scrape took.
    let timeless = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("gpu_tracker_exporter_scrape_duration_seconds "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(timeless(&once(&["--format", "text"])), timeless(&text));
}

#[test]
fn a_target_in_absolute_form_is_answered_as_its_path() {
    let (_t, s) = two_steps("exporter-absolute");
    let a = &s.addr;
    let (status, _, body) = s.ask(&format!(
        "GET http://{a}/metrics HTTP/1.1\r\nHost: {a}\r\n\r\n"
    ));
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(body.contains("gpu_tracker_exporter_steps 2\n"), "{body}");
    let (status, _, _) = s.ask(&format!("GET HTTP://{a}/metrics?x=1 HTTP/1.1\r\n\r\n"));
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (status, _, body) = s.ask(&format!("GET http://{a} HTTP/1.1\r\n\r\n"));
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("href=\"/metrics\""), "{body}");
    assert_eq!(
        s.ask(&format!("GET http://{a}/nope HTTP/1.1\r\n\r\n")).0,
        "HTTP/1.1 404 Not Found"
    );
    // Not a URI of this scheme, or no authority: a bad request still.
    for bad in ["ftp://x/metrics", "http:/metrics", "http://"] {
        assert_eq!(
            s.ask(&format!("GET {bad} HTTP/1.1\r\n\r\n")).0,
            "HTTP/1.1 400 Bad Request",
            "{bad}"
        );
    }
}

#[test]
fn jobstats_names_are_served_beside_ours_in_both_formats() {
    let t = live_dir("exporter-jobstats");
    let dir = t.join("live");
    put(&dir, &state(41, "batch", 2));
    put(&dir, &state(41, "0", 1));
    let once = |extra: &[&str]| {
        let out = Command::new(super::exporter())
            .args(["--once", "--jobstats", "--live-dir"])
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = once(&[]);
    // promtool's lint would have `nvidia_gpu_jobId` and `nvidia_gpu_jobUid` in snake case:
    // they are jobstats' names, which its queries use. Everything else passes as it is.
    if let Err(said) = crate::common::promtool_accepts_jobstats(&text) {
        panic!("promtool check metrics: {said}\n{text}");
    }
    let om = once(&["--format", "openmetrics"]);
    let families = check_openmetrics(&om).unwrap_or_else(|e| panic!("{e}\n{om}"));
    for f in [
        "cgroup_cpu_total_seconds",
        "cgroup_memory_rss_bytes",
        "cgroup_memory_total_bytes",
        "cgroup_cpus",
        "nvidia_gpu_duty_cycle",
        "nvidia_gpu_memory_used_bytes",
        "nvidia_gpu_memory_total_bytes",
        "nvidia_gpu_jobId",
        "gpu_tracker_cpu_seconds",
    ] {
        assert!(families.iter().any(|x| x == f), "{f}: {families:?}");
    }
    // One series per job (its two steps added up), labelled as jobstats' queries select.
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("cgroup_memory_rss_bytes{"))
        .collect();
    assert_eq!(
        lines,
        ["cgroup_memory_rss_bytes{cluster=\"c1\",jobid=\"41\"} 2147483648"],
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l
                .starts_with("nvidia_gpu_duty_cycle{cluster=\"c1\",jobid=\"41\",minor_number=\""))
            .count(),
        2,
        "both GPUs once: {text}"
    );
    // Without --jobstats, none of them.
    let out = Command::new(super::exporter())
        .args(["--once", "--live-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&out.stdout);
    assert!(
        !ours.contains("\ncgroup_") && !ours.contains("nvidia_gpu_"),
        "{ours}"
    );
}
