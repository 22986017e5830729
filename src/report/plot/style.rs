//! The image's sizes, colours and text styles.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::data::EventKind;

/// The image's width.
pub(super) const WIDTH: u32 = 1200;
/// The title's band at the top.
pub(super) const TITLE_H: u32 = 48;
/// The legend column right of every panel.
pub(super) const LEGEND_W: u32 = 240;
/// Space left of the plot for the y tick labels and the y description.
pub(super) const Y_LABELS_W: u32 = 70;
/// Left margin of each chart.
pub(super) const MARGIN_LEFT: u32 = 8;
/// Right margin of each chart (between the plot and the legend column).
pub(super) const MARGIN_RIGHT: u32 = 16;
/// The panel title's band above each plot.
pub(super) const PANEL_TITLE_H: u32 = 28;
/// The height of each plot area.
pub(super) const PLOT_H: u32 = 200;
/// Below each plot: the x tick labels.
pub(super) const X_TICKS_H: u32 = 30;
/// Below the bottom plot: the x tick labels and the x description.
pub(super) const X_DESC_H: u32 = 56;
/// Space between panels.
pub(super) const PANEL_GAP: u32 = 10;
/// One row of event labels above the first plot.
pub(super) const EVENT_ROW_H: u32 = 18;
/// One row of phase names inside the first plot.
pub(super) const PHASE_ROW_H: u32 = 17;
/// At most this many rows of event labels or phase names; a label that finds no room in them
/// is left out (an event's line is still drawn).
pub(super) const MAX_ROWS: usize = 4;
/// Free space kept between two labels on the same row.
pub(super) const LABEL_GAP: i32 = 10;

pub(super) const TITLE_SIZE: f64 = 24.0;
pub(super) const PANEL_TITLE_SIZE: f64 = 18.0;
pub(super) const LABEL_SIZE: f64 = 15.0;
pub(super) const TICK_SIZE: f64 = 14.0;
pub(super) const LEGEND_SIZE: f64 = 15.0;
pub(super) const LEGEND_ROW_H: i32 = 21;
/// Dash length and gap of dashed lines, in pixels.
pub(super) const DASH: u32 = 9;
pub(super) const DASH_GAP: u32 = 6;
/// Dot length and gap of dotted lines, in pixels.
pub(super) const DOT: u32 = 2;
pub(super) const DOT_GAP: u32 = 4;
/// Dash length and the space between dashes of dashed lines that share a height.
pub(super) const SHARED_DASH: u32 = 8;
pub(super) const SHARED_GAP: u32 = 4;

pub(super) const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Series colours: well told apart, without the orange, red and grey that mark events.
pub(super) const SERIES_COLORS: &[RGBColor] = &[
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 128),
];

/// The pressure panel's colours for CPU, memory and I/O: told apart from each other and from
/// the events' colours.
pub(super) const STALL_COLORS: [RGBColor; 3] = [
    RGBColor(0, 128, 128),
    RGBColor(199, 21, 133),
    RGBColor(75, 0, 130),
];

pub(super) fn series_color(i: usize) -> RGBColor {
    match SERIES_COLORS.get(i) {
        Some(c) => *c,
        None => {
            let c = Palette99::pick(i).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

/// The two pale colours phase bands alternate between.
pub(super) const PHASE_COLORS: [RGBColor; 2] = [RGBColor(214, 230, 245), RGBColor(226, 240, 214)];
pub(super) const PHASE_ALPHA: f64 = 0.55;

/// The colour of alerts (their lines) and slowdowns (pale bands).
pub(super) const ALERT: RGBColor = RGBColor(245, 140, 20);
/// How pale a slowdown band is.
pub(super) const SLOWDOWN_ALPHA: f64 = 0.22;
/// The bar of the GPU's colour at a slowdown band's foot: this share of the plot's height.
pub(super) const BAND_FOOT: f64 = 0.03;

/// The colour of an event's line, and the darker one of its label.
pub(super) fn event_colors(kind: EventKind) -> (RGBColor, RGBColor) {
    match kind {
        EventKind::Alert => (ALERT, RGBColor(190, 95, 0)),
        EventKind::Failure => (RGBColor(214, 39, 40), RGBColor(180, 20, 20)),
        EventKind::Mark => (RGBColor(128, 128, 128), RGBColor(90, 90, 90)),
        EventKind::Other => (RGBColor(110, 175, 230), RGBColor(40, 110, 180)),
    }
}

pub(super) const TEXT: RGBColor = RGBColor(30, 30, 30);
pub(super) const MUTED: RGBColor = RGBColor(110, 110, 110);

pub(super) fn text_style(size: f64, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    ("sans-serif", size)
        .into_font()
        .color(&color)
        .pos(Pos::new(h, v))
}

pub(super) fn label_font() -> FontDesc<'static> {
    ("sans-serif", LABEL_SIZE).into_font()
}

pub(super) fn text_width(font: &FontDesc, text: &str) -> i32 {
    font.box_size(text).map(|(w, _)| w as i32).unwrap_or(0)
}

/// `text`, cut short with an ellipsis where it is wider than `max_w` pixels.
pub(super) fn fit_text(font: &FontDesc, text: &str, max_w: i32) -> String {
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
