//! The live state's tests: from a sample's figures, its file name, parsing.

use super::*;
use crate::gpu::{GpuInfo, GpuReading, GpuSource};
use crate::sampler::Timepoint;
use crate::units::Units;
use std::collections::HashSet;

fn identity() -> Identity {
    Identity {
        cluster: "Big Iron".into(),
        job_id: 4242,
        step: "batch".into(),
        user: "alice".into(),
        uid: 1001,
        node: "gpu/07\u{1b}".into(),
        stepd_pid: 999,
        started_at: 1_700_000_000.5,
        alloc_cpus: Some(8),
    }
}

/// Two GPUs; NVML's index 0 is Slurm's 1 and the reverse.
struct Two(Vec<GpuInfo>);

impl GpuSource for Two {
    fn devices(&self) -> &[GpuInfo] {
        &self.0
    }
    fn read(&mut self, i: usize) -> Option<GpuReading> {
        Some(GpuReading {
            used: Some(5 << 30),
            utilization: Some(if i == 0 { 97 } else { 0 }),
            energy_mj: Some(1_000_000 * (i as u64 + 1)),
            processes: vec![(10, Some(3 << 30)), (77, Some(1 << 30))],
            ..GpuReading::default()
        })
    }
}

#[test]
fn the_state_is_what_the_sample_left() {
    let mut acc = Acc::new(std::time::Duration::from_secs(1));
    acc.latest = super::super::state::Latest {
        memory_bytes: Some(3 << 30),
        memory_peak_bytes: Some(4 << 30),
        memory_limit_bytes: Some(8 << 30),
        cpu_seconds: Some(123.5),
        cores_busy: Some(7.5),
        pressure: None,
    };
    let devs: Vec<GpuInfo> = (0..2)
        .map(|i| GpuInfo {
            uuid: format!("GPU-{i}"),
            memory_total: 80 << 30,
            ..GpuInfo::for_test(i, Some(i))
        })
        .collect();
    acc.gpu_devices = vec![(Some(1), devs[0].clone()), (Some(0), devs[1].clone())];
    let mut src = Two(devs);
    let members: HashSet<u32> = [10].into();
    for _ in 0..2 {
        acc.gpu.sample(
            &mut src,
            0,
            &members,
            None,
            1.0,
            &Units::default(),
            &mut Timepoint::default(),
            &mut Vec::new(),
        );
    }
    let s = state_of(&identity(), &acc, 5.0, 1_700_000_100.25);
    assert_eq!(s.schema, "gpu-tracker/live");
    assert_eq!((s.job_id, s.step.as_str(), s.uid), (4242, "batch", 1001));
    assert_eq!((s.written_at, s.interval_seconds), (1_700_000_100.25, 5.0));
    assert_eq!(s.memory.peak_bytes, Some(4 << 30));
    assert_eq!(s.cpu.cores_busy, Some(7.5));
    assert_eq!(s.gpus.len(), 2);
    let g = &s.gpus[0];
    // Slurm's index; only the step's process (pid 10) counted; energy since the first.
    assert_eq!((g.index, g.uuid.as_str()), (1, "GPU-0"));
    assert_eq!(g.memory_used_bytes, Some(3 << 30));
    assert_eq!(g.utilization_percent, Some(97.0));
    assert_eq!((g.sm_active_percent, g.energy_joules), (None, Some(0.0)));
    assert_eq!(s.gpus[1].index, 0);
    // No command line, path or environment: the whole file, field by field.
    let v: serde_json::Value = serde_json::to_value(&s).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "schema",
            "schema_version",
            "cluster",
            "job_id",
            "step",
            "user",
            "uid",
            "node",
            "stepd_pid",
            "written_at",
            "started_at",
            "interval_seconds",
            "alloc_cpus",
            "memory",
            "cpu",
            "pressure",
            "gpus"
        ]
    );
    // A sampler slowed down past the live interval: the file says when the next comes.
    acc.pace.current = std::time::Duration::from_secs(60);
    assert_eq!(state_of(&identity(), &acc, 5.0, 0.0).interval_seconds, 60.0);
    // Before any sample: nothing known, nothing made up.
    let empty = state_of(
        &identity(),
        &Acc::new(std::time::Duration::from_secs(1)),
        5.0,
        0.0,
    );
    assert_eq!(empty.memory, LiveMemory::default());
    assert!(empty.gpus.is_empty());
    assert_eq!(empty.pressure, None);
}

#[test]
fn the_state_carries_the_pressure_counters_or_why_there_are_none() {
    use crate::cgroup::pressure::Stall;
    let mut acc = Acc::new(std::time::Duration::from_secs(1));
    acc.latest.pressure = Some(Ok(PressureTotals {
        cpu: Stall {
            some_us: 7_000_000,
            full_us: None,
        },
        memory: Stall {
            some_us: 0,
            full_us: Some(0),
        },
        io: Stall {
            some_us: 3_250_000,
            full_us: Some(2_000_001),
        },
    }));
    let s = state_of(&identity(), &acc, 5.0, 10.0);
    let p = s.pressure.unwrap();
    let [cpu, memory, io] = p.counters().unwrap();
    assert_eq!((cpu.some_us, cpu.full_us), (7_000_000, None));
    assert_eq!(memory.full_us, Some(0));
    assert_eq!((io.some_us, io.full_us), (3_250_000, Some(2_000_001)));
    // The kernel's integers, exactly, and no reason.
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(
        v["pressure"],
        serde_json::json!({
            "unavailable": null,
            "cpu": {"some_us": 7_000_000, "full_us": null},
            "memory": {"some_us": 0, "full_us": 0},
            "io": {"some_us": 3_250_000, "full_us": 2_000_001}
        })
    );
    assert_eq!(
        parse(v.to_string().as_bytes()),
        Parsed::State(Box::new(s.clone()))
    );

    // Why not, in a word the file names.
    for (why, word) in [
        (Unavailable::CgroupV1, "cgroup_v1"),
        (Unavailable::Off("no io.pressure".into()), "psi_off"),
        (Unavailable::Unreadable("EIO".into()), "unreadable"),
    ] {
        acc.latest.pressure = Some(Err(why));
        let s = state_of(&identity(), &acc, 5.0, 10.0);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["pressure"]["unavailable"], word, "{v}");
        assert!(v["pressure"]["cpu"].is_null(), "{v}");
        let p = s.pressure.unwrap();
        assert_eq!(p.counters().unwrap_err().as_str(), word);
        assert_eq!(parse(v.to_string().as_bytes()), Parsed::State(Box::new(s)));
    }
}

#[test]
fn a_file_without_pressure_or_with_odd_pressure_is_read_with_care() {
    let mut acc = Acc::new(std::time::Duration::from_secs(1));
    acc.latest.pressure = Some(Err(Unavailable::CgroupV1));
    let s = state_of(&identity(), &acc, 5.0, 10.0);
    let v = serde_json::to_value(&s).unwrap();
    // An earlier build's file: no field at all.
    let mut old = v.clone();
    old.as_object_mut().unwrap().remove("pressure");
    match parse(old.to_string().as_bytes()) {
        Parsed::State(o) => assert_eq!(o.pressure, None),
        other => panic!("{other:?}"),
    }
    let with = |p: serde_json::Value| {
        let mut v = v.clone();
        v["pressure"] = p;
        parse(v.to_string().as_bytes())
    };
    let pressure_of = |p: Parsed| match p {
        Parsed::State(s) => s.pressure.unwrap(),
        other => panic!("{other:?}"),
    };
    // A reason of a later build: known to be one, not which.
    let later = pressure_of(with(serde_json::json!({"unavailable": "psi_asleep"})));
    assert_eq!(later.counters(), Err(PressureMissing::Unknown));
    // A resource missing, or a reason beside counters: no counters.
    let part = pressure_of(with(serde_json::json!({"cpu": {"some_us": 1}})));
    assert_eq!(part.cpu.unwrap().full_us, None);
    assert_eq!(part.counters(), Err(PressureMissing::Unknown));
    let stall = serde_json::json!({"some_us": 1, "full_us": 1});
    let both =
        serde_json::json!({"unavailable": "psi_off", "cpu": stall, "memory": stall, "io": stall});
    assert_eq!(
        pressure_of(with(both)).counters(),
        Err(PressureMissing::PsiOff)
    );
    // A counter that is negative, fractional or not a number is no live state.
    for bad in [
        serde_json::json!(-1),
        serde_json::json!(1.5),
        serde_json::json!("7"),
        serde_json::json!(1e30),
    ] {
        let p = serde_json::json!({"cpu": {"some_us": bad}, "memory": stall, "io": stall});
        assert!(matches!(with(p), Parsed::Bad(_)), "{bad}");
    }
}

#[test]
fn the_file_name_is_file_safe() {
    assert_eq!(identity().file_name(), "big_iron.4242.batch.gpu_07_.json");
    let unnamed = Identity {
        cluster: String::new(),
        node: "..".into(),
        step: "0".into(),
        ..identity()
    };
    assert_eq!(unnamed.file_name(), "default.4242.0._...json");
    assert!(!unnamed.file_name().contains('/'));
}

#[test]
fn files_parse_or_say_why_not() {
    let mut acc = Acc::new(std::time::Duration::from_secs(1));
    acc.latest.cpu_seconds = Some(1.0);
    let s = state_of(&identity(), &acc, 5.0, 10.0);
    let bytes = serde_json::to_vec(&s).unwrap();
    assert_eq!(parse(&bytes), Parsed::State(Box::new(s.clone())));
    // Half written.
    assert!(matches!(parse(&bytes[..bytes.len() / 2]), Parsed::Bad(_)));
    assert!(matches!(parse(b""), Parsed::Bad(_)));
    // A later version, readable or not.
    let mut v = serde_json::to_value(&s).unwrap();
    v["schema_version"] = 2.into();
    assert_eq!(parse(v.to_string().as_bytes()), Parsed::Newer(2));
    v["memory"] = "elsewhere".into();
    assert_eq!(parse(v.to_string().as_bytes()), Parsed::Newer(2));
    // Another schema (a record, say).
    v["schema"] = "gpu-tracker/step".into();
    v["schema_version"] = 1.into();
    assert!(matches!(parse(v.to_string().as_bytes()), Parsed::Bad(_)));
    // A field added by a later build of the same version is ignored.
    let mut v = serde_json::to_value(&s).unwrap();
    v["new_figure"] = 1.into();
    assert!(matches!(parse(v.to_string().as_bytes()), Parsed::State(_)));
}
