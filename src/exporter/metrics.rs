//! The running steps' states as exposition text (pure: states in, text out), in one of two
//! formats ([`Format`]): OpenMetrics 1.0.0, which Prometheus asks for, or the classic text
//! format 0.0.4, which every other reader takes (`promtool check metrics` among them).
//!
//! Each metric family is written whole, in one place, its metadata before its samples. In
//! OpenMetrics: `# TYPE`, `# UNIT` where a unit applies, `# HELP`, the family named without
//! `_total` and a counter's samples with it; the text ends with `# EOF`. In the text format:
//! `# HELP` and `# TYPE` naming the family as its samples are named (a counter's with
//! `_total`), no unit line, no end line. A figure the state does not have (no limit, no SM
//! activity on this GPU) has no sample: never a made-up 0. Samples carry no timestamp, so that
//! a step's series end (Prometheus marks them stale) at the first scrape after its file is gone.
//!
//! Labels: `jobid`, `step`, `user`, `node`, `cluster`, and `gpu` (Slurm's index), `uuid` and
//! `vendor` (`nvidia`, `amd`) on GPU series; `resource` (`cpu`, `memory`, `io`) and `kind`
//! (`some`, `full`) on pressure stall series, and `reason` on a step's pressure that is not
//! available. Their values are cleaned (control characters replaced, at most
//! [`MAX_LABEL_CHARS`]) and escaped (`\\`, `"`, newline); `resource`, `kind` and `reason` take
//! only this build's own words. Per step: [`SERIES_PER_STEP`] series, at most
//! [`PRESSURE_SERIES_PER_STEP`] of pressure, plus [`SERIES_PER_GPU`] per GPU.

use std::fmt::Write;

use super::families::{
    DIR_ERRORS, DIR_READABLE, DURATION, Family, GPU_FAMILIES, Kind, PRESSURE_AVAILABLE,
    PRESSURE_STALL, SKIPPED, STEP_FAMILIES, STEPS, Value, pressure_available, stall_samples,
};
use super::read::{DirError, Skip};
use crate::step::live::LiveState;

/// Most characters of a label value.
pub const MAX_LABEL_CHARS: usize = 128;
pub use super::families::{PRESSURE_SERIES_PER_STEP, SERIES_PER_GPU, SERIES_PER_STEP};

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
    /// Prometheus's classic text format, version 0.0.4.
    Text,
}

impl Format {
    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The exporter's own figures.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Files skipped since the exporter started, by [`Skip::index`].
    pub skipped: [u64; Skip::ALL.len()],
    /// Scrapes that did not read the directory whole since the exporter started, by
    /// [`DirError::index`].
    pub dir_errors: [u64; DirError::ALL.len()],
    /// Whether the live directory was read whole at this scrape.
    pub dir_readable: bool,
    /// Seconds this scrape took to read and render the steps.
    pub scrape_seconds: f64,
}

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

/// The name a family's samples have: a counter's end in `_total`.
fn sample_name(f: &Family) -> String {
    match f.kind {
        Kind::Counter => format!("{}_total", f.name),
        Kind::Gauge => f.name.to_string(),
    }
}

/// A family's metadata lines, as `format` has them.
fn head(out: &mut String, f: &Family, format: Format) {
    let kind = match f.kind {
        Kind::Gauge => "gauge",
        Kind::Counter => "counter",
    };
    match format {
        Format::OpenMetrics => {
            let _ = writeln!(out, "# TYPE {} {kind}", f.name);
            if let Some(u) = f.unit {
                let _ = writeln!(out, "# UNIT {} {u}", f.name);
            }
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        }
        Format::Text => {
            let name = sample_name(f);
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
        }
    }
}

fn sample(out: &mut String, f: &Family, labels: &str, v: Value) {
    let name = sample_name(f);
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {v}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
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
        "jobid=\"{}\",step=\"{}\",user=\"{user}\",node=\"{}\",cluster=\"{}\"",
        s.job_id,
        label_value(&s.step),
        label_value(&s.node),
        label_value(&s.cluster)
    )
}

/// The running steps' metrics in `format`, without the exporter's own (see [`render_health`]).
pub fn render_steps(states: &[LiveState], format: Format) -> String {
    // About what it takes with labels of a real site's length (docs/EXPORTER.md, "Memory"),
    // so that it seldom grows: a growth may copy it, holding it twice for a moment.
    let size: usize = states.iter().map(|s| 2048 + s.gpus.len() * 1024).sum();
    let mut out = String::with_capacity(4096 + size);
    let labels: Vec<String> = states.iter().map(step_labels).collect();
    for (f, value) in &STEP_FAMILIES {
        head(&mut out, f, format);
        for (s, l) in states.iter().zip(&labels) {
            if let Some(v) = value(s) {
                sample(&mut out, f, l, v);
            }
        }
    }
    head(&mut out, &PRESSURE_STALL, format);
    for (s, l) in states.iter().zip(&labels) {
        for (resource, kind, v) in stall_samples(s) {
            let l = format!("{l},resource=\"{resource}\",kind=\"{kind}\"");
            sample(&mut out, &PRESSURE_STALL, &l, v);
        }
    }
    head(&mut out, &PRESSURE_AVAILABLE, format);
    for (s, l) in states.iter().zip(&labels) {
        match pressure_available(s) {
            Some(Ok(())) => sample(&mut out, &PRESSURE_AVAILABLE, l, Value::Int(1)),
            Some(Err(why)) => {
                let l = format!("{l},reason=\"{}\"", why.as_str());
                sample(&mut out, &PRESSURE_AVAILABLE, &l, Value::Int(0));
            }
            None => {}
        }
    }
    let gpu_labels: Vec<Vec<String>> = states
        .iter()
        .zip(&labels)
        .map(|(s, l)| {
            s.gpus
                .iter()
                .map(|g| {
                    format!(
                        "{l},gpu=\"{}\",uuid=\"{}\",vendor=\"{}\"",
                        g.index,
                        label_value(&g.uuid),
                        g.vendor.as_str()
                    )
                })
                .collect()
        })
        .collect();
    for (f, value) in &GPU_FAMILIES {
        head(&mut out, f, format);
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
pub fn render_health(out: &mut String, steps: usize, h: &Health, format: Format) {
    head(out, &STEPS, format);
    sample(out, &STEPS, "", Value::Int(steps as u64));
    head(out, &SKIPPED, format);
    for k in Skip::ALL {
        let l = format!("reason=\"{}\"", k.label());
        sample(out, &SKIPPED, &l, Value::Int(h.skipped[k.index()]));
    }
    head(out, &DIR_READABLE, format);
    sample(
        out,
        &DIR_READABLE,
        "",
        Value::Int(u64::from(h.dir_readable)),
    );
    head(out, &DIR_ERRORS, format);
    for k in DirError::ALL {
        let l = format!("reason=\"{}\"", k.label());
        sample(out, &DIR_ERRORS, &l, Value::Int(h.dir_errors[k.index()]));
    }
    head(out, &DURATION, format);
    sample(out, &DURATION, "", Value::Float(h.scrape_seconds));
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::testing::state;
    use crate::step::live::LiveGpu;

    fn render_as(states: &[LiveState], format: Format) -> String {
        let mut out = render_steps(states, format);
        render_health(
            &mut out,
            states.len(),
            &Health {
                dir_readable: true,
                scrape_seconds: 0.00125,
                ..Health::default()
            },
            format,
        );
        out
    }

    fn render(states: &[LiveState]) -> String {
        render_as(states, Format::OpenMetrics)
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
                vendor: crate::gpu::Vendor::Nvidia,
                index: 1,
                uuid: "GPU-a".into(),
                memory_used_bytes: Some(5 << 30),
                memory_total_bytes: 80 << 30,
                utilization_percent: Some(97.0),
                sm_active_percent: Some(41.5),
                cu_occupancy_percent: None,
                energy_joules: Some(1234.5),
                power_watts: Some(250.0),
                temperature_celsius: Some(61),
            },
            LiveGpu {
                vendor: crate::gpu::Vendor::Amd,
                index: 3,
                uuid: "GPU-b".into(),
                memory_total_bytes: 80 << 30,
                utilization_percent: Some(0.0),
                cu_occupancy_percent: Some(12.5),
                ..LiveGpu::default()
            },
        ];
        let t = render(&[s]);
        let l = "jobid=\"42\",step=\"batch\",user=\"alice\",node=\"n1\",cluster=\"c1\"";
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
        let g1 = format!("{l},gpu=\"1\",uuid=\"GPU-a\",vendor=\"nvidia\"");
        let g3 = format!("{l},gpu=\"3\",uuid=\"GPU-b\",vendor=\"amd\"");
        assert_eq!(
            samples(&t, "gpu_tracker_gpu_cu_occupancy_ratio"),
            [format!("gpu_tracker_gpu_cu_occupancy_ratio{{{g3}}} 0.125")]
        );
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
        // The step's, its pressure's two, its GPUs', the exporter's own.
        assert_eq!(typed.len(), SERIES_PER_STEP + 2 + SERIES_PER_GPU + 5);
    }

    #[test]
    fn the_text_format_names_counters_with_total_and_has_no_units_nor_end() {
        let mut s = state(42, "batch", 100.0);
        s.cpu.seconds = Some(12.5);
        s.gpus = vec![LiveGpu {
            index: 0,
            uuid: "GPU-a".into(),
            energy_joules: Some(7.0),
            ..LiveGpu::default()
        }];
        let t = render_as(&[s.clone()], Format::Text);
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
        assert!(t.contains(
            "# HELP gpu_tracker_cpu_seconds_total CPU time used by the step's tasks on the node.\n\
             # TYPE gpu_tracker_cpu_seconds_total counter\n\
             gpu_tracker_cpu_seconds_total{"
        ), "{t}");
        assert!(t.contains("# TYPE gpu_tracker_gpu_energy_joules_total counter\n"));
        assert!(t.contains("# TYPE gpu_tracker_exporter_state_files_skipped_total counter\n"));
        assert!(t.contains("# HELP gpu_tracker_memory_bytes Memory in use"));
        assert!(t.contains("# TYPE gpu_tracker_memory_bytes gauge\n"));
        // Every sample's name is declared by its HELP and TYPE lines just before.
        let mut declared = ("", "");
        for line in t.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                declared.0 = rest.split(' ').next().unwrap();
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.1 = rest.split(' ').next().unwrap();
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!((name, name), declared, "{line}");
            }
        }
        // The same samples as OpenMetrics.
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(samples(&t), samples(&render(&[s])));
        assert_eq!(
            Format::Text.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(
            Format::OpenMetrics.content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
    }

    #[test]
    fn pressure_counters_are_the_kernels_seconds_by_resource_and_kind_and_absent_when_unknown() {
        use crate::step::live::{LivePressure, LiveStall, PressureMissing};
        let stall = |some_us, full_us| Some(LiveStall { some_us, full_us });
        let mut psi = state(42, "batch", 100.0);
        psi.pressure = Some(LivePressure {
            unavailable: None,
            // CPU before Linux 5.13: no full line.
            cpu: stall(7_250_000, None),
            memory: stall(0, Some(0)),
            io: stall(123_456_789_012, Some(1)),
        });
        let mut v1 = state(43, "0", 100.0);
        v1.pressure = Some(LivePressure::of(&Err(
            crate::cgroup::pressure::Unavailable::CgroupV1,
        )));
        let mut unread = state(44, "0", 100.0);
        unread.pressure = Some(LivePressure {
            unavailable: None,
            cpu: stall(1, Some(1)),
            ..LivePressure::default()
        });
        // An earlier plugin's state, or a step without a cgroup: nothing said either way.
        let older = state(45, "0", 100.0);
        let states = [psi, v1, unread, older];
        let t = render(&states);
        let l = "jobid=\"42\",step=\"batch\",user=\"alice\",node=\"n1\",cluster=\"c1\"";
        let name = "gpu_tracker_step_pressure_stall_seconds_total";
        assert_eq!(
            samples(&t, name),
            [
                format!("{name}{{{l},resource=\"cpu\",kind=\"some\"}} 7.25"),
                format!("{name}{{{l},resource=\"memory\",kind=\"some\"}} 0.0"),
                format!("{name}{{{l},resource=\"memory\",kind=\"full\"}} 0.0"),
                format!("{name}{{{l},resource=\"io\",kind=\"some\"}} 123456.789012"),
                format!("{name}{{{l},resource=\"io\",kind=\"full\"}} 0.000001"),
            ],
            "{t}"
        );
        assert!(t.contains(
            "# TYPE gpu_tracker_step_pressure_stall_seconds counter\n\
             # UNIT gpu_tracker_step_pressure_stall_seconds seconds\n\
             # HELP gpu_tracker_step_pressure_stall_seconds Time in which some"
        ));
        let avail = "gpu_tracker_step_pressure_available";
        assert_eq!(
            samples(&t, avail),
            [
                format!("{avail}{{{l}}} 1"),
                format!(
                    "{avail}{{jobid=\"43\",step=\"0\",user=\"alice\",node=\"n1\",cluster=\"c1\",reason=\"cgroup_v1\"}} 0"
                ),
                format!(
                    "{avail}{{jobid=\"44\",step=\"0\",user=\"alice\",node=\"n1\",cluster=\"c1\",reason=\"unknown\"}} 0"
                ),
            ]
        );
        assert_eq!(PressureMissing::PsiOff.as_str(), "psi_off");
        let of_42 = t
            .lines()
            .filter(|s| s.starts_with("gpu_tracker_step_pressure") && s.contains("jobid=\"42\""));
        assert_eq!(of_42.count(), PRESSURE_SERIES_PER_STEP - 1, "no CPU full");
        // No step without counters has a stall series: never a 0 that means unknown.
        for job in [43, 44, 45] {
            assert!(
                !t.lines()
                    .any(|s| s.starts_with(name) && s.contains(&format!("jobid=\"{job}\""))),
                "{job}: {t}"
            );
        }
        // The text format: the same samples, the counter declared with `_total`.
        let text = render_as(&states, Format::Text);
        assert!(text.contains(&format!(
            "# TYPE {name} counter\n{name}{{{l},resource=\"cpu\",kind=\"some\"}} 7.25\n"
        )));
        assert!(text.contains("# TYPE gpu_tracker_step_pressure_available gauge\n"));
        // Nothing of pressure at all: the families are declared, with no sample.
        let t = render(&states[3..]);
        assert!(t.contains("# TYPE gpu_tracker_step_pressure_available gauge\n"));
        assert!(
            !t.lines()
                .any(|l| l.starts_with("gpu_tracker_step_pressure"))
        );
    }

    #[test]
    fn one_job_id_of_two_clusters_is_two_series() {
        let mut other = state(5, "0", 0.0);
        other.cluster = "c2".into();
        let t = render(&[state(5, "0", 0.0), other]);
        let mem = samples(&t, "gpu_tracker_cpus_allocated");
        assert_eq!(mem.len(), 2, "{t}");
        assert!(mem[0].contains("cluster=\"c1\"") && mem[1].contains("cluster=\"c2\""));
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
        assert!(t.contains("gpu_tracker_exporter_live_dir_errors_total{reason=\"refused\"} 0\n"));
        assert!(
            t.contains("gpu_tracker_exporter_live_dir_errors_total{reason=\"list_failed\"} 0\n")
        );
    }
}
