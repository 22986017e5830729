//! A sample plot and helpers to draw it, for the tests of [`super`].

use std::fs;
use std::path::PathBuf;

use super::data::*;
use super::error::FONT_ENV;
use super::font::{find_font, font_candidates};
use super::output::draw;
use super::style::GIB;

/// A two-node job over four minutes: one GPU on `vm` (SM activity from 30 s, slowed down
/// from 100 s to 130 s, Xid 79 at 200 s), pressure stall figures on `vm` only, three phases,
/// two alerts.
pub fn sample_data() -> PlotData {
    let ts: Vec<f64> = (0..=48).map(|i| f64::from(i) * 5.0).collect();
    let ramp = |t: f64, peak: f64| peak * (1.0 - (-t / 60.0).exp());
    let node = |label: &str, peak_gib: f64, cores: f64, gpus: Vec<PlotGpu>| PlotLine {
        label: label.to_string(),
        memory: ts.iter().map(|&t| (t, ramp(t, peak_gib) * GIB)).collect(),
        memory_limit: Some(4.0 * GIB),
        cpu: ts
            .iter()
            .map(|&t| (t, cores * (0.6 + 0.4 * (t / 20.0).sin().abs())))
            .collect(),
        stall: Default::default(),
        gpus,
    };
    // Busy (`high`) from 60 s to 180 s, else `low`.
    let busy = |t: f64, high: f64, low: f64| {
        (
            t,
            if (60.0..180.0).contains(&t) {
                high
            } else {
                low
            },
        )
    };
    let gpu = PlotGpu {
        label: "vm GPU 0".to_string(),
        memory: ts.iter().map(|&t| (t, ramp(t, 10.0) * GIB)).collect(),
        memory_total: Some(16.0 * GIB),
        utilization: ts.iter().map(|&t| busy(t, 95.0, 5.0)).collect(),
        // SM activity: measured from 30 s on (none before: no line there, never 0).
        sm_active: ts
            .iter()
            .filter(|&&t| t >= 30.0)
            .map(|&t| busy(t, 60.0, 2.0))
            .collect(),
        xids: vec![(200.0, 79)],
        slowdowns: vec![(100.0, 130.0)],
    };
    // Pressure on vm (vm-2 has none: cgroup v1): waiting for I/O while loading, for a core
    // now and then, for memory near the end.
    let mut vm = node("vm", 3.7, 3.0, vec![gpu]);
    vm.stall = [
        ts.iter()
            .map(|&t| (t, 8.0 + 6.0 * (t / 15.0).sin()))
            .collect(),
        ts.iter()
            .map(|&t| (t, ((t - 180.0) * 1.2).max(0.0)))
            .collect(),
        ts.iter().map(|&t| busy(t, 3.0, 70.0)).collect(),
    ];
    PlotData {
        title: "Job 4242 (train) on vm, vm-2".to_string(),
        lines: vec![vm, node("vm-2", 2.5, 1.5, vec![])],
        phases: vec![
            PlotPhase {
                name: "load".to_string(),
                start: 0.0,
                end: 55.0,
            },
            PlotPhase {
                name: "train".to_string(),
                start: 55.0,
                end: 190.0,
            },
            PlotPhase {
                name: "save".to_string(),
                start: 190.0,
                end: 240.0,
            },
        ],
        events: vec![
            PlotEvent {
                t: 150.0,
                label: "memory 92% of limit".to_string(),
                kind: EventKind::Alert,
            },
            PlotEvent {
                t: 160.0,
                label: "GPU 0 idle 20 s".to_string(),
                kind: EventKind::Alert,
            },
        ],
    }
}

pub fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpu-tracker-plot-{}-{name}", std::process::id()))
}

/// Drawing needs a system font: the tests need one too (`.ci/run` installs
/// fonts-dejavu-core), and fail without it rather than pass without drawing.
pub fn require_font() {
    if let Err(e) = find_font(&font_candidates(
        std::env::var_os(FONT_ENV).map(PathBuf::from),
    )) {
        panic!("the plot tests need a TrueType font: {e}");
    }
}

pub fn draw_svg(data: &PlotData, name: &str) -> String {
    let path = temp_path(name);
    draw(data, &path).unwrap();
    let svg = fs::read_to_string(&path).unwrap();
    fs::remove_file(&path).unwrap();
    svg
}

/// The plot as PNG, decoded.
pub fn draw_png(data: &PlotData, name: &str) -> image::RgbImage {
    let path = temp_path(name);
    draw(data, &path).unwrap();
    let bytes = fs::read(&path).unwrap();
    fs::remove_file(&path).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    image::load_from_memory(&bytes).unwrap().to_rgb8()
}

/// The texts of the SVG's `<text>` elements.
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}
