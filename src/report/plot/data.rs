//! What a plot shows, as plain data: made by `report::story` from records, drawn by the rest of
//! [`super`].

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
    /// Share of the time in which some task waited for CPU, memory and I/O (cgroup v2's
    /// pressure stall figures): (t, percent 0..100), in that order; empty where the node had
    /// no pressure figures (cgroup v1, `psi=0`), so no line is drawn rather than one at 0.
    pub stall: [Vec<(f64, f64)>; 3],
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
    /// SM activity (GPM, Hopper and newer): (t, percent 0..100); empty where the GPU gave
    /// none, so no line is drawn rather than one at 0.
    pub sm_active: Vec<(f64, f64)>,
    /// Critical Xid errors: (t, the Xid); a vertical marker each on the utilization chart.
    pub xids: Vec<(f64, u64)>,
    /// Times the GPU was slowed down (power cap, heat): (start, end); a shaded band each on
    /// the utilization chart.
    pub slowdowns: Vec<(f64, f64)>,
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
