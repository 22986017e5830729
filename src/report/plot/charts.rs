//! Each panel (chart) of the plot as series in its own units: GiB, cores, percent, on a time
//! axis in seconds, minutes or hours picked from the span.

use plotters::style::RGBColor;

use super::data::{PlotData, PlotGpu};
use super::style::{GIB, STALL_COLORS, series_color};

/// The unit of the time axis, picked from the span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct TimeUnit {
    pub(super) seconds: f64,
    pub(super) name: &'static str,
}

impl TimeUnit {
    pub(super) fn for_span(span_s: f64) -> TimeUnit {
        if span_s <= 300.0 {
            TimeUnit {
                seconds: 1.0,
                name: "s",
            }
        } else if span_s <= 5.0 * 3600.0 {
            TimeUnit {
                seconds: 60.0,
                name: "min",
            }
        } else {
            TimeUnit {
                seconds: 3600.0,
                name: "h",
            }
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stroke {
    /// A solid line through the readings.
    Solid,
    /// A dashed line through the readings: a second figure of the same device (SM activity
    /// beside utilization), in the device's colour; or a second node's figure where the colour
    /// names the figure (the pressure panel).
    Dashed,
    /// A dashed horizontal line across the plot: a bound (a memory limit, a GPU's memory).
    Level,
    /// A dotted line through the readings: a third node's figure where the colour names the
    /// figure (the pressure panel).
    Dotted,
}

/// One series of a panel, in the panel's units.
pub(super) struct Series {
    pub(super) label: String,
    pub(super) color: RGBColor,
    pub(super) points: Vec<(f64, f64)>,
    pub(super) stroke: Stroke,
}

/// Shaded stretches of time of one device (a GPU slowed down), in the time axis's units.
pub(super) struct Band {
    pub(super) label: String,
    /// The device's series colour, to tell which device where the panel has several (the band
    /// itself is the alert colour).
    pub(super) color: Option<RGBColor>,
    pub(super) spans: Vec<(f64, f64)>,
}

/// A vertical marker at one moment (an Xid error), in the time axis's units.
pub(super) struct Marker {
    pub(super) label: String,
    pub(super) x: f64,
}

/// One panel: a title, a y description, its series, and the bands and markers drawn on it.
pub(super) struct Panel {
    pub(super) title: &'static str,
    pub(super) y_desc: &'static str,
    pub(super) series: Vec<Series>,
    /// A fixed top of the y range (utilization); else it follows the data.
    pub(super) y_fixed: Option<f64>,
    pub(super) bands: Vec<Band>,
    pub(super) markers: Vec<Marker>,
}

impl Panel {
    fn new(title: &'static str, y_desc: &'static str, series: Vec<Series>) -> Panel {
        Panel {
            title,
            y_desc,
            series,
            y_fixed: None,
            bands: Vec::new(),
            markers: Vec::new(),
        }
    }

    pub(super) fn has_samples(&self) -> bool {
        self.series
            .iter()
            .any(|s| s.stroke != Stroke::Level && !s.points.is_empty())
    }

    pub(super) fn y_max(&self, headroom: f64) -> f64 {
        if let Some(top) = self.y_fixed {
            return top;
        }
        let max = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        if max > 0.0 { max * headroom } else { 1.0 }
    }
}

pub(super) fn clean(points: &[(f64, f64)], unit: TimeUnit, scale: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .map(|&(t, v)| (t / unit.seconds, (v / scale).max(0.0)))
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

pub(super) fn horizontal(
    value: Option<f64>,
    scale: f64,
    x_range: (f64, f64),
    label: String,
    color: RGBColor,
) -> Option<Series> {
    let v = value.filter(|v| v.is_finite() && *v > 0.0)? / scale;
    Some(Series {
        label,
        color,
        points: vec![(x_range.0, v), (x_range.1, v)],
        stroke: Stroke::Level,
    })
}

pub(super) fn panels(data: &PlotData, unit: TimeUnit, x_range: (f64, f64)) -> Vec<Panel> {
    let mut memory = Vec::new();
    let mut cpu = Vec::new();
    for (i, line) in data.lines.iter().enumerate() {
        let color = series_color(i);
        memory.push(Series {
            label: line.label.clone(),
            color,
            points: clean(&line.memory, unit, GIB),
            stroke: Stroke::Solid,
        });
        memory.extend(horizontal(
            line.memory_limit,
            GIB,
            x_range,
            format!("{} limit", line.label),
            color,
        ));
        cpu.push(Series {
            label: line.label.clone(),
            color,
            points: clean(&line.cpu, unit, 1.0),
            stroke: Stroke::Solid,
        });
    }
    let mut panels = vec![
        Panel::new("Memory (GiB)", "GiB", memory),
        Panel::new("CPU (cores busy)", "cores", cpu),
    ];
    // The node's waits beside its memory and cores, above the GPUs.
    panels.extend(stall_panel(data, unit));
    let gpus: Vec<&PlotGpu> = data.lines.iter().flat_map(|l| &l.gpus).collect();
    if !gpus.is_empty() {
        // GPU colours continue after the nodes' so a GPU is never mistaken for a node.
        panels.extend(gpu_panels(&gpus, data.lines.len(), unit, x_range));
    }
    panels
}

/// The pressure panel: the share of time some task waited for CPU, memory and I/O, a colour
/// each; with several nodes, each node's three lines in a stroke of its own (solid, dashed,
/// dotted, then again). `None` where no node had pressure figures (cgroup v1, `psi=0`): no
/// panel rather than one flat at 0.
fn stall_panel(data: &PlotData, unit: TimeUnit) -> Option<Panel> {
    const NAMES: [&str; 3] = ["CPU", "memory", "I/O"];
    const STROKES: [Stroke; 3] = [Stroke::Solid, Stroke::Dashed, Stroke::Dotted];
    let several = data.lines.len() > 1;
    let measured = data
        .lines
        .iter()
        .filter(|l| l.stall.iter().any(|s| !s.is_empty()));
    let mut series = Vec::new();
    for (i, line) in measured.enumerate() {
        for ((name, color), points) in NAMES.iter().zip(STALL_COLORS).zip(&line.stall) {
            series.push(Series {
                label: if several {
                    format!("{} {name}", line.label)
                } else {
                    (*name).to_string()
                },
                color,
                points: clean(points, unit, 1.0),
                stroke: STROKES[i % STROKES.len()],
            });
        }
    }
    (!series.is_empty()).then(|| Panel {
        y_fixed: Some(100.0),
        ..Panel::new("Pressure stall (% of time some task waited)", "%", series)
    })
}

/// The GPU memory and GPU utilization panels. Utilization carries each GPU's SM activity as a
/// dashed line of its colour where it was measured, its slowdowns as bands and its Xid errors
/// as markers. GPU `i` takes series colour `first_color + i`.
fn gpu_panels(
    gpus: &[&PlotGpu],
    first_color: usize,
    unit: TimeUnit,
    x_range: (f64, f64),
) -> [Panel; 2] {
    let mut gpu_memory = Vec::new();
    let mut utilization = Panel {
        y_fixed: Some(100.0),
        ..Panel::new("GPU utilization (%)", "%", Vec::new())
    };
    let several = gpus.len() > 1;
    for (i, gpu) in gpus.iter().enumerate() {
        let color = series_color(first_color + i);
        gpu_memory.push(Series {
            label: gpu.label.clone(),
            color,
            points: clean(&gpu.memory, unit, GIB),
            stroke: Stroke::Solid,
        });
        gpu_memory.extend(horizontal(
            gpu.memory_total,
            GIB,
            x_range,
            format!("{} total", gpu.label),
            color,
        ));
        utilization.series.push(Series {
            label: gpu.label.clone(),
            color,
            points: clean(&gpu.utilization, unit, 1.0),
            stroke: Stroke::Solid,
        });
        if !gpu.sm_active.is_empty() {
            utilization.series.push(Series {
                label: format!("{} SM active", gpu.label),
                color,
                points: clean(&gpu.sm_active, unit, 1.0),
                stroke: Stroke::Dashed,
            });
        }
        let spans: Vec<(f64, f64)> = gpu
            .slowdowns
            .iter()
            .filter(|(a, b)| a.is_finite() && b.is_finite() && b >= a)
            .map(|(a, b)| (a / unit.seconds, b / unit.seconds))
            .collect();
        if !spans.is_empty() {
            utilization.bands.push(Band {
                label: format!("{} slowed down", gpu.label),
                color: several.then_some(color),
                spans,
            });
        }
        utilization
            .markers
            .extend(
                gpu.xids
                    .iter()
                    .filter(|(t, _)| t.is_finite())
                    .map(|(t, xid)| Marker {
                        label: if several {
                            format!("{}: Xid {xid}", gpu.label)
                        } else {
                            format!("Xid {xid}")
                        },
                        x: t / unit.seconds,
                    }),
            );
    }
    [
        Panel::new("GPU memory (GiB)", "GiB", gpu_memory),
        utilization,
    ]
}

/// A tick label: at most three decimals, no trailing zeros (`0`, `2.5`, `0.125`).
pub(super) fn tick_label(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}
#[cfg(test)]
mod tests {
    use super::super::tests_support::{draw_svg, require_font, sample_data, svg_texts};
    use super::*;

    #[test]
    fn time_unit_follows_the_span() {
        assert_eq!(TimeUnit::for_span(300.0).name, "s");
        assert_eq!(TimeUnit::for_span(301.0).name, "min");
        assert_eq!(TimeUnit::for_span(5.0 * 3600.0).name, "min");
        assert_eq!(TimeUnit::for_span(5.0 * 3600.0 + 1.0).name, "h");
        require_font();
        let mut data = sample_data();
        for line in &mut data.lines {
            line.cpu.push((2.0 * 3600.0, 1.0));
        }
        let texts = svg_texts(&draw_svg(&data, "long.svg"));
        assert!(texts.iter().any(|t| t == "time since start (min)"));
    }
}
