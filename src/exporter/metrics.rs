//! The running steps' states as OpenMetrics text (pure: states in, text out).
//!
//! Each metric family is written whole, in one place: `# TYPE`, `# UNIT` where a unit applies,
//! `# HELP`, then its samples; a counter's samples end in `_total`; the text ends with `# EOF`.
//! A figure the state does not have (no limit, no SM activity on this GPU) has no sample: never
//! a made-up 0. Samples carry no timestamp, so that a step's series end (Prometheus marks them
//! stale) at the first scrape after its file is gone.
//!
//! Labels: `jobid`, `step`, `user`, `node`, and `gpu` (Slurm's index) and `uuid` on GPU series.
//! Their values are cleaned (control characters replaced, at most [`MAX_LABEL_CHARS`]) and
//! escaped (`\\`, `"`, newline). Per step: [`SERIES_PER_STEP`] series, plus
//! [`SERIES_PER_GPU`] per GPU.

use std::fmt::Write;

use super::read::Skip;
use crate::step::live::{LiveGpu, LiveState};

/// The `Content-Type` of the text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Most characters of a label value.
pub const MAX_LABEL_CHARS: usize = 128;
/// Series of a step, without its GPUs.
pub const SERIES_PER_STEP: usize = 7;
/// Series of each GPU of a step.
pub const SERIES_PER_GPU: usize = 5;

/// The exporter's own figures.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Files skipped since the exporter started, by [`Skip::index`].
    pub skipped: [u64; Skip::ALL.len()],
    /// Whether the live directory was read at this scrape.
    pub dir_readable: bool,
    /// Seconds this scrape took to read and render the steps.
    pub scrape_seconds: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Gauge,
    Counter,
}

/// One metric family: its name (without `_total`), type, unit and help.
struct Family {
    name: &'static str,
    kind: Kind,
    unit: Option<&'static str>,
    help: &'static str,
}

const fn gauge(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Gauge,
        unit,
        help,
    }
}

const fn counter(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Counter,
        unit,
        help,
    }
}

type StepValue = fn(&LiveState) -> Option<Value>;
type GpuValue = fn(&LiveGpu) -> Option<Value>;

/// A sample's value: bytes and counts exactly, the rest as floats.
#[derive(Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) if v.is_nan() => f.write_str("NaN"),
            Value::Float(v) if v.is_infinite() => {
                f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
            }
            // `{:?}` keeps a float short (`1e-7`, `12.5`) and exact.
            Value::Float(v) => write!(f, "{v:?}"),
        }
    }
}

fn int(v: Option<u64>) -> Option<Value> {
    v.map(Value::Int)
}

fn float(v: Option<f64>) -> Option<Value> {
    v.map(Value::Float)
}

fn ratio(percent: Option<f64>) -> Option<Value> {
    percent.map(|p| Value::Float((p / 100.0).clamp(0.0, 1.0)))
}

const STEP_FAMILIES: [(Family, StepValue); SERIES_PER_STEP] = [
    (
        gauge(
            "gpu_tracker_memory_bytes",
            Some("bytes"),
            "Memory in use by the step on the node: its cgroup's charge, page cache included (else its processes' resident sum).",
        ),
        |s| int(s.memory.current_bytes),
    ),
    (
        gauge(
            "gpu_tracker_memory_peak_bytes",
            Some("bytes"),
            "Peak memory of the step on the node so far: its cgroup's counter, page cache included (else the sampled peak).",
        ),
        |s| int(s.memory.peak_bytes),
    ),
    (
        gauge(
            "gpu_tracker_memory_limit_bytes",
            Some("bytes"),
            "Memory limit of the step on the node: its cgroup's, else its job's. No sample without a limit.",
        ),
        |s| int(s.memory.limit_bytes),
    ),
    (
        counter(
            "gpu_tracker_cpu_seconds",
            Some("seconds"),
            "CPU time used by the step's tasks on the node.",
        ),
        |s| float(s.cpu.seconds),
    ),
    (
        gauge(
            "gpu_tracker_cpu_cores_busy",
            None,
            "Cores the step kept busy on the node over the latest sampling interval.",
        ),
        |s| float(s.cpu.cores_busy),
    ),
    (
        gauge(
            "gpu_tracker_cpus_allocated",
            None,
            "CPUs Slurm allocated to the job on the node.",
        ),
        |s| int(s.alloc_cpus.map(u64::from)),
    ),
    (
        gauge(
            "gpu_tracker_step_start_time_seconds",
            Some("seconds"),
            "When tracking of the step began on the node, Unix time.",
        ),
        |s| float(Some(s.started_at)),
    ),
];

const GPU_FAMILIES: [(Family, GpuValue); SERIES_PER_GPU] = [
    (
        gauge(
            "gpu_tracker_gpu_memory_bytes",
            Some("bytes"),
            "GPU memory used by the step's processes.",
        ),
        |g| int(g.memory_used_bytes),
    ),
    (
        gauge(
            "gpu_tracker_gpu_memory_total_bytes",
            Some("bytes"),
            "Memory size of the GPU (or MIG instance).",
        ),
        |g| int(Some(g.memory_total_bytes)),
    ),
    (
        gauge(
            "gpu_tracker_gpu_utilization_ratio",
            Some("ratio"),
            "Share of the driver's latest sample period in which a kernel ran on the GPU (NVML utilization), 0 to 1.",
        ),
        |g| ratio(g.utilization_percent),
    ),
    (
        gauge(
            "gpu_tracker_gpu_sm_active_ratio",
            Some("ratio"),
            "Share of the GPU's SMs that kernels kept busy (GPM, Hopper and newer), 0 to 1; only where measured.",
        ),
        |g| ratio(g.sm_active_percent),
    ),
    (
        counter(
            "gpu_tracker_gpu_energy_joules",
            Some("joules"),
            "Energy the GPU used since the step's first reading of it.",
        ),
        |g| float(g.energy_joules),
    ),
];

const STEPS: Family = gauge(
    "gpu_tracker_exporter_steps",
    None,
    "Running steps exported at this scrape.",
);
const SKIPPED: Family = counter(
    "gpu_tracker_exporter_state_files_skipped",
    None,
    "State files not exported, by reason, since the exporter started.",
);
const DIR_READABLE: Family = gauge(
    "gpu_tracker_exporter_live_dir_readable",
    None,
    "1 when the live directory was read at this scrape; 0 when it is missing or refused.",
);
const DURATION: Family = gauge(
    "gpu_tracker_exporter_scrape_duration_seconds",
    Some("seconds"),
    "Time this scrape took to read the state files and render them.",
);

/// A label value as it may appear between quotes: printable, bounded, escaped.
pub fn label_value(v: &str) -> String {
    let clean = crate::text::clean_text(v, MAX_LABEL_CHARS);
    let mut out = String::with_capacity(clean.len());
    for c in clean.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn head(out: &mut String, f: &Family) {
    let kind = match f.kind {
        Kind::Gauge => "gauge",
        Kind::Counter => "counter",
    };
    let _ = writeln!(out, "# TYPE {} {kind}", f.name);
    if let Some(u) = f.unit {
        let _ = writeln!(out, "# UNIT {} {u}", f.name);
    }
    let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
}

fn sample(out: &mut String, f: &Family, labels: &str, v: Value) {
    let suffix = if f.kind == Kind::Counter {
        "_total"
    } else {
        ""
    };
    if labels.is_empty() {
        let _ = writeln!(out, "{}{suffix} {v}", f.name);
    } else {
        let _ = writeln!(out, "{}{suffix}{{{labels}}} {v}", f.name);
    }
}

/// The labels of a step's series.
fn step_labels(s: &LiveState) -> String {
    let user = if s.user.is_empty() {
        s.uid.to_string()
    } else {
        label_value(&s.user)
    };
    format!(
        "jobid=\"{}\",step=\"{}\",user=\"{user}\",node=\"{}\"",
        s.job_id,
        label_value(&s.step),
        label_value(&s.node)
    )
}

/// The running steps' metrics, without the exporter's own (see [`render_health`]).
pub fn render_steps(states: &[LiveState]) -> String {
    let mut out = String::with_capacity(1024 + states.len() * 2048);
    let labels: Vec<String> = states.iter().map(step_labels).collect();
    for (f, value) in &STEP_FAMILIES {
        head(&mut out, f);
        for (s, l) in states.iter().zip(&labels) {
            if let Some(v) = value(s) {
                sample(&mut out, f, l, v);
            }
        }
    }
    let gpu_labels: Vec<Vec<String>> = states
        .iter()
        .zip(&labels)
        .map(|(s, l)| {
            s.gpus
                .iter()
                .map(|g| format!("{l},gpu=\"{}\",uuid=\"{}\"", g.index, label_value(&g.uuid)))
                .collect()
        })
        .collect();
    for (f, value) in &GPU_FAMILIES {
        head(&mut out, f);
        for (s, ls) in states.iter().zip(&gpu_labels) {
            for (g, l) in s.gpus.iter().zip(ls) {
                if let Some(v) = value(g) {
                    sample(&mut out, f, l, v);
                }
            }
        }
    }
    out
}

/// The exporter's own metrics for `steps` exported, and the end of the text.
pub fn render_health(out: &mut String, steps: usize, h: &Health) {
    head(out, &STEPS);
    sample(out, &STEPS, "", Value::Int(steps as u64));
    head(out, &SKIPPED);
    for k in Skip::ALL {
        let l = format!("reason=\"{}\"", k.label());
        sample(out, &SKIPPED, &l, Value::Int(h.skipped[k.index()]));
    }
    head(out, &DIR_READABLE);
    sample(
        out,
        &DIR_READABLE,
        "",
        Value::Int(u64::from(h.dir_readable)),
    );
    head(out, &DURATION);
    sample(out, &DURATION, "", Value::Float(h.scrape_seconds));
    out.push_str("# EOF\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::testing::state;

    fn render(states: &[LiveState]) -> String {
        let mut out = render_steps(states);
        render_health(
            &mut out,
            states.len(),
            &Health {
                dir_readable: true,
                scrape_seconds: 0.00125,
                ..Health::default()
            },
        );
        out
    }

    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .collect()
    }

    #[test]
    fn steps_and_gpus_become_typed_families_with_units_and_an_end() {
        let mut s = state(42, "batch", 100.0);
        s.memory.current_bytes = Some(1 << 30);
        s.memory.peak_bytes = Some(3 << 30);
        s.cpu.seconds = Some(12.5);
        s.cpu.cores_busy = Some(1.75);
        s.gpus = vec![
            LiveGpu {
                index: 1,
                uuid: "GPU-a".into(),
                memory_used_bytes: Some(5 << 30),
                memory_total_bytes: 80 << 30,
                utilization_percent: Some(97.0),
                sm_active_percent: Some(41.5),
                energy_joules: Some(1234.5),
            },
            LiveGpu {
                index: 3,
                uuid: "GPU-b".into(),
                memory_total_bytes: 80 << 30,
                utilization_percent: Some(0.0),
                ..LiveGpu::default()
            },
        ];
        let t = render(&[s]);
        let l = "jobid=\"42\",step=\"batch\",user=\"alice\",node=\"n1\"";
        assert!(t.ends_with("# EOF\n"), "{t}");
        assert_eq!(t.matches("# EOF").count(), 1);
        assert!(t.contains("# TYPE gpu_tracker_memory_bytes gauge\n# UNIT gpu_tracker_memory_bytes bytes\n# HELP gpu_tracker_memory_bytes "));
        assert_eq!(
            samples(&t, "gpu_tracker_memory_bytes"),
            [format!("gpu_tracker_memory_bytes{{{l}}} 1073741824")]
        );
        // Counters: typed without, sampled with `_total`.
        assert!(t.contains(
            "# TYPE gpu_tracker_cpu_seconds counter\n# UNIT gpu_tracker_cpu_seconds seconds\n"
        ));
        assert_eq!(
            samples(&t, "gpu_tracker_cpu_seconds_total"),
            [format!("gpu_tracker_cpu_seconds_total{{{l}}} 12.5")]
        );
        assert_eq!(samples(&t, "gpu_tracker_cpu_seconds"), Vec::<&str>::new());
        assert!(t.contains(&format!("gpu_tracker_cpu_cores_busy{{{l}}} 1.75\n")));
        assert!(t.contains(&format!("gpu_tracker_cpus_allocated{{{l}}} 4\n")));
        assert!(t.contains(&format!(
            "gpu_tracker_step_start_time_seconds{{{l}}} 40.0\n"
        )));
        // No limit, no limit sample.
        assert!(samples(&t, "gpu_tracker_memory_limit_bytes").is_empty());
        assert!(t.contains("# TYPE gpu_tracker_memory_limit_bytes gauge\n"));
        // GPUs: ratios from percents; SM activity and energy only where measured.
        let g1 = format!("{l},gpu=\"1\",uuid=\"GPU-a\"");
        let g3 = format!("{l},gpu=\"3\",uuid=\"GPU-b\"");
        assert_eq!(
            samples(&t, "gpu_tracker_gpu_utilization_ratio"),
            [
                format!("gpu_tracker_gpu_utilization_ratio{{{g1}}} 0.97"),
                format!("gpu_tracker_gpu_utilization_ratio{{{g3}}} 0.0")
            ]
        );
        assert_eq!(
            samples(&t, "gpu_tracker_gpu_sm_active_ratio"),
            [format!("gpu_tracker_gpu_sm_active_ratio{{{g1}}} 0.415")]
        );
        assert_eq!(
            samples(&t, "gpu_tracker_gpu_energy_joules_total"),
            [format!(
                "gpu_tracker_gpu_energy_joules_total{{{g1}}} 1234.5"
            )]
        );
        assert!(samples(&t, "gpu_tracker_gpu_memory_bytes")[0].ends_with(" 5368709120"));
        assert_eq!(samples(&t, "gpu_tracker_gpu_memory_bytes").len(), 1);
        assert_eq!(samples(&t, "gpu_tracker_gpu_memory_total_bytes").len(), 2);
        // Health.
        assert!(t.contains("\ngpu_tracker_exporter_steps 1\n"));
        assert!(
            t.contains("gpu_tracker_exporter_state_files_skipped_total{reason=\"bad_json\"} 0\n")
        );
        assert!(t.contains("\ngpu_tracker_exporter_scrape_duration_seconds 0.00125\n"));
        assert!(t.contains("\ngpu_tracker_exporter_live_dir_readable 1\n"));
        // Every family is named gpu_tracker_*, declared once, its unit a suffix of its name.
        let mut typed = Vec::new();
        for line in t.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(name.starts_with("gpu_tracker_"), "{line}");
                assert!(!typed.contains(&name), "{name} declared twice");
                typed.push(name);
            } else if let Some(rest) = line.strip_prefix("# UNIT ") {
                let (name, unit) = rest.split_once(' ').unwrap();
                assert!(name.ends_with(&format!("_{unit}")), "{line}");
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = typed.last().unwrap();
                assert!(
                    name == *family || name == format!("{family}_total"),
                    "{line}"
                );
            }
        }
        assert_eq!(typed.len(), SERIES_PER_STEP + SERIES_PER_GPU + 4);
    }

    #[test]
    fn label_values_are_escaped_cleaned_and_bounded() {
        assert_eq!(label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label_value("x\ny\u{1b}[31m"), "x?y?[31m");
        assert_eq!(
            label_value(&"u".repeat(500)).chars().count(),
            MAX_LABEL_CHARS + 1
        );
        let mut s = state(1, "0", 0.0);
        s.user = String::new();
        s.node = "n\"1".into();
        let t = render(&[s]);
        assert!(t.contains("user=\"1001\",node=\"n\\\"1\""), "{t}");
    }

    #[test]
    fn no_step_is_still_a_whole_exposition() {
        let t = render(&[]);
        assert!(t.ends_with("# EOF\n"));
        assert!(!t.lines().any(|l| l.starts_with("gpu_tracker_memory_bytes")));
        assert!(t.contains("\ngpu_tracker_exporter_steps 0\n"));
        assert_eq!(
            t.matches("gpu_tracker_exporter_state_files_skipped_total{")
                .count(),
            Skip::ALL.len()
        );
    }
}
