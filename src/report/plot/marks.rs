//! What the GPU utilization panel marks besides its lines: shaded bands where a GPU was
//! slowed down (power cap, heat), and a vertical marker, labelled inside the plot, at each Xid
//! error.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::charts::Panel;
use super::data::EventKind;
use super::error::DrawResult;
use super::layout::{assign_rows, event_label_span};
use super::style::*;

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Each slowdown as a pale band in the alert colour over the plot's height; where the panel
/// has several GPUs, a thin bar of the GPU's colour along its foot says which.
pub(super) fn draw_bands<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    panel: &Panel,
    y_max: f64,
) -> DrawResult<DB> {
    let (lo, hi) = {
        let r = chart.x_range();
        (r.start, r.end)
    };
    let foot = y_max * BAND_FOOT;
    for band in &panel.bands {
        let spans: Vec<(f64, f64)> = band
            .spans
            .iter()
            .map(|&(a, b)| (a.max(lo), b.min(hi)))
            .filter(|(a, b)| b >= a)
            .collect();
        chart.draw_series(spans.iter().map(|&(a, b)| {
            Rectangle::new([(a, 0.0), (b, y_max)], ALERT.mix(SLOWDOWN_ALPHA).filled())
        }))?;
        if let Some(color) = band.color {
            chart.draw_series(
                spans
                    .iter()
                    .map(|&(a, b)| Rectangle::new([(a, 0.0), (b, foot)], color.filled())),
            )?;
        }
    }
    Ok(())
}

/// Each Xid as a vertical line in the failure colour, its label at the top inside the plot
/// (labels that would run into each other take the rows below).
pub(super) fn draw_markers<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart<'_, DB>,
    panel: &Panel,
    y_max: f64,
) -> DrawResult<DB> {
    if panel.markers.is_empty() {
        return Ok(());
    }
    let (line, text) = event_colors(EventKind::Failure);
    let range = chart.x_range();
    let (left, top) = chart.backend_coord(&(range.start, y_max));
    let (right, _) = chart.backend_coord(&(range.end, y_max));
    let font = label_font();
    let placed: Vec<(i32, (i32, i32), &str)> = panel
        .markers
        .iter()
        .filter(|m| range.contains(&m.x) || m.x == range.end)
        .map(|m| {
            let (x, _) = chart.backend_coord(&(m.x, y_max));
            let span = event_label_span(x, text_width(&font, &m.label), (left, right - 2));
            (x, span, m.label.as_str())
        })
        .collect();
    for &(x, _, _) in &placed {
        let (_, bottom) = chart.backend_coord(&(range.start, 0.0));
        root.draw(&PathElement::new(
            vec![(x, top), (x, bottom)],
            line.stroke_width(2),
        ))?;
    }
    let rows = assign_rows(&placed.iter().map(|p| Some(p.1)).collect::<Vec<_>>());
    for (&(_, (l, r), label), row) in placed.iter().zip(rows) {
        let Some(row) = row else { continue };
        let y = top + 3 + row as i32 * EVENT_ROW_H as i32;
        root.draw(&Rectangle::new(
            [(l - 2, y), (r + 2, y + EVENT_ROW_H as i32 - 3)],
            WHITE.mix(0.9).filled(),
        ))?;
        root.draw(&Text::new(
            label.to_string(),
            (l, y),
            text_style(LABEL_SIZE, text, HPos::Left, VPos::Top),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::layout::Layout;
    use super::super::tests_support::{draw_png, require_font, sample_data};
    use super::*;

    /// Of the GPU utilization chart (the last) between `t` seconds and `v` percent: how many
    /// pixels are `like` it, and in how many of how many pixel columns.
    fn count(
        image: &image::RgbImage,
        layout: &Layout,
        t: (f64, f64),
        v: (f64, f64),
        like: impl Fn([u8; 3]) -> bool,
    ) -> (usize, usize, usize) {
        let (left, right) = (
            f64::from(MARGIN_LEFT + Y_LABELS_W),
            f64::from(WIDTH - LEGEND_W - MARGIN_RIGHT),
        );
        let (x0, x1) = layout.x_range;
        let x =
            |t: f64| (left + (t / layout.unit.seconds - x0) / (x1 - x0) * (right - left)) as u32;
        let bottom = f64::from(layout.height - X_DESC_H);
        let y = |v: f64| (bottom - v / 100.0 * f64::from(PLOT_H)) as u32;
        let (mut n, mut hit) = (0, 0);
        for px in x(t.0)..=x(t.1) {
            let here = (y(v.1)..=y(v.0))
                .filter(|&py| like(image.get_pixel(px, py).0))
                .count();
            n += here;
            hit += usize::from(here > 0);
        }
        (n, hit, (x(t.0)..=x(t.1)).count())
    }

    #[test]
    fn gpu_chart_shows_sm_activity_slowdowns_and_xids() {
        require_font();
        let data = sample_data();
        let mut plain = data.clone();
        for gpu in plain.lines.iter_mut().flat_map(|l| &mut l.gpus) {
            gpu.sm_active.clear();
            gpu.xids.clear();
            gpu.slowdowns.clear();
        }
        let (with, without) = (draw_png(&data, "health.png"), draw_png(&plain, "plain.png"));
        // Laid out after drawing: the font is registered, the labels have their widths.
        let layout = Layout::new(&data);
        assert_eq!(with.height(), layout.height);
        let both = |t, v, like: &dyn Fn([u8; 3]) -> bool| {
            (
                count(&with, &layout, t, v, like).0,
                count(&without, &layout, t, v, like).0,
            )
        };
        // The slowdown, 100 s to 130 s: a pale orange band (nothing else there is orange).
        let orange = |p: [u8; 3]| {
            p[0] >= p[1] && p[0] > p[2].saturating_add(30) && p[1] > p[2].saturating_add(15)
        };
        let (band, none) = both((105.0, 125.0), (20.0, 50.0), &orange);
        assert!(band > 1000 && none == 0, "{band} {none} orange pixels");
        // Xid 79 at 200 s: a red line over the chart's height.
        let red = |p: [u8; 3]| p[0] > 150 && p[1] < 90 && p[2] < 90;
        let (xid, none) = both((199.0, 201.0), (10.0, 80.0), &red);
        assert!(xid > 100 && none == 0, "{xid} {none} red pixels");
        // SM activity, 60% from 60 s to 180 s: dashes of the GPU's colour (the utilization
        // line is at 95%).
        let c = series_color(data.lines.len());
        let gpu = |p: [u8; 3]| {
            p[0].abs_diff(c.0) < 20 && p[1].abs_diff(c.1) < 20 && p[2].abs_diff(c.2) < 20
        };
        let (sm, none) = both((65.0, 95.0), (55.0, 65.0), &gpu);
        assert!(
            sm > 50 && none == 0,
            "{sm} {none} pixels of the GPU's colour"
        );
        // Dashed: some columns have it, others are the gaps between dashes.
        let (_, hit, all) = count(&with, &layout, (65.0, 95.0), (55.0, 65.0), gpu);
        assert!(
            hit > all / 4 && hit < all * 9 / 10,
            "{hit} of {all} columns"
        );
    }
}
