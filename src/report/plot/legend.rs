//! The legend right of each panel: one row per series, slowdown band and (once) Xid marker,
//! each with a sample drawn as it is in the plot.

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::charts::{Panel, Stroke};
use super::data::EventKind;
use super::error::DrawResult;
use super::style::*;

/// What a legend row's sample looks like.
enum Sample {
    Line(RGBColor, Stroke),
    /// A slowdown band: pale alert colour, the GPU's colour at its foot where there is one.
    Band(Option<RGBColor>),
    /// An Xid marker: a short vertical line.
    Marker,
}

/// The legend's rows: the series, then the bands, then one row for the Xid markers.
fn rows(panel: &Panel) -> Vec<(Sample, &str)> {
    let mut rows: Vec<(Sample, &str)> = panel
        .series
        .iter()
        .map(|s| (Sample::Line(s.color, s.stroke), s.label.as_str()))
        .collect();
    rows.extend(
        panel
            .bands
            .iter()
            .map(|b| (Sample::Band(b.color), b.label.as_str())),
    );
    if !panel.markers.is_empty() {
        rows.push((Sample::Marker, "Xid error"));
    }
    rows
}

/// The legend, in the column right of the plot, its first row level with the plot's top
/// (`plot_top`, in the panel's pixels).
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    plot_top: i32,
) -> DrawResult<DB> {
    let rows = rows(panel);
    let rows_fit = (PLOT_H as i32 / LEGEND_ROW_H).max(1) as usize;
    let n = rows.len();
    let shown = if n > rows_fit { rows_fit - 1 } else { n };
    let sample_w = 30;
    let x0 = 4;
    let text_w = LEGEND_W as i32 - x0 - sample_w - 8 - 6;
    let font = ("sans-serif", LEGEND_SIZE).into_font();
    for (i, (sample, label)) in rows.iter().take(shown).enumerate() {
        let y = plot_top + 10 + i as i32 * LEGEND_ROW_H;
        let half = LEGEND_ROW_H / 2 - 2;
        match *sample {
            Sample::Line(color, Stroke::Solid) => {
                area.draw(&PathElement::new(
                    vec![(x0, y), (x0 + sample_w, y)],
                    color.stroke_width(2),
                ))?;
            }
            Sample::Line(color, Stroke::Dotted) => {
                area.draw(&DashedPathElement::new(
                    vec![(x0, y), (x0 + sample_w, y)],
                    DOT,
                    DOT_GAP - 1,
                    color.stroke_width(2),
                ))?;
            }
            Sample::Line(color, Stroke::Dashed | Stroke::Level) => {
                area.draw(&DashedPathElement::new(
                    vec![(x0, y), (x0 + sample_w, y)],
                    DASH - 2,
                    DASH_GAP - 2,
                    color.stroke_width(2),
                ))?;
            }
            Sample::Band(color) => {
                area.draw(&Rectangle::new(
                    [(x0, y - half), (x0 + sample_w, y + half)],
                    ALERT.mix(SLOWDOWN_ALPHA).filled(),
                ))?;
                if let Some(color) = color {
                    area.draw(&Rectangle::new(
                        [(x0, y + half - 3), (x0 + sample_w, y + half)],
                        color.filled(),
                    ))?;
                }
            }
            Sample::Marker => {
                let x = x0 + sample_w / 2;
                area.draw(&PathElement::new(
                    vec![(x, y - half), (x, y + half)],
                    event_colors(EventKind::Failure).0.stroke_width(2),
                ))?;
            }
        }
        area.draw(&Text::new(
            fit_text(&font, label, text_w),
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
