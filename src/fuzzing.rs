//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`, run with `cargo fuzz`), kept here
//! so that the seed inputs in `fuzz/seeds/` are replayed by an ordinary test
//! (`tests/fuzz_seeds.rs`) through the very same code. Each function takes any bytes and must
//! neither panic nor run away with time or memory; what it asserts is said on each.
//!
//! Not part of the library's interface.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use crate::config::{Config, StepKind, Tracking};
use crate::report::{self, JobRecords, Problem, Summary};
use crate::step::record::{self, RecordError, SCHEMA_VERSION, StepRecord};
use crate::units::{MAX_INTERVAL_SECONDS, MemUnit, TimeUnit};

/// The targets, by the names of their files in `fuzz/fuzz_targets/` and `fuzz/seeds/`.
pub const TARGETS: [&str; 4] = ["record", "config", "report_args", "gres"];

/// Runs target `name` on `data`; `false` when there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "record" => record(data),
        "config" => config(data),
        "report_args" => report_args(data),
        "gres" => gres(data),
        _ => return false,
    }
    true
}

/// A step record file, as `gpu-tracker-report` reads it from the spool: parsed with
/// [`StepRecord::from_json`]; a record that parses is written again with
/// [`StepRecord::to_json`] and must parse again (to the same record, in the current format),
/// and goes through everything the report does with a job's records: the summary of the job
/// and of the step, its text and JSON renderings, the `--timeline` and `--events` exports, the
/// plot's data, the one-line listing and the summary kept in Slurm's database. The record is
/// also read as one node of a two-node job, with a twin on a second node.
pub fn record(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let r = match StepRecord::from_json(text) {
        Ok(r) => r,
        Err(e @ (RecordError::Corrupt(_) | RecordError::FutureVersion(_))) => {
            let p = match e {
                RecordError::Corrupt(error) => Problem::Corrupt {
                    file: "n1.batch.json".into(),
                    error,
                },
                RecordError::FutureVersion(version) => Problem::FutureVersion {
                    file: "n1.batch.json".into(),
                    version,
                },
            };
            let _ = record::terminal_safe(&p.message());
            return;
        }
    };
    let again = StepRecord::from_json(&r.to_json())
        .unwrap_or_else(|e| panic!("a record that parsed does not parse once written: {e}"));
    if r.schema_version == SCHEMA_VERSION {
        assert_eq!(again, r, "the record changed when written and read again");
    }

    let mut twin = r.clone();
    twin.step.node = format!("{}-twin", r.step.node);
    twin.step.id = "0".into();
    twin.step.kind = "srun".into();
    for job in [vec![r.clone()], vec![r, twin]] {
        show_job(job);
    }
}

/// What `gpu-tracker-report JOB` and `JOB.STEP` do with `records` once read.
fn show_job(records: Vec<StepRecord>) {
    let job_id = records[0].job.id;
    let step = records[0].step.id.clone();
    let problems: Vec<Problem> = records
        .iter()
        .filter(|r| !r.complete)
        .map(|r| Problem::Incomplete {
            file: format!("{}.{}.json", r.step.node, r.step.id),
            written_at: r.written_at.clone(),
        })
        .collect();
    let job = JobRecords {
        job_id,
        records,
        problems,
        ..JobRecords::default()
    };
    let whole = Summary::from_records(&job.records);
    let one = job.clone().only_step(&step);
    let of_step = Summary::of_step(&one.records, &step);
    for (j, s) in [(&job, &whole), (&one, &of_step)] {
        let text = report::text::render(s, &j.problems, &report::text::TextOptions::default());
        let _ = record::terminal_safe(&text);
        let units = report::text::TextOptions {
            ram: Some(MemUnit::Megabytes),
            time: Some(TimeUnit::Minutes),
            tasks: true,
        };
        let _ = report::text::render(s, &j.problems, &units);
        let json = record::json_terminal_safe(&j.to_json(s));
        let v: serde_json::Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("the job document is not JSON: {e}"));
        assert_eq!(v["schema"], report::JOB_SCHEMA);
        let _ = report::listing::line(s, !j.problems.is_empty());
    }
    let recs = &job.records;
    for out in [
        report::story::timeline_csv(recs),
        report::story::timeline_json(job_id, recs),
        report::story::events_csv(recs),
        report::story::events_json(job_id, recs),
    ] {
        let _ = record::terminal_safe(&out);
    }
    let _ = report::story::plot_data(recs, "fuzz");

    // --store-admin-comment, and reading it back.
    let stored = report::stored::Stored::of(&whole).encode();
    assert!(stored.len() <= report::stored::MAX_STORED_BYTES, "{stored}");
    if let Ok(back) = report::stored::Stored::decode(&stored) {
        let s = back.to_summary(
            &whole.user,
            whole.uid,
            whole.name.as_deref(),
            &crate::report::classes::ClassRules::default(),
        );
        let _ = report::text::render(&s, &[], &report::text::TextOptions::default());
    }
}

/// The option values [`config`] decides on besides the fuzzed ones.
const TRACK_OPTIONS: [&str; 8] = ["", "on", "off", "0.5", "60", "86400", "1e300", "nan"];

/// A settings file: the bytes up to the first NUL are the text given to [`Config::parse`]; each
/// further NUL-separated part is a `--gpu-track` value. Settings that parse are asked
/// [`Config::decide`] (no option, each value, and a few usual ones), [`Config::alert_rules`]
/// and [`Config::tracks`]. Asserts that a settings error is one line (the plugin logs it as
/// one), that an option's error holds no character that steers a terminal (newlines
/// included), and that tracking is only ever on at an interval from the site's `min_interval`
/// (more than 0) to a day.
pub fn config(data: &[u8]) {
    let mut parts = data.split(|b| *b == 0);
    let Ok(text) = std::str::from_utf8(parts.next().unwrap_or_default()) else {
        return;
    };
    let c = match Config::parse(text, Path::new("fuzz.toml")) {
        Ok(c) => c,
        Err(e) => {
            let msg = e.to_string();
            assert!(
                !msg.contains('\n'),
                "a settings error of several lines: {msg}"
            );
            return;
        }
    };
    let options: Vec<String> = parts
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let check = |option: Option<&str>| match c.decide(option) {
        Ok(Tracking::On { interval }) => {
            assert!(
                interval >= c.min_interval && interval > 0.0 && interval <= MAX_INTERVAL_SECONDS,
                "{option:?}: interval {interval}"
            );
        }
        Ok(Tracking::Off) => {}
        // The value is the user's: shown in the error, it must not steer a terminal or forge
        // a line in slurmd's log.
        Err(e) => assert!(
            !e.chars().any(record::is_unsafe_on_terminal),
            "an option error with control characters: {e:?}"
        ),
    };
    check(None);
    for o in TRACK_OPTIONS
        .iter()
        .copied()
        .chain(options.iter().map(String::as_str))
    {
        check(Some(o));
    }
    let _ = c.alert_rules();
    for k in [
        StepKind::Batch,
        StepKind::Srun,
        StepKind::Interactive,
        StepKind::Extern,
    ] {
        let _ = (c.tracks(k), k.as_str());
    }
}

/// A command line of `gpu-tracker-report`: the bytes split on NUL are its arguments (raw bytes,
/// so arguments that are not UTF-8 are tried too), after the program's name; no bytes, no
/// arguments. Read with
/// [`crate::report::cmd::args::check`]; an error is rendered as the program prints it, and must be a
/// usage error (exit status 2) unless it is the help or the version.
pub fn report_args(data: &[u8]) {
    let args = (!data.is_empty()).then(|| data.split(|b| *b == 0));
    let argv: Vec<OsString> = std::iter::once(OsString::from("gpu-tracker-report"))
        .chain(
            args.into_iter()
                .flatten()
                .map(|a| OsString::from_vec(a.to_vec())),
        )
        .collect();
    match crate::report::cmd::args::check(&argv) {
        Ok(a) => {
            let _ = format!("{a:?}");
        }
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            let shown = e.to_string();
            let _ = shown.lines().next();
            let code = e.exit_code();
            match e.kind() {
                DisplayHelp | DisplayVersion => assert_eq!(code, 0, "{shown}"),
                _ => assert_eq!(code, 2, "{shown}"),
            }
        }
    }
}

/// A gres.conf as the plugin reads it in slurmstepd, and the driver's MIG table: the bytes up
/// to the first NUL are the file (UTF-8, as it is read), the rest the table (read lossily).
/// The file is parsed for two nodes; each node's lines must give at most
/// [`crate::gres::parse::MAX_NODE_DEVICES`] device files. Each is turned into the GPU order
/// (a device file's minor is its trailing number here), described, and mapped onto two whole
/// GPUs and a MIG instance of each.
pub fn gres(data: &[u8]) {
    use crate::gpu::{GpuInfo, MigInfo};
    use crate::gres::{GpuOrder, MigMinors, parse};
    let mut parts = data.splitn(2, |b| *b == 0);
    let Ok(text) = std::str::from_utf8(parts.next().unwrap_or_default()) else {
        return;
    };
    let table = parts
        .next()
        .map(|t| MigMinors::parse(&String::from_utf8_lossy(t)));
    let minor = |p: &str| p.rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok();
    let mut nvml = Vec::new();
    for index in 0..2u32 {
        let gpu = GpuInfo {
            vendor: crate::gpu::Vendor::Nvidia,
            index,
            minor: Some(index),
            pci_bus_id: None,
            compute_units: None,
            uuid: format!("GPU-{index}"),
            name: "G".into(),
            memory_total: 1,
            mig: None,
        };
        let instance = GpuInfo {
            uuid: format!("MIG-{index}"),
            mig: Some(MigInfo {
                parent_uuid: gpu.uuid.clone(),
                parent_index: index,
                profile: "1g.10gb".into(),
                gpu_instance_id: 1,
                compute_instance_id: 0,
                mig_index: 0,
            }),
            ..gpu.clone()
        };
        nvml.extend([gpu, instance]);
    }
    for node in ["n1", "gpu01"] {
        let conf = parse::parse_gres_conf(text, node);
        let files = conf.files().len();
        assert!(files <= parse::MAX_NODE_DEVICES, "{files} device files");
        let order = GpuOrder::from_conf(&conf, minor, table.as_ref());
        let _ = (order.method(), order.describe("gres.conf"));
        for target in order.targets(&nvml).into_iter().flatten().flatten() {
            let _ = nvml.iter().filter(|d| target.is(d)).count();
        }
    }
}
