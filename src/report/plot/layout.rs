//! Everything sized before drawing: the time axis's range, the panels, the image's height, and
//! the rows event labels and phase names go in so that none runs into another.

use super::charts::{Panel, TimeUnit, panels};
use super::data::{PlotData, PlotPhase};
use super::style::*;

/// Everything sized before drawing: the time axis, the panels, the label rows.
pub(super) struct Layout {
    pub(super) unit: TimeUnit,
    pub(super) x_range: (f64, f64),
    pub(super) panels: Vec<Panel>,
    /// Row of each event label (same order as `data.events`; `None` for a skipped event).
    pub(super) event_rows: Vec<Option<usize>>,
    pub(super) event_row_count: usize,
    /// Row of each phase name (same order as `data.phases`).
    pub(super) phase_rows: Vec<Option<usize>>,
    pub(super) phase_row_count: usize,
    pub(super) height: u32,
}

impl Layout {
    pub(super) fn new(data: &PlotData) -> Layout {
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
    pub(super) fn panel_h(&self, i: usize) -> u32 {
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

pub(super) fn event_strip_h(rows: usize) -> u32 {
    if rows == 0 {
        0
    } else {
        rows as u32 * EVENT_ROW_H + 6
    }
}

pub(super) fn valid_phase(p: &PlotPhase) -> bool {
    p.start.is_finite() && p.end.is_finite() && p.end > p.start
}

pub(super) fn row_count(rows: &[Option<usize>]) -> usize {
    rows.iter().flatten().map(|r| r + 1).max().unwrap_or(0)
}

/// The earliest and latest time anything happens, in seconds; never later than 0 to start.
pub(super) fn time_span(data: &PlotData) -> (f64, f64) {
    let mut times: Vec<f64> = Vec::new();
    for line in &data.lines {
        times.extend(line.memory.iter().chain(&line.cpu).map(|p| p.0));
        times.extend(line.stall.iter().flatten().map(|p| p.0));
        for gpu in &line.gpus {
            let series = gpu
                .memory
                .iter()
                .chain(&gpu.utilization)
                .chain(&gpu.sm_active);
            times.extend(series.map(|p| p.0));
            times.extend(gpu.slowdowns.iter().flat_map(|s| [s.0, s.1]));
            times.extend(gpu.xids.iter().map(|x| x.0));
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
pub(super) fn assign_rows(spans: &[Option<(i32, i32)>]) -> Vec<Option<usize>> {
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

/// An event's label starts just right of its line, or ends just left of it where it would run
/// past `bounds`.
pub(super) fn event_label_span(x: i32, w: i32, bounds: (i32, i32)) -> (i32, i32) {
    let left = if x + 4 + w <= bounds.1 {
        x + 4
    } else {
        x - 4 - w
    };
    let left = left.max(bounds.0);
    (left, left + w)
}

/// The left and right pixel of a label of width `w` centred at `x`, pushed inside `bounds`.
pub(super) fn centred_span(x: i32, w: i32, bounds: (i32, i32)) -> (i32, i32) {
    let mut left = x - w / 2;
    if left + w > bounds.1 {
        left = bounds.1 - w;
    }
    if left < bounds.0 {
        left = bounds.0;
    }
    (left, left + w)
}
#[cfg(test)]
mod tests {
    use super::super::font::ensure_font;
    use super::super::tests_support::require_font;
    use super::*;

    #[test]
    fn close_labels_are_staggered() {
        require_font();
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
