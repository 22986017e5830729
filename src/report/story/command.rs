//! A command run by `gpu-tracker -e`, as a step record: so that the exports and plots of jobs
//! serve commands too.

use crate::step::record::StepRecord;

/// A record of a command run by `gpu-tracker -e`, from its [`crate::history::Story`]: so that the
/// exports and plots of jobs serve commands too. `gpus` are the GPUs read (UUID, NVML index).
pub fn command_record(
    story: &crate::history::Story,
    command: &str,
    elapsed_seconds: f64,
    gpus: &[(String, u32)],
) -> StepRecord {
    use crate::step::record::*;
    let host = crate::sys::hostname();
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: chrono::Local::now().to_rfc3339(),
        tracker_version: env!("CARGO_PKG_VERSION").into(),
        job: JobInfo {
            user: crate::sys::user_name(crate::sys::uid()).unwrap_or_default(),
            uid: crate::sys::uid(),
            name: Some(clean_text(command, 100)),
            ..JobInfo::default()
        },
        step: StepInfo {
            id: "command".into(),
            kind: "command".into(),
            node: host.clone(),
            hostname: host,
            elapsed_seconds,
            command: Some(clean_text(command, 200)),
            ..StepInfo::default()
        },
        tasks: Vec::new(),
        memory: StepMemory::default(),
        cpu: StepCpu::default(),
        gpus: story
            .timeline
            .gpus
            .iter()
            .enumerate()
            .map(|(i, uuid)| StepGpu {
                uuid: uuid.clone(),
                nvml_index: gpus
                    .iter()
                    .find(|(u, _)| u == uuid)
                    .map_or(i as u32, |(_, n)| *n),
                idle: story.idle.get(i).cloned().flatten(),
                ..StepGpu::default()
            })
            .collect(),
        sampler: SamplerStats::default(),
        timeline: Some(story.timeline.clone()),
        events: story.events.clone(),
        events_dropped: story.events_dropped,
        pressure: Some(crate::history::pressure::StepPressure::unavailable(
            "gpu-tracker -e does not read pressure stall figures: the command's cgroup is \
             rarely its own"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::events;
    use super::super::tests_support::health_rec;
    use super::*;

    #[test]
    fn a_commands_gpu_health_events_are_told_as_a_jobs_are() {
        let job = health_rec("vm", "batch", 100.0);
        let story = crate::history::Story {
            timeline: job.timeline.clone().unwrap(),
            events: job.events.clone(),
            events_dropped: 0,
            idle: vec![None],
        };
        let rec = command_record(&story, "python train.py", 10.0, &[]);
        let told = |r: &StepRecord| -> Vec<(f64, String)> {
            events(std::slice::from_ref(r))
                .into_iter()
                .map(|e| (e.t, e.event.detail))
                .collect()
        };
        assert_eq!(told(&rec).len(), 3);
        assert_eq!(told(&rec), told(&job));
        assert!(
            told(&rec)[0]
                .1
                .ends_with("Xid 79: the GPU fell off the bus")
        );
    }
}
