use super::*;
use crate::report::figures::{GpuSummary, NodeSummary, OomEvent, StepSummary, TaskFailure};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The summary of task `task` (job 100 + task) of array 100.
fn task(task: u32, elapsed: f64, peak: u64) -> Summary {
    Summary {
        job_id: 100 + task,
        array_job_id: Some(100),
        array_task_id: Some(task),
        user: "alice".into(),
        uid: 1001,
        complete: true,
        elapsed_seconds: elapsed,
        per_node: vec![NodeSummary {
            node: "n1".into(),
            peak_bytes: peak,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn figures(list: &[(f64, u64)]) -> Vec<TaskFigures> {
    list.iter()
        .enumerate()
        .map(|(i, (e, p))| TaskFigures::of(&task(i as u32, *e, *p)))
        .collect()
}

#[test]
fn median_of_odd_and_even_counts() {
    let odd = Spread::of([5.0, 1.0, 3.0]).unwrap();
    assert_eq!((odd.min, odd.median, odd.max), (1.0, 3.0, 5.0));
    let even = Spread::of([4.0, 1.0, 3.0, 10.0]).unwrap();
    assert_eq!((even.min, even.median, even.max), (1.0, 3.5, 10.0));
    assert_eq!(Spread::of([7.0]).unwrap().median, 7.0);
    assert!(Spread::of([]).is_none());
    assert!(Spread::of([f64::NAN]).is_none());
}

#[test]
fn outliers_are_more_than_twice_or_less_than_half_the_median() {
    // Medians: elapsed 100 s, peak 1 GiB.
    let t = figures(&[
        (100.0, GIB),
        (90.0, GIB),
        (110.0, GIB),
        (201.0, GIB),
        (100.0, 400 * MIB),
    ]);
    let o = outliers(&t);
    let got: Vec<(u32, &str)> = o.iter().map(|x| (x.task_id, x.figure)).collect();
    assert_eq!(got, vec![(3, "elapsed"), (4, "peak_memory")]);
    assert!((o[0].ratio - 2.01).abs() < 1e-9);
    assert_eq!(o[1].median, GIB as f64);
    // Exactly twice or half is not far.
    assert!(
        outliers(&figures(&[
            (100.0, GIB),
            (200.0, GIB),
            (50.0, GIB),
            (100.0, GIB)
        ]))
        .is_empty()
    );
    // Fewer than four tasks: none named.
    assert!(outliers(&figures(&[(1.0, GIB), (100.0, GIB), (100.0, GIB)])).is_empty());
}

#[test]
fn right_size_takes_the_largest_task_with_its_margins() {
    // Largest peak 3 GiB: × 1.2 = 3.6 GiB, rounded up to 256 MiB: 3840M. Longest 10 min:
    // × 1.5 = 15 min.
    let r = RightSize::of(
        &figures(&[(600.0, 3 * GIB), (60.0, GIB)]),
        &Sizing::default(),
    );
    assert_eq!(r.mem.as_deref(), Some("3840M"));
    assert_eq!(r.time.as_deref(), Some("00:15:00"));
    assert_eq!(r.gres, None);
    assert_eq!(
        r.line,
        "--mem=3840M --time=00:15:00 (largest task's peak 3.00 GiB + 20%; longest task 00:10:00 + 50%, whole minutes, at least 10 minutes)"
    );
    // Above 4 GiB whole GiB; a time rounded up to the next minute (with a site's shortest
    // of one minute; ten by default); days as Slurm writes them.
    let one_minute = Sizing {
        min_time_seconds: 60,
        ..Sizing::default()
    };
    let r = RightSize::of(&figures(&[(61.0, 10 * GIB)]), &one_minute);
    assert_eq!(r.mem.as_deref(), Some("12G"));
    assert_eq!(r.time.as_deref(), Some("00:02:00"));
    let r = RightSize::of(&figures(&[(61.0, 10 * GIB)]), &Sizing::default());
    assert_eq!(r.time.as_deref(), Some("00:10:00"));
    let r = RightSize::of(&figures(&[(86_400.0, 0)]), &Sizing::default());
    assert_eq!((r.mem, r.time.as_deref()), (None, Some("1-12:00:00")));
    assert_eq!(slurm_time(59), "00:00:59");
}

#[test]
fn gres_is_the_most_gpus_a_task_held_memory_on() {
    // Read GPUs, idle apart from what the task's processes held.
    let gpu = |used: u64| GpuSummary {
        job_peak_bytes: used,
        memory_total_bytes: 16 * GIB,
        max_utilization_percent: Some(0.0),
        ..Default::default()
    };
    let mut a = task(0, 60.0, GIB);
    a.gpus = vec![gpu(GIB), gpu(0)];
    let mut b = task(1, 60.0, GIB);
    b.gpus = vec![gpu(GIB), gpu(GIB)];
    let r = RightSize::of(
        &[TaskFigures::of(&a), TaskFigures::of(&b)],
        &Sizing::default(),
    );
    assert_eq!(r.gres.as_deref(), Some("gpu:2"));
    assert!(r.line.contains("--gres=gpu:2"), "{}", r.line);
    b.gpus = vec![gpu(0), gpu(0)];
    a.gpus = vec![gpu(0)];
    let r = RightSize::of(
        &[TaskFigures::of(&a), TaskFigures::of(&b)],
        &Sizing::default(),
    );
    assert_eq!(r.gres, None);
    let options = r.line.split(" (").next().unwrap_or_default();
    assert!(!options.contains("--gres"), "{}", r.line);
    assert!(
        r.line.ends_with("; no --gres=gpu: no task used its GPU)"),
        "{}",
        r.line
    );
}

#[test]
fn counts_spreads_and_classes_over_the_tasks() {
    let mut failed = task(2, 30.0, GIB);
    failed.steps = vec![StepSummary {
        failed: vec![TaskFailure {
            exit_code: Some(1),
            ..Default::default()
        }],
        ..Default::default()
    }];
    let mut oom = task(1, 20.0, 2 * GIB);
    oom.oom = vec![OomEvent {
        kills: 1,
        ..Default::default()
    }];
    oom.steps = failed.steps.clone();
    let mut running = task(3, 40.0, GIB);
    running.complete = false;
    let a = ArraySummary::of(
        100,
        &[running, failed, task(0, 10.0, GIB), oom],
        &Sizing::default(),
    );
    assert_eq!(
        (
            a.tasks_found,
            a.completed,
            a.failed,
            a.oom_killed,
            a.incomplete
        ),
        (4, 1, 2, 1, 1)
    );
    let ids: Vec<u32> = a.tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    assert_eq!(a.elapsed_seconds.unwrap().median, 25.0);
    assert_eq!(a.peak_memory_bytes.unwrap().max, (2 * GIB) as f64);
    assert!(a.gpu_memory_bytes.is_none() && a.gpu_utilization_percent.is_none());
    assert!(a.classes.is_empty());
    let c = count_classes(["io-bound", "gpu-idle", "io-bound"]);
    assert_eq!(c.get("io-bound"), Some(&2));
    assert_eq!(c.get("gpu-idle"), Some(&1));
    let json = a.to_json(&[]);
    assert!(json.contains("\"schema\": \"gpu-tracker/array\""), "{json}");
    let text = text::render(&a, &["job 9: x".into()], &Default::default());
    assert!(
        text.contains("Tasks:         4 found: 1 completed, 2 failed, 1 OOM-killed"),
        "{text}"
    );
    assert!(text.contains("Note:          job 9: x"), "{text}");
}

#[test]
fn tasks_killed_for_memory_or_out_of_time_make_next_time_a_guess_above_their_limit() {
    // Two of four tasks killed at their 1 GiB limit, two that needed 300 MiB.
    let killed = |t: u32| {
        let mut s = task(t, 60.0, GIB);
        s.oom = vec![OomEvent {
            node: "n1".into(),
            kills: 1,
            peak_bytes: GIB,
            limit_bytes: Some(GIB),
            ..Default::default()
        }];
        s
    };
    let tasks = [
        killed(0),
        killed(1),
        task(2, 60.0, 300 * MIB),
        task(3, 60.0, 300 * MIB),
    ];
    let a = ArraySummary::of(100, &tasks, &Sizing::default());
    let r = &a.right_size;
    assert_eq!((r.mem.as_deref(), r.mem_guess), (Some("2G"), true));
    assert!(!r.time_guess);
    assert!(
        r.line.contains(
            "a guess for memory: 2 of 4 task(s) killed at their 1.00 GiB limit, how much more they needed is not known; twice the limit hit, or the other tasks' largest peak 300.0 MiB + 20% where more"
        ),
        "{}",
        r.line
    );
    let text = text::render(&a, &[], &Default::default());
    assert!(
        text.contains("Next time:     --mem=2G --time=00:10:00 (a guess"),
        "{text}"
    );
    // Out of time at 30 minutes: an hour, a guess; never the stopped task's time + 50 %.
    let mut late = task(4, 1801.0, GIB);
    late.runs = vec![crate::report::figures::RunSummary {
        run: 1,
        ended: "ran-out-of-time".into(),
        elapsed_seconds: 1801.0,
        time_limit_seconds: Some(1800),
        ..Default::default()
    }];
    let t = TaskFigures::of(&late);
    assert_eq!((t.timed_out, t.time_limit_seconds), (true, Some(1800)));
    let r = RightSize::of(
        &[t, TaskFigures::of(&task(5, 60.0, GIB))],
        &Sizing::default(),
    );
    assert_eq!((r.time.as_deref(), r.time_guess), (Some("01:00:00"), true));
    assert!(
        r.line
            .contains("a guess for time: 1 of 2 task(s) ran out of their 00:30:00 limit"),
        "{}",
        r.line
    );
}
