//! The compact summary kept in Slurm's database (the job's `AdminComment`), for reading a job
//! from a login node once its spool records are out of reach (a node-local spool, a purge, a
//! lost disk).
//!
//! A job of 13 nodes with 4 GPUs each, or 65 nodes without GPUs, fits whole (node names of 12
//! characters); beyond that GPU rows, then node rows, are cut.
//!
//! The text is `gpu-tracker:1:` followed by one line of JSON with backticks for its double
//! quotes: the job's figures, one row per node and per GPU. Backticks, because `sacctmgr modify
//! job ... set AdminComment=` turns every quote into one (Slurm 22.05 to 26.05); it also
//! lowercases the whole text in 22.05, which only node names feel (they come back in lower
//! case). Node names are kept to `[A-Za-z0-9._-]`. It is at most [`MAX_STORED_BYTES`] bytes: rows that do not fit are left
//! out and counted (`cut_nodes`, `cut_gpus`), the job's totals always stay. Slurm's own rules
//! decide who reads it (`sacct`, with `PrivateData=jobs` where the site hides jobs from other
//! users); nothing else is kept outside the spool.

use serde::{Deserialize, Serialize};

use super::classes::{self, ClassRules};
use super::figures::{GpuSummary, JobClass, NodeSummary, Summary};
use super::jobstats;
use super::merge::cpu_efficiency;
use crate::units::saturating_sum;

/// What opens a stored summary; the number is the format's version.
pub const PREFIX: &str = "gpu-tracker:1:";
/// The most bytes a stored summary takes, prefix included.
pub const MAX_STORED_BYTES: usize = 4000;

/// The stored figures. Short keys: the text lives in every job's database row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// Job id.
    pub job: u32,
    /// Array job and task, for array tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<(u32, u32)>,
    /// Every record was final.
    pub complete: bool,
    /// Elapsed seconds.
    pub elapsed: f64,
    /// CPU seconds, CPUs allocated over the nodes with records, most cores busy.
    pub cpu: (f64, u32, f64),
    /// Over the nodes: peak memory added up, memory requested added up (0: no limit), GPUs, the
    /// GPUs' peak memory added up, their mean utilization (-1: not reported). Kept whole when
    /// rows are cut.
    #[serde(default)]
    pub totals: (u64, u64, usize, u64, f64),
    /// Nodes in the job, as Slurm counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_nodes: Option<u32>,
    /// Nodes of the job with no record where the summary was made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Per node: name, CPU seconds, CPUs allocated, peak memory bytes, memory requested bytes
    /// (0: no limit), steps.
    pub nodes: Vec<(String, f64, u32, u64, u64, usize)>,
    /// Per GPU: node, Slurm's index, the job's peak memory bytes, memory size bytes, mean and
    /// max utilization percent (-1: not reported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<(String, i64, u64, u64, f64, f64)>,
    /// Processes killed for memory, over the steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub oom_kills: u64,
    /// Tasks that failed, over the steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_tasks: usize,
    /// The tags of the job's classes, in their order. Absent in summaries of earlier builds:
    /// those get the classes their figures show under the built-in rules.
    /// `[]`: none. Stored as `cl`: the 65-node job still fits whole.
    #[serde(default, rename = "cl", skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<String>>,
    /// For a job with GPUs: how many GPUs no process of the job ever ran on (the `gpu-unused`
    /// rule), and the GPUs' idle seconds added up (the summary's idle time, unused GPUs
    /// whole). What the site report's GPU-hours columns need, kept whole when GPU rows are cut.
    /// Absent in summaries of earlier builds. Stored as `gu`.
    #[serde(default, rename = "gu", skip_serializing_if = "Option::is_none")]
    pub gpu_use: Option<(u32, f64)>,
    /// The job's needed memory (page cache left out, what sizing uses): the nodes' needed
    /// peaks added up (a node without one counts its charged peak), kept whole when rows are
    /// cut. Absent in summaries of earlier builds and where no record had the figure: readers
    /// then take the charged peak (`totals`). Stored as `mn`.
    #[serde(default, rename = "mn", skip_serializing_if = "Option::is_none")]
    pub memory_needed: Option<u64>,
    /// Each node's needed peak, in the order of `nodes`, for a job of several nodes (one
    /// node's is `memory_needed`). The first thing left out when the text is over the bound:
    /// the totals keep the figure. Stored as `nn`.
    #[serde(default, rename = "nn", skip_serializing_if = "Vec::is_empty")]
    pub nodes_needed: Vec<u64>,
    /// Node rows left out to stay within the size bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_nodes: usize,
    /// GPU rows left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_gpus: usize,
}

/// Why a stored text could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoredError {
    /// No gpu-tracker summary in it (another tool's comment, or none).
    #[error("no gpu-tracker summary")]
    Absent,
    /// A later format.
    #[error("a stored summary of a newer gpu-tracker ({0})")]
    Newer(String),
    /// Damaged.
    #[error("a damaged stored summary: {0}")]
    Damaged(String),
}

/// Counts left out at 0: every byte counts under the bound (readers take 0 for a missing one).
fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

fn pct_or_none(p: Option<f64>) -> f64 {
    p.map_or(-1.0, |v| (v * 10.0).round() / 10.0)
}

fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

impl Stored {
    /// The compact form of `s`.
    pub fn of(s: &Summary) -> Stored {
        let name = |n: &str| -> String {
            n.chars()
                .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .take(64)
                .collect()
        };
        Stored {
            job: s.job_id,
            array: s.array_job_id.zip(s.array_task_id),
            complete: s.complete,
            elapsed: round(s.elapsed_seconds),
            cpu: (
                round(s.cpu.seconds),
                s.cpu.alloc_cpus,
                round(s.cpu.max_cores),
            ),
            totals: (
                s.totals.memory_peak_bytes,
                s.totals.memory_requested_bytes.unwrap_or(0),
                s.totals.gpus,
                s.totals.gpu_memory_peak_bytes,
                pct_or_none(s.totals.gpu_mean_utilization_percent),
            ),
            job_nodes: s.job_nodes,
            missing: s.missing_nodes.iter().map(|n| name(n)).collect(),
            nodes: s
                .per_node
                .iter()
                .map(|n| {
                    (
                        name(&n.node),
                        round(n.cpu_seconds),
                        n.alloc_cpus,
                        n.peak_bytes,
                        n.requested_bytes.unwrap_or(0),
                        n.steps,
                    )
                })
                .collect(),
            gpus: s
                .gpus
                .iter()
                .map(|g| {
                    (
                        name(&g.node),
                        g.slurm_index.map_or(-1, i64::from),
                        g.job_peak_bytes,
                        g.memory_total_bytes,
                        pct_or_none(g.mean_utilization_percent),
                        pct_or_none(g.max_utilization_percent),
                    )
                })
                .collect(),
            oom_kills: saturating_sum(s.oom.iter().map(|o| o.kills)),
            failed_tasks: s.steps.iter().map(|st| st.failed.len()).sum(),
            classes: Some(s.classes.iter().map(|c| c.tag.clone()).collect()),
            gpu_use: (s.totals.gpus > 0).then(|| {
                let unused = s.gpus.iter().filter(|g| classes::gpu_unused(g)).count();
                let idle = s.gpu_idle.iter().fold(0.0, |t, i| t + i.idle.idle_seconds);
                (u32::try_from(unused).unwrap_or(u32::MAX), round(idle))
            }),
            memory_needed: s.totals.memory_needed_bytes,
            nodes_needed: if s.per_node.len() > 1
                && s.per_node.iter().any(|n| n.needed_peak_bytes.is_some())
            {
                s.per_node.iter().map(|n| n.sizing_bytes()).collect()
            } else {
                Vec::new()
            },
            cut_nodes: 0,
            cut_gpus: 0,
        }
    }

    /// The text to store: [`PREFIX`] and the JSON, at most [`MAX_STORED_BYTES`] bytes. GPU
    /// rows, then node rows, are left out from the end (and counted) until it fits.
    pub fn encode(&self) -> String {
        let mut s = self.clone();
        s.missing.truncate(64);
        // A handful of short tags: fixed in size like the totals.
        if let Some(c) = &mut s.classes {
            c.retain(|t| classes::is_tag(t));
            c.truncate(classes::TAGS.len() + 4);
        }
        // A row takes at least 16 bytes: rows past MAX_STORED_BYTES / 16 never fit, and are
        // cut at once rather than one serialization each (a 1000-node job of 8 GPUs took
        // minutes).
        let most = MAX_STORED_BYTES / 16;
        s.cut_gpus += s.gpus.len().saturating_sub(most);
        s.gpus.truncate(most);
        if s.nodes.len() > most {
            s.nodes_needed.clear();
            s.cut_nodes += s.nodes.len() - most;
            s.nodes.truncate(most);
        }
        loop {
            let json = serde_json::to_string(&s).unwrap_or_default();
            let text = format!("{PREFIX}{}", json.replace('"', "`"));
            if text.len() <= MAX_STORED_BYTES {
                return text;
            }
            if !s.nodes_needed.is_empty() {
                s.nodes_needed.clear();
            } else if s.gpus.pop().is_some() {
                s.cut_gpus += 1;
            } else if s.nodes.pop().is_some() {
                s.nodes_needed.truncate(s.nodes.len());
                s.cut_nodes += 1;
            } else if s.missing.pop().is_none() {
                // Only fixed-size fields are left: the bound holds by construction.
                return text;
            }
        }
    }

    /// Reads a stored text (an `AdminComment`), in either form (`gpu-tracker:1:` or jobstats'
    /// `JS1:` with ours inside: [`super::jobstats`]): [`StoredError::Absent`] when it holds no
    /// gpu-tracker summary.
    pub fn decode(text: &str) -> Result<Stored, StoredError> {
        let text = text.trim();
        if text.starts_with(jobstats::PREFIX) || text.starts_with("js1:") {
            return decode_js1(text);
        }
        let Some(rest) = text.strip_prefix("gpu-tracker:") else {
            return Err(StoredError::Absent);
        };
        let Some(json) = rest.strip_prefix("1:") else {
            let v = rest.split(':').next().unwrap_or_default();
            return Err(StoredError::Newer(format!(
                "format {}",
                crate::step::record::file_safe(v)
            )));
        };
        if text.len() > MAX_STORED_BYTES * 4 {
            return Err(StoredError::Damaged(format!("{} bytes", text.len())));
        }
        serde_json::from_str(&json.replace('`', "\""))
            .map_err(|e| StoredError::Damaged(e.to_string()))
    }

    /// A summary to render from the stored figures (no steps, tasks or notes: those stay in the
    /// spool), its advice worded under `rules` (the site's margins, as for a job in the spool).
    /// `user` and `uid` come from Slurm's database.
    pub fn to_summary(
        &self,
        user: &str,
        uid: u32,
        name: Option<&str>,
        rules: &ClassRules,
    ) -> Summary {
        let mut s = Summary {
            job_id: self.job,
            array_job_id: self.array.map(|a| a.0),
            array_task_id: self.array.map(|a| a.1),
            name: name.map(|n| crate::step::record::clean_text(n, 100)),
            user: crate::step::record::clean_text(user, 64),
            uid,
            job_nodes: self.job_nodes,
            complete: self.complete,
            elapsed_seconds: self.elapsed,
            source: Some(source_text(self)),
            ..Summary::default()
        };
        s.cpu.seconds = self.cpu.0;
        s.cpu.alloc_cpus = self.cpu.1;
        s.cpu.max_cores = self.cpu.2;
        s.cpu.efficiency_percent =
            cpu_efficiency(s.cpu.seconds, s.elapsed_seconds, s.cpu.alloc_cpus);
        let clean = |n: &str| crate::step::record::clean_text(n, 64);
        for (i, (node, cpu, alloc, peak, req, steps)) in self.nodes.iter().enumerate() {
            let requested = (*req > 0).then_some(*req);
            let needed = match (self.nodes.len(), self.nodes_needed.get(i)) {
                (_, Some(b)) => Some(*b),
                (1, None) => self.memory_needed,
                _ => None,
            }
            .map(|b| b.min(*peak));
            s.per_node.push(NodeSummary {
                node: clean(node),
                cpu_seconds: *cpu,
                alloc_cpus: *alloc,
                cpu_efficiency_percent: cpu_efficiency(*cpu, s.elapsed_seconds, *alloc),
                steps: *steps,
                peak_bytes: *peak,
                source: "job cgroup".into(),
                includes_page_cache: true,
                requested_bytes: requested,
                percent_of_request: requested.map(|r| 100.0 * *peak as f64 / r as f64),
                gpu_energy_joules: None,
                needed_peak_bytes: needed,
                needed_peak_source: needed.map(|_| "stored".into()),
            });
        }
        s.nodes = s.per_node.iter().map(|n| n.node.clone()).collect();
        let known = |p: f64| (p >= 0.0).then_some(p);
        for (node, idx, peak, total, mean, max) in &self.gpus {
            s.gpus.push(GpuSummary {
                node: clean(node),
                slurm_index: u32::try_from(*idx).ok(),
                uuid: String::new(),
                name: String::new(),
                memory_total_bytes: *total,
                job_peak_bytes: *peak,
                mean_utilization_percent: known(*mean),
                max_utilization_percent: known(*max),
                ..GpuSummary::default()
            });
        }
        s.missing_nodes = self.missing.iter().map(|n| clean(n)).collect();
        super::nodes::complete_stored(&mut s);
        let (mem, req, gpus, gpu_mem, gpu_util) = self.totals;
        s.totals.memory_peak_bytes = mem;
        s.totals.memory_needed_bytes = self.memory_needed.map(|n| n.min(mem));
        s.totals.memory_requested_bytes = (req > 0).then_some(req);
        s.totals.gpus = gpus;
        s.totals.gpu_memory_peak_bytes = gpu_mem;
        s.totals.gpu_mean_utilization_percent = known(gpu_util);
        let rules = rules.clone();
        if let Some(stored) = &self.classes {
            s.classes = stored
                .iter()
                .filter(|t| classes::is_tag(t))
                .take(classes::TAGS.len() + 4)
                .map(|t| JobClass {
                    tag: t.clone(),
                    reason: classes::rule_of(t).into(),
                })
                .collect();
            s.advice = super::advice::advise(&s, &rules);
        } else {
            // An earlier build stored no classes: those its figures show here. Its OOM kills
            // and failed tasks are counts only (no steps are stored): they are the last two.
            s.set_classes(&rules);
            let mut add = |tag: &str, on: bool| {
                if on {
                    s.classes.push(JobClass {
                        tag: tag.into(),
                        reason: classes::rule_of(tag).into(),
                    });
                }
            };
            add(
                "oom",
                rules.oom_kills > 0 && self.oom_kills >= rules.oom_kills,
            );
            let failed = rules.failed_tasks > 0 && self.failed_tasks >= rules.failed_tasks as usize;
            add("failed", failed);
        }
        s
    }
}

/// The "Source:" line of a summary read back from Slurm's database.
fn source_text(st: &Stored) -> String {
    let mut t = "Slurm's database (the job's AdminComment, stored when it ended); per node and \
                 GPU only: the steps, tasks and notes were in the spool"
        .to_string();
    if st.cut_nodes + st.cut_gpus > 0 {
        t.push_str(&format!(
            "; {} node and {} GPU row(s) were left out to keep it under {MAX_STORED_BYTES} bytes",
            st.cut_nodes, st.cut_gpus
        ));
    }
    if st.oom_kills > 0 || st.failed_tasks > 0 {
        t.push_str(&format!(
            "; {} task(s) failed, {} process(es) were killed for memory",
            st.failed_tasks, st.oom_kills
        ));
    }
    t
}

/// gpu-tracker's summary in a `JS1:` text (`text` starts with [`jobstats::PREFIX`], or is
/// `js1:` that Slurm 22.05's `sacctmgr` lowercased): [`StoredError::Absent`] for jobstats' own
/// summaries, for `JS1:Short` and `JS1:None`, and for a `JS1:` text that does not decode (it is
/// not known to be ours).
fn decode_js1(text: &str) -> Result<Stored, StoredError> {
    if text.starts_with("js1:") {
        return Err(StoredError::Damaged(
            "a JS1 summary that does not decode: lowercased (Slurm 22.05's sacctmgr lowercases \
             what it stores)"
                .into(),
        ));
    }
    let Ok(Some(mut top)) = jobstats::decode_json(text) else {
        return Err(StoredError::Absent);
    };
    match top.remove(jobstats::OURS) {
        Some(v) => serde_json::from_value(v).map_err(|e| StoredError::Damaged(e.to_string())),
        None => Err(StoredError::Absent),
    }
}

/// Whether `text` is a summary of gpu-tracker's, in either form: another tool's comment is
/// anything else (jobstats' own `JS1:` summary among them).
pub fn is_ours(text: &str) -> bool {
    let t = text.trim();
    t.starts_with(PREFIX)
        || (t.starts_with(jobstats::PREFIX) && decode_js1(t).is_ok())
        || t.starts_with("js1:")
}

impl Stored {
    /// This summary as JSON, its rows cut as [`Stored::encode`] cuts them (what a `JS1:` text
    /// carries of ours).
    pub fn bounded_json(&self) -> serde_json::Value {
        Stored::decode(&self.encode())
            .ok()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::StepGpu;
    use crate::step::record::tests_support::record;

    const GIB: u64 = 1 << 30;

    fn two_nodes() -> Summary {
        let mut recs = Vec::new();
        for (node, cpu) in [("n1", 200.0), ("n2", 20.0)] {
            let mut r = record(node, "0");
            r.step.alloc_cpus = Some(4);
            r.cpu.alloc_cpus = 4;
            r.cpu.seconds = cpu;
            r.memory.job_peak_bytes = Some(GIB);
            r.job.alloc_memory_bytes = Some(2 * GIB);
            r.job.nodes = Some(3);
            r.job.node_list = Some("n[1-3]".into());
            r.gpus = vec![StepGpu {
                slurm_index: Some(0),
                uuid: format!("GPU-{node}"),
                memory_total_bytes: 16 * GIB,
                peak_step_memory_bytes: GIB,
                mean_utilization_percent: Some(if node == "n1" { 90.0 } else { 5.0 }),
                max_utilization_percent: Some(100.0),
                ..StepGpu::default()
            }];
            recs.push(r);
        }
        Summary::from_records(&recs)
    }

    #[test]
    fn a_stored_summary_reads_back_to_the_same_job_figures() {
        let s = two_nodes();
        let text = Stored::of(&s).encode();
        assert!(text.starts_with(PREFIX), "{text}");
        assert!(text.len() < 600, "{} bytes: {text}", text.len());
        // Nothing sacctmgr or sacct -P would change or split.
        assert!(!text.contains(['|', '\n', '"', '\'', ' ']), "{text}");
        let lowered = Stored::decode(&text.to_lowercase()).unwrap();
        assert_eq!(lowered, Stored::decode(&text).unwrap());
        let back = Stored::decode(&text).unwrap().to_summary(
            "alice",
            1001,
            Some("train"),
            &ClassRules::default(),
        );
        assert_eq!(back.job_id, 42);
        assert_eq!(back.nodes, vec!["n1", "n2"]);
        assert_eq!(back.missing_nodes, vec!["n3"]);
        assert_eq!(back.job_nodes, Some(3));
        assert_eq!(back.per_node[1].peak_bytes, GIB);
        assert_eq!(back.per_node[1].requested_bytes, Some(2 * GIB));
        assert_eq!(back.cpu.seconds, 220.0);
        assert_eq!(back.gpus.len(), 2);
        assert_eq!(back.gpus[1].mean_utilization_percent, Some(5.0));
        let flags: Vec<&str> = back.imbalance.iter().map(|i| i.what.as_str()).collect();
        assert_eq!(flags, vec!["n2", "GPU 0 on n2"], "{:?}", back.imbalance);
    }

    #[test]
    fn a_job_too_large_for_the_bound_keeps_its_totals_and_counts_what_was_cut() {
        let mut st = Stored::of(&two_nodes());
        let row = st.nodes[0].clone();
        st.nodes = (0..500)
            .map(|i| (format!("node{i:04}"), row.1, row.2, row.3, row.4, row.5))
            .collect();
        let text = st.encode();
        assert!(text.len() <= MAX_STORED_BYTES, "{}", text.len());
        let back = Stored::decode(&text).unwrap();
        assert_eq!(back.cut_gpus, 2);
        assert_eq!(back.nodes.len() + back.cut_nodes, 500);
        assert_eq!(back.cpu, st.cpu);
        assert_eq!(back.totals, st.totals);
        let shown = back.to_summary("alice", 1001, None, &ClassRules::default());
        assert_eq!(
            shown.totals.memory_peak_bytes,
            2 * GIB,
            "the totals of every node"
        );
    }

    #[test]
    fn the_documented_job_sizes_fit_whole() {
        let node = |i: usize| format!("gpu-node-{i:03}");
        let row = |i: usize| (node(i), 123_456.78, 64, 412_316_860_416, 549_755_813_888, 3);
        let gpu = |i: usize, g: i64| (node(i), g, 85_899_345_920, 85_899_345_920, 87.3, 100.0);
        let mut st = Stored::of(&two_nodes());
        // Every node with its needed peak, as this build stores them.
        st.memory_needed = Some(13 * 312_316_860_416);
        st.nodes_needed = vec![312_316_860_416; 13];
        st.nodes = (0..13).map(row).collect();
        st.gpus = (0..13)
            .flat_map(|i| (0..4).map(move |g| gpu(i, g)))
            .collect();
        let back = Stored::decode(&st.encode()).unwrap();
        assert_eq!((back.cut_nodes, back.cut_gpus), (0, 0));
        assert_eq!(back.memory_needed, st.memory_needed);
        st.gpus.clear();
        st.nodes = (0..65).map(row).collect();
        st.nodes_needed = vec![312_316_860_416; 65];
        let back = Stored::decode(&st.encode()).unwrap();
        assert_eq!(back.cut_nodes, 0);
        // The nodes' needed peaks are the first left out; the total stays.
        assert_eq!(back.nodes_needed.len(), 0);
        assert_eq!(back.memory_needed, st.memory_needed);
        st.nodes.truncate(8);
        st.nodes_needed.truncate(8);
        let back = Stored::decode(&st.encode()).unwrap();
        assert_eq!(back.nodes_needed.len(), 8);
    }

    #[test]
    fn classes_are_stored_and_read_back_and_an_old_summary_gets_them_from_its_figures() {
        // n2's GPU: no process of the job; memory far under the request.
        let mut s = two_nodes();
        s.gpus[1].job_peak_bytes = 0;
        s.gpus[1].mean_utilization_percent = Some(0.0);
        s.gpus[1].max_utilization_percent = Some(0.0);
        for n in &mut s.per_node {
            n.requested_bytes = Some(16 * GIB);
        }
        s.set_classes(&ClassRules::default());
        assert_eq!(s.class_tags(), "gpu-unused, mem-over");
        let text = Stored::of(&s).encode();
        assert!(text.contains("`cl`:[`gpu-unused`,`mem-over`]"), "{text}");
        let back =
            Stored::decode(&text)
                .unwrap()
                .to_summary("alice", 1001, None, &ClassRules::default());
        assert_eq!(back.class_tags(), "gpu-unused, mem-over");
        assert_eq!(back.classes[0].reason, classes::rule_of("gpu-unused"));
        // The GPUs no process ran on, and their idle time, for the site report.
        assert!(text.contains("`gu`:[1,0.0]"), "{text}");
        assert_eq!(Stored::decode(&text).unwrap().gpu_use, Some((1, 0.0)));
        let codes: Vec<&str> = back.advice.iter().map(|a| a.code).collect();
        assert!(codes.contains(&"memory-over-requested"), "{codes:?}");
        // A job in no class stores `[]`, and reads back in none whatever its figures show.
        let mut none = Stored::of(&s);
        none.classes = Some(Vec::new());
        let back = Stored::decode(&none.encode()).unwrap().to_summary(
            "alice",
            1001,
            None,
            &ClassRules::default(),
        );
        assert!(back.classes.is_empty() && back.advice.is_empty());
        // A summary stored by an earlier build: no `cl`, all counts written.
        let old = "gpu-tracker:1:{`job`:42,`complete`:true,`elapsed`:60.0,`cpu`:[220.0,8,1.0],\
                   `totals`:[2147483648,34359738368,0,0,-1.0],`nodes`:[[`n1`,200.0,4,1073741824,\
                   17179869184,1],[`n2`,20.0,4,1073741824,17179869184,1]],`oom_kills`:0,\
                   `failed_tasks`:0,`cut_nodes`:0,`cut_gpus`:0}";
        let st = Stored::decode(old).unwrap();
        assert_eq!(st.classes, None);
        let back = st.to_summary("alice", 1001, None, &ClassRules::default());
        assert_eq!(back.class_tags(), "mem-over");
        assert_eq!(back.advice[0].code, "memory-over-requested");
        let failed = old.replace("`failed_tasks`:0", "`failed_tasks`:2");
        let back = Stored::decode(&failed).unwrap().to_summary(
            "alice",
            1001,
            None,
            &ClassRules::default(),
        );
        assert_eq!(back.class_tags(), "mem-over, failed");
        // Text that is no tag is dropped.
        let odd = text.replace("`gpu-unused`", "`GPU\\u001b[31m`");
        let back =
            Stored::decode(&odd)
                .unwrap()
                .to_summary("alice", 1001, None, &ClassRules::default());
        assert_eq!(back.class_tags(), "mem-over");
    }

    #[test]
    fn other_comments_newer_formats_and_damage_are_told_apart() {
        assert_eq!(Stored::decode(""), Err(StoredError::Absent));
        assert_eq!(Stored::decode("JS1:H4sI..."), Err(StoredError::Absent));
        assert!(matches!(
            Stored::decode("gpu-tracker:2:{}"),
            Err(StoredError::Newer(_))
        ));
        assert!(matches!(
            Stored::decode("gpu-tracker:1:{\"job\": "),
            Err(StoredError::Damaged(_))
        ));
    }
}
