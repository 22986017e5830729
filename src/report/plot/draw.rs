//! Drawing the laid-out plot on any plotters backend: the title, then each panel with its
//! phase bands, slowdown bands, event lines, series, markers, labels and legend.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::charts::{Series, Stroke, tick_label};
use super::data::{PlotData, PlotEvent};
use super::error::DrawResult;
use super::layout::{Layout, centred_span, event_label_span, event_strip_h, valid_phase};
use super::legend::draw_legend;
use super::marks::{draw_bands, draw_markers};
use super::style::*;

pub(super) fn render<DB: DrawingBackend>(
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

pub(super) fn draw_panel<DB: DrawingBackend>(
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

    // Slowdown bands, over the phases' and under the rest.
    draw_bands(&mut chart, panel, y_max)?;

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
        if matches!(s.stroke, Stroke::Dashed | Stroke::Dotted) && s.points.len() > 1 {
            let (dash, gap) = if s.stroke == Stroke::Dotted {
                (DOT, DOT_GAP)
            } else {
                (DASH, DASH_GAP)
            };
            chart.draw_series(DashedLineSeries::new(
                s.points.iter().copied(),
                dash,
                gap,
                style,
            ))?;
        } else if s.stroke == Stroke::Level {
            // Dashed lines at the same height (two nodes with the same limit) take turns,
            // each starting a dash later, so that every colour shows.
            let same = |o: &Series| {
                o.stroke == Stroke::Level && (o.points[0].1 - s.points[0].1).abs() <= y_max * 0.005
            };
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

    draw_markers(root, &chart, panel, y_max)?;

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

pub(super) fn draw_phase_names<DB: DrawingBackend>(
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

pub(super) fn draw_event_labels<DB: DrawingBackend>(
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

#[cfg(test)]
mod tests {

    use super::super::data::PlotLine;
    use super::super::tests_support::*;
    use super::*;

    #[test]
    fn svg_has_panels_series_phases_events_and_axis() {
        require_font();
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
            "vm GPU 0 SM active",
            "vm GPU 0 slowed down",
            "Xid 79",
            "Xid error",
            "load",
            "train",
            "save",
            "memory 92% of limit",
            "GPU 0 idle 20 s",
            "time since start (s)",
            "Pressure stall (% of time some task waited)",
            "vm CPU",
            "vm memory",
            "vm I/O",
        ] {
            assert!(
                texts.iter().any(|t| t == want),
                "no text {want:?} in {texts:?}"
            );
        }
        assert!(!texts.iter().any(|t| t == "no samples"));
        // vm-2 had no pressure figures: no line of it, rather than one at 0.
        assert!(!texts.iter().any(|t| t.starts_with("vm-2 CPU")));
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
        require_font();
        let data = sample_data();
        let image = draw_png(&data, "full.PNG");
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
    fn no_gpu_means_no_gpu_panels() {
        require_font();
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
    fn no_pressure_figures_mean_no_pressure_panel() {
        require_font();
        let mut data = sample_data();
        data.lines.truncate(1);
        let texts = svg_texts(&draw_svg(&data, "one.svg"));
        // One node: the figures' names alone, in their colours.
        for want in ["CPU", "memory", "I/O"] {
            assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
        }
        let with = Layout::new(&data);
        for line in &mut data.lines {
            line.stall = Default::default();
        }
        let texts = svg_texts(&draw_svg(&data, "nopressure.svg"));
        assert!(!texts.iter().any(|t| t.starts_with("Pressure")));
        assert!(!texts.iter().any(|t| t == "I/O"));
        let without = Layout::new(&data);
        assert_eq!(without.panels.len() + 1, with.panels.len());
        assert!(without.height < with.height);
    }

    #[test]
    fn empty_data_draws_axes_and_says_no_samples() {
        require_font();
        let svg = draw_svg(&PlotData::default(), "empty.svg");
        let texts = svg_texts(&svg);
        assert_eq!(texts.iter().filter(|t| *t == "no samples").count(), 2);
        assert!(texts.iter().any(|t| t == "time since start (s)"));
        assert!(texts.iter().any(|t| t == "Memory (GiB)"));
    }

    #[test]
    fn all_zero_series_still_has_a_y_range() {
        require_font();
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
}
