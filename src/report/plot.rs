//! Drawing a job's resource usage over time to an SVG or PNG file (`--plot`).
//!
//! One image about 1200 px wide: a title, then panels stacked on one shared time axis: memory,
//! CPU cores busy, and (when the job had GPUs) GPU memory and GPU utilization. Each panel has
//! its own legend to the right of the plot, so the labels never cover the data. Phases marked
//! with `gpu-tracker mark` are pale bands across every panel, named at the top of the first;
//! events (alerts, failures, marks) are thin vertical lines across every panel, labelled above
//! the first one.
//!
//! # Why `plotters`
//!
//! Good charts need tick placement, text layout and anti-aliased rasterising, for both a vector
//! and a bitmap format; that is a project of its own, not something to hand-write here.
//! `plotters` is the maintained, widely used pure-Rust charting crate that does both formats
//! behind one API, with no C library and no system font service: with its `ab_glyph` feature it
//! lays out and renders text from a TrueType file we hand it, so the binary links neither
//! fontconfig nor freetype. Only what is used is enabled: the SVG and bitmap backends, the PNG
//! encoder, `ab_glyph` text and line series.
//!
//! # Fonts
//!
//! Text needs a TrueType font (also for SVG, where plotters measures the text to lay it out).
//! `GPU_TRACKER_FONT`, when set, names the one to use; otherwise the first readable file among
//! a few well-known system paths is taken (Debian's `fonts-dejavu-core` first). It is
//! registered once per process, with its bold sibling when there is one.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// What a plot shows: times are seconds since `t0` (the job's or command's start).
#[derive(Debug, Clone, Default)]
pub struct PlotData {
    /// The title at the top of the image.
    pub title: String,
    /// One line per node (or one for a command run by `gpu-tracker -e`).
    pub lines: Vec<PlotLine>,
    /// Phases marked with `gpu-tracker mark`: name, start, end (seconds).
    pub phases: Vec<PlotPhase>,
    /// Events to mark on every panel: time, short label, kind.
    pub events: Vec<PlotEvent>,
}

/// One node's (or one command's) series.
#[derive(Debug, Clone, Default)]
pub struct PlotLine {
    /// The legend label, e.g. the node name `vm-2`.
    pub label: String,
    /// Memory in use: (t, bytes).
    pub memory: Vec<(f64, f64)>,
    /// The memory limit in bytes; drawn as a dashed horizontal line.
    pub memory_limit: Option<f64>,
    /// CPU use: (t, cores busy).
    pub cpu: Vec<(f64, f64)>,
    /// The GPUs of this node the job used.
    pub gpus: Vec<PlotGpu>,
}

/// One GPU's series.
#[derive(Debug, Clone, Default)]
pub struct PlotGpu {
    /// The legend label, e.g. `vm GPU 0`.
    pub label: String,
    /// GPU memory in use: (t, bytes).
    pub memory: Vec<(f64, f64)>,
    /// The GPU's memory in bytes; drawn as a dashed horizontal line.
    pub memory_total: Option<f64>,
    /// Utilization: (t, percent 0..100).
    pub utilization: Vec<(f64, f64)>,
}

/// A phase marked with `gpu-tracker mark`.
#[derive(Debug, Clone)]
pub struct PlotPhase {
    /// The phase's name, written at the top of its band.
    pub name: String,
    /// Start, seconds since `t0`.
    pub start: f64,
    /// End, seconds since `t0`.
    pub end: f64,
}

/// What an event is; it picks the colour of its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// An alert (memory near its limit, an idle GPU): orange.
    Alert,
    /// A failure (OOM kill, a task that failed): red.
    Failure,
    /// A mark set with `gpu-tracker mark`: grey.
    Mark,
    /// Anything else: light blue.
    Other,
}

/// An event marked on every panel.
#[derive(Debug, Clone)]
pub struct PlotEvent {
    /// When, seconds since `t0`.
    pub t: f64,
    /// A short label, written above the first panel.
    pub label: String,
    /// What it is; picks the colour.
    pub kind: EventKind,
}

/// Why a plot was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The file name ends in neither `.svg` nor `.png`.
    #[error("cannot plot to {}: the file name must end in .svg or .png", path.display())]
    UnknownFormat {
        /// The path asked for.
        path: PathBuf,
    },
    /// No TrueType font was found.
    #[error(
        "--plot needs a TrueType font: install fonts-dejavu-core (Debian) or set {FONT_ENV} to a \
         .ttf file (looked for: {})",
        list_paths(tried)
    )]
    NoFont {
        /// The files looked for.
        tried: Vec<PathBuf>,
    },
    /// The font file is not a font that can be used.
    #[error("{} is not a TrueType font the plot can use; set {FONT_ENV} to a .ttf file", path.display())]
    BadFont {
        /// The font file.
        path: PathBuf,
    },
    /// Drawing or writing the file failed.
    #[error("cannot draw or write {}: {message}", path.display())]
    Draw {
        /// The output path.
        path: PathBuf,
        /// What the drawing library said.
        message: String,
    },
}

/// The environment variable naming the font file to use.
const FONT_ENV: &str = "GPU_TRACKER_FONT";

/// Where the usual distributions put a plain sans-serif TrueType font, most likely first.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

fn list_paths(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// Draws `data` to `path`; the format follows the extension (.svg or .png, case-insensitive).
pub fn draw(data: &PlotData, path: &Path) -> Result<(), PlotError> {
    let format = Format::of(path)?;
    ensure_font()?;
    let layout = Layout::new(data);
    let size = (WIDTH, layout.height);
    let failed = |message: String| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    };
    match format {
        Format::Svg => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            render(&root, data, &layout).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
        Format::Png => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            render(&root, data, &layout).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

impl Format {
    fn of(path: &Path) -> Result<Format, PlotError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(PlotError::UnknownFormat {
                path: path.to_path_buf(),
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fonts

/// Set once a font is registered with plotters; the lock also keeps two threads from loading it
/// at the same time.
static FONT_REGISTERED: Mutex<bool> = Mutex::new(false);

fn ensure_font() -> Result<(), PlotError> {
    let mut registered = FONT_REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if *registered {
        return Ok(());
    }
    let candidates = font_candidates(std::env::var_os(FONT_ENV).map(PathBuf::from));
    let (path, bytes) = find_font(&candidates)?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| PlotError::BadFont { path: path.clone() })?;
    // The bold face is a nicety: without it, bold text falls back to the regular face.
    if let Some(Ok((_, bold_bytes))) = bold_sibling(&path).map(|bold| find_font(&[bold])) {
        let bold_bytes: &'static [u8] = Box::leak(bold_bytes.into_boxed_slice());
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, bold_bytes);
    }
    *registered = true;
    Ok(())
}

/// The font files to try: only the one `GPU_TRACKER_FONT` names when it is set, else the
/// well-known paths.
fn font_candidates(from_env: Option<PathBuf>) -> Vec<PathBuf> {
    match from_env {
        Some(p) if !p.as_os_str().is_empty() => vec![p],
        _ => FONT_PATHS.iter().map(PathBuf::from).collect(),
    }
}

/// The first of `candidates` that can be read and looks like a TrueType or OpenType font.
fn find_font(candidates: &[PathBuf]) -> Result<(PathBuf, Vec<u8>), PlotError> {
    for path in candidates {
        let Ok(bytes) = fs::read(path) else { continue };
        if looks_like_font(&bytes) {
            return Ok((path.clone(), bytes));
        }
        if candidates.len() == 1 {
            return Err(PlotError::BadFont { path: path.clone() });
        }
    }
    Err(PlotError::NoFont {
        tried: candidates.to_vec(),
    })
}

fn looks_like_font(bytes: &[u8]) -> bool {
    matches!(
        bytes.get(..4),
        Some([0, 1, 0, 0]) | Some(b"true") | Some(b"OTTO") | Some(b"ttcf")
    )
}

/// `DejaVuSans.ttf` -> `DejaVuSans-Bold.ttf`, `LiberationSans-Regular.ttf` ->
/// `LiberationSans-Bold.ttf`.
fn bold_sibling(path: &Path) -> Option<PathBuf> {
    let stem = path.file_stem()?.to_str()?;
    let ext = path.extension()?.to_str()?;
    let base = stem.strip_suffix("-Regular").unwrap_or(stem);
    Some(path.with_file_name(format!("{base}-Bold.{ext}")))
}

// ---------------------------------------------------------------------------------------------
// Layout

/// The image's width.
const WIDTH: u32 = 1200;
/// The title's band at the top.
const TITLE_H: u32 = 48;
/// The legend column right of every panel.
const LEGEND_W: u32 = 240;
/// Space left of the plot for the y tick labels and the y description.
const Y_LABELS_W: u32 = 70;
/// Left margin of each chart.
const MARGIN_LEFT: u32 = 8;
/// Right margin of each chart (between the plot and the legend column).
const MARGIN_RIGHT: u32 = 16;
/// The panel title's band above each plot.
const PANEL_TITLE_H: u32 = 28;
/// The height of each plot area.
const PLOT_H: u32 = 200;
/// Below each plot: the x tick labels.
const X_TICKS_H: u32 = 30;
/// Below the bottom plot: the x tick labels and the x description.
const X_DESC_H: u32 = 56;
/// Space between panels.
const PANEL_GAP: u32 = 10;
/// One row of event labels above the first plot.
const EVENT_ROW_H: u32 = 18;
/// One row of phase names inside the first plot.
const PHASE_ROW_H: u32 = 17;
/// At most this many rows of event labels or phase names; a label that finds no room in them
/// is left out (an event's line is still drawn).
const MAX_ROWS: usize = 4;
/// Free space kept between two labels on the same row.
const LABEL_GAP: i32 = 10;

const TITLE_SIZE: f64 = 24.0;
const PANEL_TITLE_SIZE: f64 = 18.0;
const LABEL_SIZE: f64 = 15.0;
const TICK_SIZE: f64 = 14.0;
const LEGEND_SIZE: f64 = 15.0;
const LEGEND_ROW_H: i32 = 21;
/// Dash length and gap of dashed lines, in pixels.
const DASH: u32 = 9;
const DASH_GAP: u32 = 6;
/// Dash length and the space between dashes of dashed lines that share a height.
const SHARED_DASH: u32 = 8;
const SHARED_GAP: u32 = 4;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Series colours: well told apart, without the orange, red and grey that mark events.
const SERIES_COLORS: &[RGBColor] = &[
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 128),
];

fn series_color(i: usize) -> RGBColor {
    match SERIES_COLORS.get(i) {
        Some(c) => *c,
        None => {
            let c = Palette99::pick(i).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

/// The two pale colours phase bands alternate between.
const PHASE_COLORS: [RGBColor; 2] = [RGBColor(214, 230, 245), RGBColor(226, 240, 214)];
const PHASE_ALPHA: f64 = 0.55;

/// The colour of an event's line, and the darker one of its label.
fn event_colors(kind: EventKind) -> (RGBColor, RGBColor) {
    match kind {
        EventKind::Alert => (RGBColor(245, 140, 20), RGBColor(190, 95, 0)),
        EventKind::Failure => (RGBColor(214, 39, 40), RGBColor(180, 20, 20)),
        EventKind::Mark => (RGBColor(128, 128, 128), RGBColor(90, 90, 90)),
        EventKind::Other => (RGBColor(110, 175, 230), RGBColor(40, 110, 180)),
    }
}

const TEXT: RGBColor = RGBColor(30, 30, 30);
const MUTED: RGBColor = RGBColor(110, 110, 110);

/// The unit of the time axis, picked from the span.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TimeUnit {
    seconds: f64,
    name: &'static str,
}

impl TimeUnit {
    fn for_span(span_s: f64) -> TimeUnit {
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

/// One series of a panel, in the panel's units.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

/// One panel: a title, a y description, its series.
struct Panel {
    title: &'static str,
    y_desc: &'static str,
    series: Vec<Series>,
    /// A fixed top of the y range (utilization); else it follows the data.
    y_fixed: Option<f64>,
}

impl Panel {
    fn has_samples(&self) -> bool {
        self.series
            .iter()
            .any(|s| !s.dashed && !s.points.is_empty())
    }

    fn y_max(&self, headroom: f64) -> f64 {
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

/// Everything sized before drawing: the time axis, the panels, the label rows.
struct Layout {
    unit: TimeUnit,
    x_range: (f64, f64),
    panels: Vec<Panel>,
    /// Row of each event label (same order as `data.events`; `None` for a skipped event).
    event_rows: Vec<Option<usize>>,
    event_row_count: usize,
    /// Row of each phase name (same order as `data.phases`).
    phase_rows: Vec<Option<usize>>,
    phase_row_count: usize,
    height: u32,
}

impl Layout {
    fn new(data: &PlotData) -> Layout {
        let (lo_s, hi_s) = time_span(data);
        let unit = TimeUnit::for_span(hi_s - lo_s);
        let mut x_range = (lo_s / unit.seconds, hi_s / unit.seconds);
        if x_range.1 - x_range.0 <= f64::EPSILON {
            x_range.1 = x_range.0 + 1.0;
        }
        let panels = panels(data, unit, x_range);

        let plot_left = (MARGIN_LEFT + Y_LABELS_W) as i32;
        let plot_right = (WIDTH - LEGEND_W - MARGIN_RIGHT) as i32;
        let to_px = |t_s: f64| {
            let x = t_s / unit.seconds;
            plot_left
                + ((x - x_range.0) / (x_range.1 - x_range.0) * f64::from(plot_right - plot_left))
                    as i32
        };

        let font = label_font();
        let events: Vec<Option<(i32, i32)>> = data
            .events
            .iter()
            .map(|e| {
                e.t.is_finite().then(|| {
                    let w = text_width(&font, &e.label);
                    event_label_span(to_px(e.t), w, (plot_left, WIDTH as i32 - 4))
                })
            })
            .collect();
        let event_rows = assign_rows(&events);
        let event_row_count = row_count(&event_rows);

        let phases: Vec<Option<(i32, i32)>> = data
            .phases
            .iter()
            .map(|p| {
                valid_phase(p).then(|| {
                    let a = to_px(p.start.max(lo_s));
                    let b = to_px(p.end.min(hi_s));
                    let w = text_width(&font, &p.name);
                    centred_span((a + b) / 2, w, (plot_left + 2, plot_right - 2))
                })
            })
            .collect();
        let phase_rows = assign_rows(&phases);
        let phase_row_count = row_count(&phase_rows);

        let n = panels.len() as u32;
        let height = TITLE_H
            + event_strip_h(event_row_count)
            + n * (PANEL_TITLE_H + PLOT_H)
            + (n - 1) * (X_TICKS_H + PANEL_GAP)
            + X_DESC_H;
        Layout {
            unit,
            x_range,
            panels,
            event_rows,
            event_row_count,
            phase_rows,
            phase_row_count,
            height,
        }
    }

    /// The height of panel `i`'s area.
    fn panel_h(&self, i: usize) -> u32 {
        let top = if i == 0 {
            event_strip_h(self.event_row_count)
        } else {
            0
        };
        let bottom = if i + 1 == self.panels.len() {
            X_DESC_H
        } else {
            X_TICKS_H + PANEL_GAP
        };
        PANEL_TITLE_H + top + PLOT_H + bottom
    }
}

fn event_strip_h(rows: usize) -> u32 {
    if rows == 0 {
        0
    } else {
        rows as u32 * EVENT_ROW_H + 6
    }
}

fn valid_phase(p: &PlotPhase) -> bool {
    p.start.is_finite() && p.end.is_finite() && p.end > p.start
}

fn row_count(rows: &[Option<usize>]) -> usize {
    rows.iter().flatten().map(|r| r + 1).max().unwrap_or(0)
}

/// The earliest and latest time anything happens, in seconds; never later than 0 to start.
fn time_span(data: &PlotData) -> (f64, f64) {
    let mut times: Vec<f64> = Vec::new();
    for line in &data.lines {
        times.extend(line.memory.iter().chain(&line.cpu).map(|p| p.0));
        for gpu in &line.gpus {
            times.extend(gpu.memory.iter().chain(&gpu.utilization).map(|p| p.0));
        }
    }
    for p in data.phases.iter().filter(|p| valid_phase(p)) {
        times.push(p.start);
        times.push(p.end);
    }
    times.extend(data.events.iter().map(|e| e.t));
    times
        .into_iter()
        .filter(|t| t.is_finite())
        .fold((0.0, 0.0), |(lo, hi), t| (f64::min(lo, t), f64::max(hi, t)))
}

/// Gives each label (its left and right pixel) the first row, left to right, where it does not
/// run into the label before it; `None` for a label that finds no room in `MAX_ROWS` rows
/// (writing it over the others would make them all unreadable).
fn assign_rows(spans: &[Option<(i32, i32)>]) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..spans.len()).filter(|&i| spans[i].is_some()).collect();
    order.sort_by_key(|&i| spans[i].map(|s| s.0));
    let mut row_end: Vec<i32> = Vec::new();
    let mut rows = vec![None; spans.len()];
    for i in order {
        let Some((left, right)) = spans[i] else {
            continue;
        };
        let row = match row_end.iter().position(|&end| left >= end + LABEL_GAP) {
            Some(r) => r,
            None if row_end.len() < MAX_ROWS => {
                row_end.push(i32::MIN / 2);
                row_end.len() - 1
            }
            None => continue,
        };
        row_end[row] = right;
        rows[i] = Some(row);
    }
    rows
}

fn label_font() -> FontDesc<'static> {
    ("sans-serif", LABEL_SIZE).into_font()
}

fn text_width(font: &FontDesc, text: &str) -> i32 {
    font.box_size(text).map(|(w, _)| w as i32).unwrap_or(0)
}

/// `text`, cut short with an ellipsis where it is wider than `max_w` pixels.
fn fit_text(font: &FontDesc, text: &str, max_w: i32) -> String {
    if text_width(font, text) <= max_w {
        return text.to_string();
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let short = format!("{}…", chars.iter().collect::<String>().trim_end());
        if text_width(font, &short) <= max_w {
            return short;
        }
    }
    "…".to_string()
}

/// An event's label starts just right of its line, or ends just left of it where it would run
/// past `bounds`.
fn event_label_span(x: i32, w: i32, bounds: (i32, i32)) -> (i32, i32) {
    let left = if x + 4 + w <= bounds.1 {
        x + 4
    } else {
        x - 4 - w
    };
    let left = left.max(bounds.0);
    (left, left + w)
}

/// The left and right pixel of a label of width `w` centred at `x`, pushed inside `bounds`.
fn centred_span(x: i32, w: i32, bounds: (i32, i32)) -> (i32, i32) {
    let mut left = x - w / 2;
    if left + w > bounds.1 {
        left = bounds.1 - w;
    }
    if left < bounds.0 {
        left = bounds.0;
    }
    (left, left + w)
}

fn clean(points: &[(f64, f64)], unit: TimeUnit, scale: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .map(|&(t, v)| (t / unit.seconds, (v / scale).max(0.0)))
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

fn horizontal(
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
        dashed: true,
    })
}

fn panels(data: &PlotData, unit: TimeUnit, x_range: (f64, f64)) -> Vec<Panel> {
    let mut memory = Vec::new();
    let mut cpu = Vec::new();
    for (i, line) in data.lines.iter().enumerate() {
        let color = series_color(i);
        memory.push(Series {
            label: line.label.clone(),
            color,
            points: clean(&line.memory, unit, GIB),
            dashed: false,
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
            dashed: false,
        });
    }
    let mut panels = vec![
        Panel {
            title: "Memory (GiB)",
            y_desc: "GiB",
            series: memory,
            y_fixed: None,
        },
        Panel {
            title: "CPU (cores busy)",
            y_desc: "cores",
            series: cpu,
            y_fixed: None,
        },
    ];

    let gpus: Vec<&PlotGpu> = data.lines.iter().flat_map(|l| &l.gpus).collect();
    if !gpus.is_empty() {
        let mut gpu_memory = Vec::new();
        let mut utilization = Vec::new();
        for (i, gpu) in gpus.iter().enumerate() {
            // GPU colours continue after the nodes' so a GPU is never mistaken for a node.
            let color = series_color(data.lines.len() + i);
            gpu_memory.push(Series {
                label: gpu.label.clone(),
                color,
                points: clean(&gpu.memory, unit, GIB),
                dashed: false,
            });
            gpu_memory.extend(horizontal(
                gpu.memory_total,
                GIB,
                x_range,
                format!("{} total", gpu.label),
                color,
            ));
            utilization.push(Series {
                label: gpu.label.clone(),
                color,
                points: clean(&gpu.utilization, unit, 1.0),
                dashed: false,
            });
        }
        panels.push(Panel {
            title: "GPU memory (GiB)",
            y_desc: "GiB",
            series: gpu_memory,
            y_fixed: None,
        });
        panels.push(Panel {
            title: "GPU utilization (%)",
            y_desc: "%",
            series: utilization,
            y_fixed: Some(100.0),
        });
    }
    panels
}

/// A tick label: at most three decimals, no trailing zeros (`0`, `2.5`, `0.125`).
fn tick_label(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Drawing

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn text_style(size: f64, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    ("sans-serif", size)
        .into_font()
        .color(&color)
        .pos(Pos::new(h, v))
}

fn render<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: &PlotData,
    layout: &Layout,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let title_font = FontDesc::new(FontFamily::SansSerif, TITLE_SIZE, FontStyle::Bold)
        .color(&TEXT)
        .pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(
        data.title.clone(),
        (WIDTH as i32 / 2, TITLE_H as i32 / 2),
        title_font,
    ))?;

    let mut top = TITLE_H;
    for i in 0..layout.panels.len() {
        let h = layout.panel_h(i);
        let area = root.clone().shrink((0, top), (WIDTH, h));
        draw_panel(root, &area, data, layout, i)?;
        top += h;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    data: &PlotData,
    layout: &Layout,
    index: usize,
) -> DrawResult<DB> {
    let panel = &layout.panels[index];
    let first = index == 0;
    let last = index + 1 == layout.panels.len();
    let (chart_area, legend_area) = area.split_horizontally(WIDTH - LEGEND_W);
    let strip = if first {
        event_strip_h(layout.event_row_count)
    } else {
        0
    };
    let headroom = if first && layout.phase_row_count > 1 {
        1.15 + 0.12 * (layout.phase_row_count - 1) as f64
    } else {
        1.15
    };
    let y_max = panel.y_max(headroom);
    let (x0, x1) = layout.x_range;

    let mut chart = ChartBuilder::on(&chart_area)
        .margin_top(PANEL_TITLE_H + strip)
        .margin_left(MARGIN_LEFT)
        .margin_right(MARGIN_RIGHT)
        .set_label_area_size(LabelAreaPosition::Left, Y_LABELS_W)
        .set_label_area_size(
            LabelAreaPosition::Bottom,
            if last { X_DESC_H } else { X_TICKS_H },
        )
        .margin_bottom(if last { 0 } else { PANEL_GAP })
        .build_cartesian_2d(x0..x1, 0.0..y_max)?;

    let fmt = |v: &f64| tick_label(*v);
    let x_desc = format!("time since start ({})", layout.unit.name);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(12)
        .y_labels(6)
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .label_style(("sans-serif", TICK_SIZE).into_font().color(&TEXT))
        .axis_desc_style(("sans-serif", LABEL_SIZE).into_font().color(&TEXT))
        .y_desc(panel.y_desc)
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(RGBColor(245, 245, 245))
        .axis_style(RGBColor(120, 120, 120));
    if last {
        mesh.x_desc(x_desc);
    }
    mesh.draw()?;

    // Phase bands, under everything else.
    chart.draw_series(
        data.phases
            .iter()
            .filter(|p| valid_phase(p))
            .enumerate()
            .map(|(i, p)| {
                let a = (p.start / layout.unit.seconds).max(x0);
                let b = (p.end / layout.unit.seconds).min(x1);
                let color = PHASE_COLORS[i % 2].mix(PHASE_ALPHA);
                Rectangle::new([(a, 0.0), (b, y_max)], color.filled())
            }),
    )?;

    // Event lines.
    chart.draw_series(data.events.iter().filter(|e| e.t.is_finite()).map(|e| {
        let x = e.t / layout.unit.seconds;
        PathElement::new(
            vec![(x, 0.0), (x, y_max)],
            event_colors(e.kind).0.stroke_width(1),
        )
    }))?;

    // The series.
    let (px0, py0) = chart.backend_coord(&(x0, y_max));
    let (px1, py1) = chart.backend_coord(&(x1, 0.0));
    let x_per_px = (x1 - x0) / f64::from((px1 - px0).max(1));
    for (i, s) in panel.series.iter().enumerate() {
        let style = s.color.stroke_width(2);
        if s.dashed {
            // Dashed lines at the same height (two nodes with the same limit) take turns,
            // each starting a dash later, so that every colour shows.
            let same =
                |o: &Series| o.dashed && (o.points[0].1 - s.points[0].1).abs() <= y_max * 0.005;
            let k = panel.series[..i].iter().filter(|o| same(o)).count() as u32;
            let n = panel.series.iter().filter(|o| same(o)).count() as u32;
            let (dash, gap) = if n > 1 {
                (SHARED_DASH, n * (SHARED_DASH + SHARED_GAP) - SHARED_DASH)
            } else {
                (DASH, DASH_GAP)
            };
            let shift = f64::from(k * (SHARED_DASH + SHARED_GAP)) * x_per_px;
            let mut points = s.points.clone();
            points[0].0 += shift;
            chart.draw_series(DashedLineSeries::new(points, dash, gap, style))?;
        } else if s.points.len() == 1 {
            chart.draw_series(std::iter::once(Circle::new(s.points[0], 3, style.filled())))?;
        } else {
            chart.draw_series(LineSeries::new(s.points.iter().copied(), style))?;
        }
    }

    // The panel's title, centred over the plot.
    let title_font = FontDesc::new(FontFamily::SansSerif, PANEL_TITLE_SIZE, FontStyle::Bold)
        .color(&TEXT)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let title_y = py0 - strip as i32 - PANEL_TITLE_H as i32 / 2;
    root.draw(&Text::new(
        panel.title,
        ((px0 + px1) / 2, title_y),
        title_font,
    ))?;

    if !panel.has_samples() {
        root.draw(&Text::new(
            "no samples",
            ((px0 + px1) / 2, (py0 + py1) / 2),
            text_style(18.0, MUTED, HPos::Center, VPos::Center),
        ))?;
    }

    if first {
        draw_phase_names(root, &chart, data, layout, (x0, x1), y_max)?;
        draw_event_labels(root, &chart, data, layout, y_max)?;
    }

    draw_legend(&legend_area, panel, py0 - area.get_base_pixel().1)
}

fn draw_phase_names<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    data: &PlotData,
    layout: &Layout,
    (x0, x1): (f64, f64),
    y_max: f64,
) -> DrawResult<DB> {
    let font = label_font();
    let (left, _) = chart.backend_coord(&(x0, y_max));
    let (right, top) = chart.backend_coord(&(x1, y_max));
    for (p, row) in data.phases.iter().zip(&layout.phase_rows) {
        let Some(row) = row else { continue };
        let a = chart
            .backend_coord(&((p.start / layout.unit.seconds).max(x0), y_max))
            .0;
        let b = chart
            .backend_coord(&((p.end / layout.unit.seconds).min(x1), y_max))
            .0;
        let w = text_width(&font, &p.name);
        let (l, _) = centred_span((a + b) / 2, w, (left + 2, right - 2));
        let y = top + 4 + *row as i32 * PHASE_ROW_H as i32;
        root.draw(&Text::new(
            p.name.clone(),
            (l, y),
            text_style(LABEL_SIZE, RGBColor(60, 60, 60), HPos::Left, VPos::Top),
        ))?;
    }
    Ok(())
}

fn draw_event_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    data: &PlotData,
    layout: &Layout,
    y_max: f64,
) -> DrawResult<DB> {
    let font = label_font();
    let (left, top) = chart.backend_coord(&(layout.x_range.0, y_max));
    let placed: Vec<(&PlotEvent, i32, (i32, i32), i32)> = data
        .events
        .iter()
        .zip(&layout.event_rows)
        .filter_map(|(e, row)| {
            let row = (*row)? as i32;
            let (x, _) = chart.backend_coord(&(e.t / layout.unit.seconds, y_max));
            let span = event_label_span(x, text_width(&font, &e.label), (left, WIDTH as i32 - 4));
            // Row 0 sits just above the plot; later rows stack upwards.
            let bottom = top - 3 - row * EVENT_ROW_H as i32;
            Some((e, x, span, bottom))
        })
        .collect();
    // First every line up to its label, then the labels on a white ground: a line that passes
    // a lower label goes behind it.
    for &(e, x, _, bottom) in &placed {
        root.draw(&PathElement::new(
            vec![(x, bottom - EVENT_ROW_H as i32 + 4), (x, top)],
            event_colors(e.kind).0.stroke_width(1),
        ))?;
    }
    for &(e, _, (l, r), bottom) in &placed {
        root.draw(&Rectangle::new(
            [(l - 2, bottom - EVENT_ROW_H as i32 + 3), (r + 2, bottom)],
            WHITE.mix(0.9).filled(),
        ))?;
        root.draw(&Text::new(
            e.label.clone(),
            (l, bottom - 1),
            text_style(LABEL_SIZE, event_colors(e.kind).1, HPos::Left, VPos::Bottom),
        ))?;
    }
    Ok(())
}

/// The legend, in the column right of the plot, its first row level with the plot's top
/// (`plot_top`, in the panel's pixels).
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    plot_top: i32,
) -> DrawResult<DB> {
    let rows_fit = (PLOT_H as i32 / LEGEND_ROW_H).max(1) as usize;
    let n = panel.series.len();
    let shown = if n > rows_fit { rows_fit - 1 } else { n };
    let sample_w = 30;
    let x0 = 4;
    let text_w = LEGEND_W as i32 - x0 - sample_w - 8 - 6;
    let font = ("sans-serif", LEGEND_SIZE).into_font();
    for (i, s) in panel.series.iter().take(shown).enumerate() {
        let y = plot_top + 10 + i as i32 * LEGEND_ROW_H;
        let style = s.color.stroke_width(2);
        if s.dashed {
            area.draw(&DashedPathElement::new(
                vec![(x0, y), (x0 + sample_w, y)],
                DASH - 2,
                DASH_GAP - 2,
                style,
            ))?;
        } else {
            area.draw(&PathElement::new(vec![(x0, y), (x0 + sample_w, y)], style))?;
        }
        area.draw(&Text::new(
            fit_text(&font, &s.label, text_w),
            (x0 + sample_w + 8, y),
            text_style(LEGEND_SIZE, TEXT, HPos::Left, VPos::Center),
        ))?;
    }
    if shown < n {
        let y = plot_top + 10 + shown as i32 * LEGEND_ROW_H;
        area.draw(&Text::new(
            format!("… and {} more", n - shown),
            (x0 + sample_w + 8, y),
            text_style(LEGEND_SIZE, MUTED, HPos::Left, VPos::Center),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-node job over four minutes: one GPU on `vm`, three phases, two alerts.
    fn sample_data() -> PlotData {
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
            gpus,
        };
        let gpu = PlotGpu {
            label: "vm GPU 0".to_string(),
            memory: ts.iter().map(|&t| (t, ramp(t, 10.0) * GIB)).collect(),
            memory_total: Some(16.0 * GIB),
            utilization: ts
                .iter()
                .map(|&t| {
                    (
                        t,
                        if (60.0..180.0).contains(&t) {
                            95.0
                        } else {
                            5.0
                        },
                    )
                })
                .collect(),
        };
        PlotData {
            title: "Job 4242 (train) on vm, vm-2".to_string(),
            lines: vec![
                node("vm", 3.7, 3.0, vec![gpu]),
                node("vm-2", 2.5, 1.5, vec![]),
            ],
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

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("gpu-tracker-plot-{}-{name}", std::process::id()))
    }

    /// Drawing needs a system font: the tests need one too (`.ci/run` installs
    /// fonts-dejavu-core), and fail without it rather than pass without drawing.
    fn font_available() -> bool {
        let found = find_font(&font_candidates(
            std::env::var_os(FONT_ENV).map(PathBuf::from),
        ));
        if let Err(e) = &found {
            panic!("the plot tests need a TrueType font: {e}");
        }
        true
    }

    fn draw_svg(data: &PlotData, name: &str) -> String {
        let path = temp_path(name);
        draw(data, &path).unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        fs::remove_file(&path).unwrap();
        svg
    }

    /// The texts of the SVG's `<text>` elements.
    fn svg_texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    #[test]
    fn svg_has_panels_series_phases_events_and_axis() {
        if !font_available() {
            return;
        }
        let svg = draw_svg(&sample_data(), "full.svg");
        let texts = svg_texts(&svg);
        for want in [
            "Job 4242 (train) on vm, vm-2",
            "Memory (GiB)",
            "CPU (cores busy)",
            "GPU memory (GiB)",
            "GPU utilization (%)",
            "vm",
            "vm-2",
            "vm limit",
            "vm-2 limit",
            "vm GPU 0",
            "vm GPU 0 total",
            "load",
            "train",
            "save",
            "memory 92% of limit",
            "GPU 0 idle 20 s",
            "time since start (s)",
        ] {
            assert!(
                texts.iter().any(|t| t == want),
                "no text {want:?} in {texts:?}"
            );
        }
        assert!(!texts.iter().any(|t| t == "no samples"));
        // Solid series are 2 px polylines: memory and CPU for two nodes, GPU memory and
        // utilization for one GPU (the legend's samples come on top).
        let thick = svg
            .split("<polyline")
            .skip(1)
            .filter(|p| p.contains("stroke-width=\"2\""))
            .count();
        assert!(thick >= 6, "{thick} thick polylines");
    }

    #[test]
    fn png_has_the_size_and_is_not_blank() {
        if !font_available() {
            return;
        }
        let data = sample_data();
        let path = temp_path("full.PNG");
        draw(&data, &path).unwrap();
        let bytes = fs::read(&path).unwrap();
        fs::remove_file(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        let image = image::load_from_memory(&bytes).unwrap().to_rgb8();
        assert_eq!(image.dimensions(), (WIDTH, Layout::new(&data).height));
        let colors: std::collections::HashSet<[u8; 3]> = image.pixels().map(|p| p.0).collect();
        assert!(colors.len() > 50, "{} colours", colors.len());
        // A white background, but far from all of it.
        let white = image.pixels().filter(|p| p.0 == [255, 255, 255]).count();
        let all = image.pixels().count();
        assert!(
            white > all / 5 && white < all * 95 / 100,
            "{white} of {all} white"
        );
    }

    #[test]
    fn unknown_extension_is_refused() {
        let path = temp_path("plot.jpg");
        let err = draw(&sample_data(), &path).unwrap_err();
        assert!(matches!(err, PlotError::UnknownFormat { .. }), "{err:?}");
        assert!(
            err.to_string().contains("must end in .svg or .png"),
            "{err}"
        );
        assert!(!path.exists());
        let err = draw(&sample_data(), Path::new("plot")).unwrap_err();
        assert!(matches!(err, PlotError::UnknownFormat { .. }), "{err:?}");
    }

    #[test]
    fn unwritable_path_names_the_path() {
        if !font_available() {
            return;
        }
        for name in ["plot.svg", "plot.png"] {
            let path = temp_path("no-such-dir").join(name);
            let err = draw(&sample_data(), &path).unwrap_err();
            assert!(matches!(err, PlotError::Draw { .. }), "{err:?}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
        }
    }

    #[test]
    fn missing_font_is_a_clear_error() {
        let missing = temp_path("no-such-font.ttf");
        let err = find_font(std::slice::from_ref(&missing)).unwrap_err();
        assert!(matches!(err, PlotError::NoFont { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.starts_with(
                "--plot needs a TrueType font: install fonts-dejavu-core (Debian) or set \
                 GPU_TRACKER_FONT to a .ttf file"
            ),
            "{message}"
        );
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
    }

    #[test]
    fn a_file_that_is_no_font_is_refused() {
        let path = temp_path("not-a-font.ttf");
        fs::write(&path, "hello").unwrap();
        let err = find_font(std::slice::from_ref(&path)).unwrap_err();
        fs::remove_file(&path).unwrap();
        assert!(matches!(err, PlotError::BadFont { .. }), "{err:?}");
    }

    #[test]
    fn font_candidates_follow_the_environment() {
        let own = PathBuf::from("/opt/fonts/Mine.ttf");
        assert_eq!(font_candidates(Some(own.clone())), vec![own]);
        let defaults = font_candidates(None);
        assert_eq!(
            defaults[0],
            Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        );
        assert_eq!(font_candidates(Some(PathBuf::new())), defaults);
        assert_eq!(
            bold_sibling(Path::new("/f/LiberationSans-Regular.ttf")),
            Some(PathBuf::from("/f/LiberationSans-Bold.ttf"))
        );
        assert_eq!(
            bold_sibling(Path::new("/f/DejaVuSans.ttf")),
            Some(PathBuf::from("/f/DejaVuSans-Bold.ttf"))
        );
    }

    #[test]
    fn no_gpu_means_no_gpu_panels() {
        if !font_available() {
            return;
        }
        let mut data = sample_data();
        for line in &mut data.lines {
            line.gpus.clear();
        }
        let texts = svg_texts(&draw_svg(&data, "nogpu.svg"));
        assert!(texts.iter().any(|t| t == "Memory (GiB)"));
        assert!(texts.iter().any(|t| t == "CPU (cores busy)"));
        assert!(!texts.iter().any(|t| t.starts_with("GPU memory")));
        assert!(!texts.iter().any(|t| t.starts_with("GPU utilization")));
        assert!(!texts.iter().any(|t| t == "vm GPU 0"));
    }

    #[test]
    fn empty_data_draws_axes_and_says_no_samples() {
        if !font_available() {
            return;
        }
        let svg = draw_svg(&PlotData::default(), "empty.svg");
        let texts = svg_texts(&svg);
        assert_eq!(texts.iter().filter(|t| *t == "no samples").count(), 2);
        assert!(texts.iter().any(|t| t == "time since start (s)"));
        assert!(texts.iter().any(|t| t == "Memory (GiB)"));
    }

    #[test]
    fn all_zero_series_still_has_a_y_range() {
        if !font_available() {
            return;
        }
        let data = PlotData {
            title: "idle".to_string(),
            lines: vec![PlotLine {
                label: "vm".to_string(),
                memory: vec![(0.0, 0.0), (10.0, 0.0)],
                cpu: vec![(0.0, 0.0), (10.0, 0.0)],
                ..PlotLine::default()
            }],
            ..PlotData::default()
        };
        let texts = svg_texts(&draw_svg(&data, "zero.svg"));
        assert!(!texts.iter().any(|t| t == "no samples"));
        let panel = &Layout::new(&data).panels[0];
        assert!(panel.y_max(1.15) > 0.0);
    }

    #[test]
    fn time_unit_follows_the_span() {
        assert_eq!(TimeUnit::for_span(300.0).name, "s");
        assert_eq!(TimeUnit::for_span(301.0).name, "min");
        assert_eq!(TimeUnit::for_span(5.0 * 3600.0).name, "min");
        assert_eq!(TimeUnit::for_span(5.0 * 3600.0 + 1.0).name, "h");
        if !font_available() {
            return;
        }
        let mut data = sample_data();
        for line in &mut data.lines {
            line.cpu.push((2.0 * 3600.0, 1.0));
        }
        let texts = svg_texts(&draw_svg(&data, "long.svg"));
        assert!(texts.iter().any(|t| t == "time since start (min)"));
    }

    #[test]
    fn close_labels_are_staggered() {
        if !font_available() {
            return;
        }
        ensure_font().unwrap();
        let font = label_font();
        let bounds = (0, 1200);
        let span = |x, text| Some(event_label_span(x, text_width(&font, text), bounds));
        let spans = [
            span(300, "memory 92% of limit"),
            span(330, "GPU 0 idle 20 s"),
            span(900, "far away"),
            None,
            span(1190, "at the end"),
        ];
        let rows = assign_rows(&spans);
        assert_eq!(rows, vec![Some(0), Some(1), Some(0), None, Some(0)]);
        // A label at the right edge ends left of its line.
        assert!(spans[4].unwrap().1 < 1190);
        // Hopeless crowding: what finds no row is left out rather than written over the rest.
        let crowd = vec![span(500, "crowded"); MAX_ROWS + 2];
        let rows = assign_rows(&crowd);
        assert_eq!(rows.iter().flatten().count(), MAX_ROWS);
        assert_eq!(rows[MAX_ROWS..], [None, None]);

        let long = "node-with-a-rather-long-name-17 limit";
        let short = fit_text(&font, long, 150);
        assert!(
            short.ends_with('…') && text_width(&font, &short) <= 150,
            "{short}"
        );
        assert_eq!(fit_text(&font, "vm", 150), "vm");
    }
}
