//! An array job as a whole (`gpu-tracker-report ARRAYID`): how many of its tasks ran, failed
//! or were OOM-killed, the spread of their figures, the tasks far from the rest, the classes
//! counted, and the `--mem`, `--time` and `--gres` that would fit every task next time (by the
//! one sizing rule, [`super::sizing`]: a guess where tasks were stopped at a limit).
//!
//! Built from each task's [`Summary`] only: [`find`] finds the tasks in the spool, the report
//! loads and summarises each one as it does a single job, and [`text`] renders the result.

pub(crate) mod db;
pub(crate) mod find;
pub(crate) mod text;

use std::collections::BTreeMap;

use serde::Serialize;

use super::figures::Summary;
use super::sizing::{Evidence, GUESS_RULE, Sizing};

/// A figure's spread over the tasks that have it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median: the middle value, or the mean of the two middle values for an even count.
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (any order, NaN left out); `None` when there is none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            min: v[0],
            median,
            max: v[n - 1],
        })
    }
}

/// One task's figures, as the array summary compares them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TaskFigures {
    /// The task's own job id.
    pub job_id: u32,
    /// Its index in the array.
    pub task_id: u32,
    /// Wall-clock time, seconds.
    pub elapsed_seconds: f64,
    /// Peak memory of the task on its busiest node, bytes (what `--mem`, a per-node request,
    /// has to cover).
    pub peak_memory_bytes: u64,
    /// The memory it needed on that node, bytes: its peak without page cache the kernel could
    /// reclaim, else (records of earlier builds) its charged peak; the charged peak when the
    /// kernel killed a process of it for memory (the limit counts the charge). What `--mem` is
    /// sized from.
    pub needed_memory_bytes: u64,
    /// CPU efficiency, percent.
    pub cpu_efficiency_percent: Option<f64>,
    /// Mean GPU utilization over its GPUs, percent.
    pub gpu_utilization_percent: Option<f64>,
    /// Peak GPU memory of its processes, added up over its GPUs, bytes.
    pub gpu_memory_bytes: u64,
    /// GPUs it used: all but those no process of it touched (the `gpu-unused` rule).
    pub gpus_used: u32,
    /// GPUs it was given.
    pub gpus_allocated: u32,
    /// Some task of it exited non-zero or was killed.
    pub failed: bool,
    /// The kernel killed some of its processes for memory.
    pub oom_killed: bool,
    /// The memory limit it had on a node, bytes (the limit of a kill, else its request); `None`:
    /// not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// Its last run ran out of its time limit.
    #[serde(default)]
    pub timed_out: bool,
    /// Its time limit, seconds; `None`: not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_seconds: Option<u64>,
    /// Every record of it is final.
    pub complete: bool,
    /// The tags of its classes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
}

impl TaskFigures {
    /// The figures of one task's summary. A summary with no array task id (which a task's
    /// records always carry) is given task id `u32::MAX`.
    pub fn of(s: &Summary) -> TaskFigures {
        // One rule for "used", the class's: a GPU no process of the task touched is unused.
        let used = s
            .gpus
            .iter()
            .filter(|g| !super::classes::gpu_unused(g))
            .count();
        TaskFigures {
            job_id: s.job_id,
            task_id: s.array_task_id.unwrap_or(u32::MAX),
            elapsed_seconds: s.elapsed_seconds,
            peak_memory_bytes: s.per_node.iter().map(|n| n.peak_bytes).max().unwrap_or(0),
            needed_memory_bytes: s
                .per_node
                .iter()
                .map(|n| {
                    if s.oom.iter().any(|o| o.node == n.node) {
                        n.peak_bytes
                    } else {
                        n.sizing_bytes()
                    }
                })
                .max()
                .unwrap_or(0),
            cpu_efficiency_percent: s.cpu.efficiency_percent,
            gpu_utilization_percent: s.totals.gpu_mean_utilization_percent,
            gpu_memory_bytes: s.totals.gpu_memory_peak_bytes,
            gpus_used: u32::try_from(used).unwrap_or(u32::MAX),
            gpus_allocated: u32::try_from(s.gpus.len()).unwrap_or(u32::MAX),
            failed: s.any_failed(),
            oom_killed: !s.oom.is_empty(),
            memory_limit_bytes: s
                .oom
                .iter()
                .filter_map(|o| o.limit_bytes)
                .max()
                .or_else(|| s.per_node.iter().filter_map(|n| n.requested_bytes).max()),
            timed_out: s.ran_out_of_time(),
            time_limit_seconds: s.time_against_limit().map(|(_, l)| l),
            complete: s.complete,
            classes: class_tags(s),
        }
    }
}

/// The tags of a summary's classes.
fn class_tags(s: &Summary) -> Vec<String> {
    s.classes.iter().map(|c| c.tag.clone()).collect()
}

/// How many tasks have each class tag, by tag.
pub fn count_classes<'a>(tags: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for t in tags {
        *out.entry(t.to_string()).or_insert(0) += 1;
    }
    out
}

/// Fewest tasks for outliers to be named: with fewer, a median says little.
pub const OUTLIER_MIN_TASKS: usize = 4;
/// A task is an outlier when its figure is more than this many times the median ...
pub const OUTLIER_ABOVE: f64 = 2.0;
/// ... or less than this fraction of it.
pub const OUTLIER_BELOW: f64 = 0.5;

/// A task far from the rest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outlier {
    /// Its index in the array.
    pub task_id: u32,
    /// Its job id.
    pub job_id: u32,
    /// `elapsed` or `peak_memory`.
    pub figure: &'static str,
    /// Its value (seconds or bytes).
    pub value: f64,
    /// The median over the tasks.
    pub median: f64,
    /// `value` / `median`.
    pub ratio: f64,
}

/// Tasks whose elapsed time or peak memory is more than [`OUTLIER_ABOVE`] times, or less
/// than [`OUTLIER_BELOW`] of, the median over the tasks; none with fewer than
/// [`OUTLIER_MIN_TASKS`] tasks or a median of 0. Ordered by task id, elapsed first.
pub fn outliers(tasks: &[TaskFigures]) -> Vec<Outlier> {
    if tasks.len() < OUTLIER_MIN_TASKS {
        return Vec::new();
    }
    /// A figure of a task, as a number.
    type Figure = fn(&TaskFigures) -> f64;
    let figures: [(&'static str, Figure); 2] = [
        ("elapsed", |t| t.elapsed_seconds),
        ("peak_memory", |t| t.peak_memory_bytes as f64),
    ];
    let medians = figures.map(|(name, get)| {
        let median = Spread::of(tasks.iter().map(get)).map_or(0.0, |s| s.median);
        (name, get, median)
    });
    let mut out = Vec::new();
    for t in tasks {
        for (figure, get, median) in medians {
            if median <= 0.0 {
                continue;
            }
            let value = get(t);
            let ratio = value / median;
            if !(OUTLIER_BELOW..=OUTLIER_ABOVE).contains(&ratio) {
                out.push(Outlier {
                    task_id: t.task_id,
                    job_id: t.job_id,
                    figure,
                    value,
                    median,
                    ratio,
                });
            }
        }
    }
    out
}

/// The requests that would fit every task of the array next time, by the one sizing rule
/// ([`Sizing`], the site's margins).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RightSize {
    /// `--mem=`: the largest task's needed memory ([`TaskFigures::needed_memory_bytes`]) ×
    /// the memory margin, rounded up as Slurm takes it (multiples of 256 MiB up to 4 GiB, whole
    /// GiB above); where tasks were killed for memory, a guess ([`Sizing::mem`]). `None` with no
    /// peak recorded.
    pub mem: Option<String>,
    /// `mem` is a guess: some task was killed for memory, and how much more it needed is not
    /// known.
    pub mem_guess: bool,
    /// `--time=`: the longest task's elapsed time × the time margin, whole minutes, at least
    /// the site's shortest, as `[D-]HH:MM:SS`; where tasks ran out of time, a guess. `None`
    /// with no time recorded.
    pub time: Option<String>,
    /// `time` is a guess: some task ran out of time.
    pub time_guess: bool,
    /// `--gres=gpu:N`: the most GPUs any task used. `None` when no task was given a GPU, or
    /// none used one (the line then says to ask for none).
    pub gres: Option<String>,
    /// The options with their reasons, for people.
    pub line: String,
}

use crate::units::slurm_time;

/// What the tasks say about their memory and their time, each task one run: a task killed for
/// memory was stopped at its memory limit (its charged peak where the limit is not known), one
/// that ran out of time at its time limit (its elapsed time where not known).
pub fn evidence(tasks: &[TaskFigures]) -> (Evidence, Evidence) {
    let (mut mem, mut time) = (Evidence::default(), Evidence::default());
    for t in tasks {
        if t.oom_killed {
            let at = t.memory_limit_bytes.unwrap_or(t.peak_memory_bytes);
            mem.stopped_at(at as f64);
        } else {
            mem.measured(t.needed_memory_bytes as f64);
        }
        if t.timed_out {
            let at = t.time_limit_seconds.map_or(t.elapsed_seconds, |l| l as f64);
            time.stopped_at(at);
        } else {
            time.measured(t.elapsed_seconds);
        }
    }
    (mem, time)
}

impl RightSize {
    /// From the tasks' figures, with the site's margins.
    pub fn of(tasks: &[TaskFigures], sizing: &Sizing) -> RightSize {
        let (mem_e, time_e) = evidence(tasks);
        // Say "own memory" where some task's charge was more than it needed.
        let own = tasks
            .iter()
            .any(|t| !t.oom_killed && t.needed_memory_bytes < t.peak_memory_bytes);
        let mem = sizing.mem(&mem_e);
        let time = sizing.time(&time_e);
        let given = tasks.iter().any(|t| t.gpus_allocated > 0);
        let most_used = tasks.iter().map(|t| t.gpus_used).max().unwrap_or(0);
        let gres = (most_used > 0).then(|| format!("gpu:{most_used}"));
        let mut options = Vec::new();
        let mut why = Vec::new();
        if let Some(m) = &mem {
            options.push(format!("--mem={}", m.option));
            why.push(mem_reason(&mem_e, own, sizing));
        }
        if let Some(t) = &time {
            options.push(format!("--time={}", t.option));
            why.push(time_reason(&time_e, sizing));
        }
        if let Some(g) = &gres {
            options.push(format!("--gres={g}"));
            why.push("most GPUs a task used".to_string());
        } else if given {
            why.push("no --gres=gpu: no task used its GPU".to_string());
        }
        let line = if options.is_empty() {
            "no figures to size the next submission from".to_string()
        } else {
            format!("{} ({})", options.join(" "), why.join("; "))
        };
        RightSize {
            mem_guess: mem.as_ref().is_some_and(|m| m.guess),
            mem: mem.map(|m| m.option),
            time_guess: time.as_ref().is_some_and(|t| t.guess),
            time: time.map(|t| t.option),
            gres,
            line,
        }
    }
}

/// Why the `--mem`: the largest need + margin, or a guess and how many tasks were killed.
fn mem_reason(e: &Evidence, own: bool, sizing: &Sizing) -> String {
    let fit = |what: &str| {
        format!(
            "largest {what}{}peak {} + {:.0}%",
            if own { "own memory " } else { "" },
            crate::units::human_bytes(e.measured as u64),
            sizing.mem_percent()
        )
    };
    if e.stopped == 0 {
        return fit("task's ");
    }
    let mut out = format!(
        "a guess for memory: {} of {} task(s) killed at their {} limit, how much more they needed is not known; {GUESS_RULE}",
        e.stopped,
        e.runs,
        crate::units::human_bytes(e.at_least as u64)
    );
    if e.measured > 0.0 {
        out.push_str(&format!(", or the other tasks' {} where more", fit("")));
    }
    out
}

/// Why the `--time`: the longest task + margin, or a guess and how many ran out of time.
fn time_reason(e: &Evidence, sizing: &Sizing) -> String {
    let fit = |what: &str| {
        format!(
            "{what} {} + {:.0}%, whole minutes, at least {} minutes",
            slurm_time(e.measured.round() as u64),
            sizing.time_percent(),
            sizing.min_time_minutes()
        )
    };
    if e.stopped == 0 {
        return fit("longest task");
    }
    let mut out = format!(
        "a guess for time: {} of {} task(s) ran out of their {} limit, how much more they needed is not known; {GUESS_RULE}",
        e.stopped,
        e.runs,
        slurm_time(e.at_least.round() as u64)
    );
    if e.measured > 0.0 {
        out.push_str(&format!(
            ", or {} where more",
            fit("the other tasks' longest")
        ));
    }
    out
}

/// An array job summarised over its tasks.
#[derive(Debug, Clone, Serialize)]
pub struct ArraySummary {
    /// The array's own job id.
    pub array_job_id: u32,
    /// Job name (the first task's that has one).
    pub name: Option<String>,
    /// User name.
    pub user: String,
    /// User id.
    pub uid: u32,
    /// Tasks with records.
    pub tasks_found: usize,
    /// Tasks whose records are all final, with no failed task and no OOM kill.
    pub completed: usize,
    /// Tasks where some process exited non-zero or was killed.
    pub failed: usize,
    /// Tasks where the kernel killed processes for memory.
    pub oom_killed: usize,
    /// Tasks still running, or killed before their final record.
    pub incomplete: usize,
    /// Elapsed time, seconds.
    pub elapsed_seconds: Option<Spread>,
    /// Peak memory on a task's busiest node, bytes.
    pub peak_memory_bytes: Option<Spread>,
    /// CPU efficiency, percent (tasks that have it).
    pub cpu_efficiency_percent: Option<Spread>,
    /// Mean GPU utilization, percent (tasks that have it).
    pub gpu_utilization_percent: Option<Spread>,
    /// Peak GPU memory of a task's processes, bytes (tasks given a GPU).
    pub gpu_memory_bytes: Option<Spread>,
    /// Tasks far from the rest ([`outliers`]).
    pub outliers: Vec<Outlier>,
    /// Tasks per class tag.
    pub classes: BTreeMap<String, usize>,
    /// What to ask for next time.
    pub right_size: RightSize,
    /// Each task, by task id.
    pub tasks: Vec<TaskFigures>,
}

impl ArraySummary {
    /// Summarises array `array_job_id` from its tasks' summaries (any order), sized with the
    /// site's margins.
    pub fn of(array_job_id: u32, summaries: &[Summary], sizing: &Sizing) -> ArraySummary {
        let mut a = ArraySummary::of_tasks(
            array_job_id,
            summaries.iter().map(TaskFigures::of).collect(),
            sizing,
        );
        a.name = summaries.iter().find_map(|s| s.name.clone());
        if let Some(s) = summaries.first() {
            a.user.clone_from(&s.user);
            a.uid = s.uid;
        }
        a
    }

    /// Summarises array `array_job_id` from its tasks' figures (any order); the name and user
    /// are left for the caller.
    pub fn of_tasks(
        array_job_id: u32,
        mut tasks: Vec<TaskFigures>,
        sizing: &Sizing,
    ) -> ArraySummary {
        tasks.sort_by_key(|t| (t.task_id, t.job_id));
        let count = |f: fn(&TaskFigures) -> bool| tasks.iter().filter(|t| f(t)).count();
        let with_gpus = || tasks.iter().filter(|t| t.gpus_allocated > 0);
        ArraySummary {
            array_job_id,
            name: None,
            user: String::new(),
            uid: 0,
            tasks_found: tasks.len(),
            completed: count(|t| t.complete && !t.failed && !t.oom_killed),
            failed: count(|t| t.failed),
            oom_killed: count(|t| t.oom_killed),
            incomplete: count(|t| !t.complete),
            elapsed_seconds: Spread::of(tasks.iter().map(|t| t.elapsed_seconds)),
            peak_memory_bytes: Spread::of(tasks.iter().map(|t| t.peak_memory_bytes as f64)),
            cpu_efficiency_percent: Spread::of(
                tasks.iter().filter_map(|t| t.cpu_efficiency_percent),
            ),
            gpu_utilization_percent: Spread::of(
                tasks.iter().filter_map(|t| t.gpu_utilization_percent),
            ),
            gpu_memory_bytes: Spread::of(with_gpus().map(|t| t.gpu_memory_bytes as f64)),
            outliers: outliers(&tasks),
            classes: count_classes(
                tasks
                    .iter()
                    .flat_map(|t| t.classes.iter().map(String::as_str)),
            ),
            right_size: RightSize::of(&tasks, sizing),
            tasks,
        }
    }
}

/// The JSON document `gpu-tracker-report --format json ARRAYID` prints.
#[derive(Debug, Serialize)]
pub struct ArrayDocument<'a> {
    /// Always [`ARRAY_SCHEMA`].
    pub schema: &'static str,
    /// Version of this document's format.
    pub schema_version: u32,
    /// The array's figures.
    pub array: &'a ArraySummary,
    /// What could not be used, one line each (`job N: ...`).
    pub problems: &'a [String],
}

/// Value of [`ArrayDocument::schema`].
pub const ARRAY_SCHEMA: &str = "gpu-tracker/array";
/// Value of [`ArrayDocument::schema_version`].
pub const ARRAY_SCHEMA_VERSION: u32 = 1;

impl ArraySummary {
    /// The JSON document, pretty, newline-terminated.
    pub fn to_json(&self, problems: &[String]) -> String {
        let doc = ArrayDocument {
            schema: ARRAY_SCHEMA,
            schema_version: ARRAY_SCHEMA_VERSION,
            array: self,
            problems,
        };
        let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests;
