//! Drawing a job's resource usage over time to an SVG or PNG file (`--plot`).
//!
//! One image about 1200 px wide: a title, then panels stacked on one shared time axis: memory,
//! CPU cores busy, (when a node had pressure stall figures, cgroup v2) the share of time some
//! task waited for CPU, memory and I/O, and (when the job had GPUs) GPU memory and GPU
//! utilization. Each panel has
//! its own legend to the right of the plot, so the labels never cover the data. The GPU
//! utilization panel also draws each GPU's SM activity (dashed, where the GPU measures it),
//! shades the times a GPU was slowed down and marks each Xid error. Phases marked
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
//!
//! # Rooms
//!
//! From the ground up: `data.rs` (what to draw, as plain data), `error.rs`, `style.rs` (sizes,
//! colours, text), `font.rs`, `charts.rs` (each panel's series, bands and markers in its
//! units, the time axis), `layout.rs` (heights and label rows, fixed before drawing), `draw.rs`
//! (the panels and labels), `marks.rs` (slowdown bands and Xid markers), `legend.rs`, and
//! `output.rs` (the file: SVG or PNG by its extension).

mod charts;
mod data;
mod draw;
mod error;
mod font;
mod layout;
mod legend;
mod marks;
mod output;
mod style;
#[cfg(test)]
mod tests_support;

pub use data::{EventKind, PlotData, PlotEvent, PlotGpu, PlotLine, PlotPhase};
pub use error::PlotError;
pub use output::draw;
