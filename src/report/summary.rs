//! A job's figures merged from its step records: the job as a whole, each step on each node.
//! The figures themselves are plain data in [`super::figures`]; the records are merged one at
//! a time by [`super::fold`]; per-node rows, job totals and imbalance are filled in by
//! [`super::nodes`], classes and advice by [`super::classes`].

use super::figures::Summary;
use super::fold::JobFold;
use crate::step::record::StepRecord;

impl Summary {
    /// Merges `records` (of one job; any order) one at a time ([`JobFold`]). An empty slice
    /// gives an empty summary.
    pub fn from_records(records: &[StepRecord]) -> Summary {
        Summary::fold(JobFold::new(), records)
    }

    fn fold(mut fold: JobFold, records: &[StepRecord]) -> Summary {
        for r in records {
            fold.add(r);
        }
        let phases = fold.phases().map(|mut p| {
            for r in records {
                p.add(r);
            }
            p.finish()
        });
        fold.finish(phases.unwrap_or_default())
    }

    /// Evaluates the job's classes under `rules` and builds the advice from them. Called once
    /// where a summary is finished (with the built-in rules); again with the site's rules,
    /// where the caller has the site's settings.
    pub fn set_classes(&mut self, rules: &super::classes::ClassRules) {
        super::pressure::explain(self, rules.pressure_percents());
        self.classes = super::classes::classify(self, rules);
        self.advice = super::advice::advise(self, rules);
    }

    /// Adds the emissions of the GPUs' energy at the site's `grams_per_kwh` (0: the site set
    /// none, and the summary has no emissions line).
    pub fn set_co2(&mut self, grams_per_kwh: f64) {
        if grams_per_kwh > 0.0
            && let Some(j) = self.totals.gpu_energy_joules
        {
            self.totals.co2_grams = Some(j / 3.6e6 * grams_per_kwh);
            self.totals.co2_grams_per_kwh = Some(grams_per_kwh);
        }
    }

    /// The summary of one step's records (`<job>.<step>`): like [`Summary::from_records`], but
    /// memory is the step's own peak, not the whole job's.
    pub fn of_step(records: &[StepRecord], step: &str) -> Summary {
        let mut s = Summary::fold(JobFold::of_step(), records);
        s.only_step = Some(step.to_string());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::tests_support::{batch_with_memory as job, record};

    const GIB: u64 = 1 << 30;

    fn s1_with_job_peak() -> StepRecord {
        let mut r = record("n1", "1");
        r.memory.job_peak_bytes = Some(3 * GIB);
        r
    }

    #[test]
    fn gpu_energy_adds_up_per_step_node_and_job_and_emissions_only_where_the_site_says() {
        use crate::step::record::StepGpu;
        let gpu = |uuid: &str, j: Option<f64>| StepGpu {
            uuid: uuid.into(),
            energy_joules: j,
            mean_utilization_percent: Some(50.0),
            ..StepGpu::default()
        };
        let mut b1 = job(GIB, 4 * GIB);
        b1.gpus = vec![gpu("GPU-a", Some(3600.0)), gpu("GPU-b", Some(7200.0))];
        let mut b2 = job(GIB, 4 * GIB);
        b2.step.node = "n2".into();
        b2.gpus = vec![gpu("GPU-c", None)];
        let mut s = Summary::from_records(&[b1, b2]);
        assert_eq!(s.steps[0].gpu_energy_joules, Some(10800.0));
        assert_eq!(s.per_node[0].gpu_energy_joules, Some(10800.0));
        assert_eq!(
            s.per_node[1].gpu_energy_joules, None,
            "not measured is not 0"
        );
        assert_eq!(s.totals.gpu_energy_joules, Some(10800.0));
        s.set_co2(0.0);
        assert_eq!(s.totals.co2_grams, None);
        s.set_co2(400.0);
        // 3 Wh at 400 g/kWh.
        assert!((s.totals.co2_grams.unwrap() - 1.2).abs() < 1e-9);
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(
            text.contains(
                "GPU energy:    3.0 Wh on 2 GPU(s); about 1 g CO2 at the site's 400 g/kWh"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_gpu_held_by_the_batch_script_and_its_srun_step_is_the_jobs_alone() {
        use crate::gpu::Shared;
        use crate::step::record::StepGpu;
        // Each step saw the other's 1 GiB holder beside its own, and knew it for the job's.
        let saw_sibling = Shared::decide(None, false, 1).map(|s| Shared {
            other_step_processes: Some(1),
            outside_job_processes: Some(0),
            ..s
        });
        let gpu = |shared: Option<Shared>| StepGpu {
            uuid: "GPU-a".into(),
            peak_step_memory_bytes: GIB,
            peak_job_memory_bytes: Some(2 * GIB),
            shared,
            ..StepGpu::default()
        };
        let mut b = job(GIB, 4 * GIB);
        b.gpus = vec![gpu(saw_sibling.clone())];
        let mut s0 = record("n1", "0");
        s0.gpus = vec![gpu(saw_sibling.clone())];
        let s = Summary::from_records(&[b.clone(), s0.clone()]);
        assert_eq!(s.gpus[0].shared, None);
        // The job's processes held both holders at once.
        assert_eq!(s.gpus[0].job_peak_bytes, 2 * GIB);
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(!text.contains("shared"), "{text}");
        // Another job's process beside them: shared, with that one process named.
        s0.gpus[0].shared = saw_sibling.map(|sh| Shared {
            other_processes: 2,
            outside_job_processes: Some(1),
            ..sh
        });
        let s = Summary::from_records(&[b, s0]);
        let sh = s.gpus[0].shared.as_ref().expect("shared with others");
        assert_eq!(
            (sh.by.as_str(), sh.outside_job_processes),
            ("other_processes", Some(1))
        );
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(
            text.contains("shared with 1 process(es) of others seen on it"),
            "{text}"
        );
    }

    #[test]
    fn a_gpu_figure_has_no_value_for_the_job_only_when_no_step_measured_it() {
        use crate::gpu::figures::{GpuDepth, NoData, Spread, figure};
        use crate::step::record::StepGpu;
        let gpu = |depth: GpuDepth| StepGpu {
            uuid: "GPU-a".into(),
            depth,
            ..StepGpu::default()
        };
        let mut b = job(GIB, 4 * GIB);
        b.gpus = vec![gpu(GpuDepth::unsampled("too short"))];
        let mut s0 = record("n1", "0");
        s0.gpus = vec![gpu(GpuDepth {
            sm_active_percent: Some(Spread {
                mean: 30.0,
                max: 50.0,
            }),
            ..GpuDepth::default()
        })];
        let mut s1 = record("n1", "1");
        let mut no_gpm = GpuDepth::default();
        no_gpm.no_data.insert(
            figure::SM_ACTIVITY.into(),
            NoData::not_sampled("one reading"),
        );
        s1.gpus = vec![gpu(no_gpm)];
        for order in [[&b, &s0, &s1], [&s1, &s0, &b]] {
            let recs: Vec<_> = order.iter().map(|r| (*r).clone()).collect();
            let s = Summary::from_records(&recs);
            let d = &s.gpus[0].depth;
            assert!(d.no_data.is_empty(), "{:?}", d.no_data);
            assert_eq!(d.sm_active_percent.map(|x| x.mean), Some(30.0));
        }
        let s = Summary::from_records(&[b]);
        assert_eq!(s.gpus[0].depth.no_data.len(), 8);
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(
            text.contains("memory: n/a, not sampled: too short"),
            "{text}"
        );
    }

    #[test]
    fn steps_merge_into_the_job() {
        let mut b = job(GIB, 4 * GIB);
        b.cpu.seconds = 10.0;
        let mut s0 = record("n1", "0");
        s0.cpu.seconds = 50.0;
        s0.memory.peak_bytes = 2 * GIB;
        s0.tasks[0].exit_code = Some(3);
        s0.step.command = Some("python\u{1b}[2J train.py".into());
        s0.complete = false;
        let s = Summary::from_records(&[s0, b]);
        assert_eq!(s.steps[0].id, "batch");
        assert_eq!(s.cpu.seconds, 60.0);
        assert_eq!(s.per_node[0].peak_bytes, 2 * GIB);
        assert!(!s.complete);
        assert!(s.any_failed());
        assert_eq!(s.steps[1].command.as_deref(), Some("python?[2J train.py"));
        // Incomplete figures give no memory advice.
        assert!(s.advice.iter().all(|a| a.code != "memory-over-requested"));
        // Two steps at once peak higher together than either: the job cgroup's peak counts.
        let mut both = s1_with_job_peak();
        both.memory.peak_bytes = GIB;
        let s = Summary::from_records(&[both]);
        assert_eq!(s.per_node[0].peak_bytes, 3 * GIB);
        assert_eq!(s.per_node[0].source, "job cgroup");
    }
}
