//! GPU figures through the real NVML path (`nvml-wrapper` → `dlopen`) into the project's fake
//! `libnvidia-ml.so.1`, driven by scenario files: per-process memory of the tracked processes,
//! device memory and capacity, utilization of the selected GPUs, energy, a GPU that falls off
//! the bus mid-run, a MIG instance whose slot comes to hold another one, an NVML that fails to
//! start, and no NVML at all.

mod common;

use common::*;
use serde_json::json;

const GPU0: &str = "GPU-00000000-1111-2222-3333-444444444444";
const GPU1: &str = "GPU-55555555-6666-7777-8888-999999999999";

/// A scenario: GPU0 (80 GB) holds 2 GB for processes whose command line has `marker` and
/// 0.5 GB for init (pid 1, never tracked); GPU1 (40 GB) lists the marked processes with memory
/// the driver cannot tell.
fn scenario(marker: &str, gpu0_extra: serde_json::Value) -> serde_json::Value {
    let mut d0 = json!({
        "uuid": GPU0, "name": "Simulated GPU A", "memory_total": 80_000_000_000u64,
        "memory_used_base": 1_000_000_000u64,
        "utilization": [{"at_ms": 0, "gpu": 50, "memory": 5}, {"at_ms": 300, "gpu": 90, "memory": 20}],
        "power_mw": 100_000,
        "processes": [
            {"cmdline_contains": marker, "used_memory": 2_000_000_000u64},
            {"pid": 1, "used_memory": 500_000_000u64}
        ]
    });
    for (k, v) in gpu0_extra.as_object().unwrap() {
        d0[k] = v.clone();
    }
    json!({"devices": [d0, {
        "uuid": GPU1, "name": "Simulated GPU B", "memory_total": 40_000_000_000u64,
        "memory_used_base": 250_000_000u64,
        "utilization": [{"at_ms": 0, "gpu": 10, "memory": 1}],
        "processes": [{"cmdline_contains": marker, "used_memory": null}]
    }]})
}

struct GpuRun {
    out: std::process::Output,
    log: String,
}

fn run_with(scn: &serde_json::Value, marker: &str, extra: &[&str]) -> GpuRun {
    let cmd = format!(
        "{} --mb 10 --hold-ms 1000 --marker {marker}",
        hog().display()
    );
    run_cmd(scn, &cmd, extra)
}

fn run_cmd(scn: &serde_json::Value, cmd: &str, extra: &[&str]) -> GpuRun {
    let dir = TempDir::new("gpu");
    let scn_path = dir.join("scenario.json");
    std::fs::write(&scn_path, scn.to_string()).unwrap();
    let log = dir.join("calls.log");
    let lib = fake_nvml();
    let mut args = vec![
        "-e",
        cmd,
        "--st",
        "0.1",
        "-f",
        "json",
        "--nvml-lib",
        lib.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run_env(
        &args,
        &[
            ("FAKE_NVML_SCENARIO", scn_path.to_str().unwrap()),
            ("FAKE_NVML_LOG", log.to_str().unwrap()),
        ],
    );
    GpuRun {
        out,
        log: std::fs::read_to_string(&log).unwrap_or_default(),
    }
}

fn gpu(v: &serde_json::Value, i: usize) -> &serde_json::Value {
    &v["gpus"][i]
}

#[test]
fn tracked_process_memory_devices_utilization_and_energy() {
    let marker = "gpu-hold-marker-a1";
    let r = run_with(&scenario(marker, json!({})), marker, &[]);
    assert!(r.out.status.success(), "{}", stderr(&r.out));
    let v = json(&r.out);
    // Decimal gigabytes, exact values from the driver.
    assert_eq!(f(&v, "/max_gpu_ram/main"), 2.0);
    assert_eq!(f(&v, "/max_gpu_ram/descendants"), 0.0);
    assert_eq!(f(&v, "/max_gpu_ram/combined"), 2.0);
    // By anyone: 1 + 2 + 0.5 on GPU0, 0.25 on GPU1.
    assert_eq!(f(&v, "/max_gpu_ram/system"), 3.75);
    assert_eq!(f(&v, "/max_gpu_ram/system_capacity"), 120.0);
    assert_eq!(v["gpu_utilization"]["system_gpu_count"], 2);
    assert_eq!(v["gpu_utilization"]["n_expected_gpus"], 2);
    let max_sum = f(&v, "/gpu_utilization/gpu_percentages/max_sum_percent");
    assert_eq!(max_sum, 100.0, "90 + 10");
    assert_eq!(
        f(&v, "/gpu_utilization/gpu_percentages/max_hardware_percent"),
        50.0
    );
    let mean = f(&v, "/gpu_utilization/gpu_percentages/mean_sum_percent");
    assert!((60.0..100.0).contains(&mean), "mean {mean}");

    let (g0, g1) = (gpu(&v, 0), gpu(&v, 1));
    assert_eq!(g0["uuid"], GPU0);
    assert_eq!(g0["name"], "Simulated GPU A");
    assert_eq!(g0["max_tracked"], 2.0);
    assert_eq!(g0["max_used"], 3.5);
    assert_eq!(g0["max_utilization_percent"], 90.0);
    // Memory the driver cannot report is never added.
    assert_eq!(g1["max_tracked"], 0.0);
    let g1_mean = g1["mean_utilization_percent"].as_f64().unwrap();
    assert!((g1_mean - 10.0).abs() < 1e-9, "{g1_mean}");
    let joules = g0["energy_joules"].as_f64().unwrap();
    assert!(
        (50.0..400.0).contains(&joules),
        "100 W for about 1 s: {joules} J"
    );
    assert_eq!(g1["energy_joules"], 0.0);
    assert_eq!(v["tracking"]["gpu_source"], "nvml");
    // NVML was started once and shut down.
    assert_eq!(
        r.log.lines().filter(|l| *l == "nvmlInit_v2").count(),
        1,
        "{}",
        r.log
    );
    assert_eq!(r.log.lines().last(), Some("nvmlShutdown"));
}

#[test]
fn guuids_selects_the_gpus_counted_in_utilization() {
    let marker = "gpu-hold-marker-b2";
    let r = run_with(&scenario(marker, json!({})), marker, &["--guuids", GPU1]);
    assert!(r.out.status.success(), "{}", stderr(&r.out));
    let v = json(&r.out);
    assert_eq!(v["gpu_utilization"]["n_expected_gpus"], 1);
    assert_eq!(
        f(&v, "/gpu_utilization/gpu_percentages/max_sum_percent"),
        10.0
    );
    assert_eq!(gpu(&v, 0)["selected"], false);
    assert_eq!(gpu(&v, 1)["selected"], true);
    // Memory figures still cover every GPU.
    assert_eq!(f(&v, "/max_gpu_ram/main"), 2.0);

    let r = run_with(
        &scenario(marker, json!({})),
        marker,
        &["--guuids", "GPU-not-here"],
    );
    assert_eq!(r.out.status.code(), Some(2));
    let e = stderr(&r.out);
    assert!(
        e.contains("unknown GPU UUID \"GPU-not-here\"") && e.contains(GPU0),
        "{e}"
    );
}

#[test]
fn a_gpu_lost_mid_run_keeps_what_was_measured() {
    let marker = "gpu-hold-marker-c3";
    let r = run_with(
        &scenario(marker, json!({"lost_after_ms": 400})),
        marker,
        &[],
    );
    assert!(r.out.status.success(), "{}", stderr(&r.out));
    let v = json(&r.out);
    assert_eq!(gpu(&v, 0)["lost"], true);
    assert_eq!(gpu(&v, 1)["lost"], false);
    assert_eq!(f(&v, "/max_gpu_ram/main"), 2.0, "measured before the loss");
    let notes = v["tracking"]["notes"].to_string();
    assert!(notes.contains(&format!("{GPU0}) was lost")), "{notes}");
}

#[test]
fn nvml_that_fails_to_start_or_is_absent_is_not_an_error() {
    let marker = "gpu-hold-marker-d4";
    let scn = json!({"init_error": "DRIVER_NOT_LOADED", "devices": []});
    let r = run_with(&scn, marker, &[]);
    assert!(r.out.status.success(), "{}", stderr(&r.out));
    let v = json(&r.out);
    assert_eq!(v["tracking"]["gpu_source"], "none");
    assert_eq!(f(&v, "/max_gpu_ram/system_capacity"), 0.0);
    let e = stderr(&r.out);
    assert_eq!(e.matches("no GPU figures").count(), 1, "one log line: {e}");
    assert!(
        v["tracking"]["notes"]
            .to_string()
            .contains("no GPU figures")
    );

    let out = run(&[
        "-e",
        "true",
        "-f",
        "json",
        "--nvml-lib",
        "/nonexistent/libnvidia-ml.so.1",
    ]);
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["gpu_utilization"]["system_gpu_count"], 0);
    assert!(stderr(&out).contains("/nonexistent/libnvidia-ml.so.1"));
}

#[test]
fn gpu_figures_in_the_text_report() {
    let marker = "gpu-hold-marker-e5";
    let dir = TempDir::new("gputext");
    let scn_path = dir.join("s.json");
    std::fs::write(&scn_path, scenario(marker, json!({})).to_string()).unwrap();
    let cmd = format!("{} --hold-ms 500 --marker {marker}", hog().display());
    let lib = fake_nvml();
    let out = run_env(
        &[
            "-e",
            &cmd,
            "--st",
            "0.1",
            "--gru",
            "megabytes",
            "--nvml-lib",
            lib.to_str().unwrap(),
        ],
        &[("FAKE_NVML_SCENARIO", scn_path.to_str().unwrap())],
    );
    let t = stdout(&out);
    assert!(
        t.contains("Max GPU RAM:\n   Unit: megabytes\n   System capacity: 120000.0\n"),
        "{t}"
    );
    assert!(t.contains("   Main: 2000.0\n"), "{t}");
    assert!(t.contains(&format!("GPUs:\n   {GPU0}:\n")), "{t}");
}

#[test]
fn sm_activity_health_and_no_data_through_the_command() {
    // GPU0 has GPM and ECC; GPU1 neither. The holder's command line carries the fault marker:
    // each GPU it is on reports one Xid 79 and a thermal slowdown.
    let marker = "gpu-hold-XIDFAULT-c3";
    let mut scn = scenario(
        marker,
        json!({
            "gpm": {"sm_active": 40, "sm_occupancy": 20, "tensor_active": 10, "dram_bandwidth": 5},
            "ecc": {"corrected": 7, "uncorrected": 0},
            "fault_throttle_ms": 400
        }),
    );
    scn["fault_marker"] = json!("XIDFAULT");
    scn["devices"][1]["fault_throttle_ms"] = json!(400);
    // The holder starts after the first readings (ECC counters are counted from the first), and
    // only it carries the marker: the shell's own command line has it split by quotes.
    let cmd = format!(
        "sh -c 'sleep 0.4; exec {} --mb 10 --hold-ms 1200 --marker gpu-hold-XID\"FAULT\"-c3'",
        hog().display()
    );
    let r = run_cmd(&scn, &cmd, &[]);
    assert!(r.out.status.success(), "{}", stderr(&r.out));
    let v = json(&r.out);
    let (g0, g1) = (gpu(&v, 0), gpu(&v, 1));
    assert_eq!(g0["sm_active_percent"]["max"], 40.0, "{g0:#}");
    assert_eq!(g0["dram_bandwidth_percent"]["max"], 5.0, "{g0:#}");
    assert!(g0["no_data"].get("sm_activity").is_none(), "{g0:#}");
    // No GPM: null and why, never 0.
    assert!(g1["sm_active_percent"].is_null(), "{g1:#}");
    assert_eq!(g1["no_data"]["sm_activity"]["kind"], "not_supported");
    assert!(g1["ecc_errors"].is_null());
    assert_eq!(g1["no_data"]["ecc"]["kind"], "not_supported");
    // The ECC counter grew by one during the run (it stood at 7 before).
    assert_eq!(g0["ecc_errors"]["corrected"], 1, "{g0:#}");
    for g in [g0, g1] {
        assert_eq!(g["xid_errors"][0]["xid"], 79, "{g:#}");
        assert_eq!(g["xid_errors"].as_array().unwrap().len(), 1, "{g:#}");
        let t = g["throttle_seconds"]["hw_thermal_slowdown"].as_f64();
        assert!(t.is_some_and(|t| (0.1..=1.5).contains(&t)), "{g:#}");
    }
}

/// A step's MIG instance is read at its MIG slot of the parent GPU. When the GPU's MIG layout
/// changes mid-run (the instance destroyed, another job's made), the slot names another
/// instance, or none: from then on the step's instance is a lost device, never the other's
/// figures. An instance the change left in place is still read.
#[test]
fn a_mig_slot_that_comes_to_name_another_instance_is_a_lost_device() {
    use gpu_tracker::gpu::GpuSource;
    use gpu_tracker::gpu::nvml::NvmlSource;
    use std::time::{Duration, Instant};
    const MIG_A: &str = "MIG-aaaaaaaa-1111-2222-3333-444444444444";
    const MIG_B: &str = "MIG-bbbbbbbb-1111-2222-3333-444444444444";
    const MIG_C: &str = "MIG-cccccccc-1111-2222-3333-444444444444";
    const MIG_E: &str = "MIG-eeeeeeee-1111-2222-3333-444444444444";
    const GB: u64 = 1_000_000_000;
    let instance = |uuid: &str, gi: u32, used: u64| {
        json!({"uuid": uuid, "profile": "1g.10gb", "gpu_instance_id": gi,
               "compute_instance_id": 0, "memory_total": 10 * GB, "memory_used_base": used})
    };
    // Slots 0, 1, 2 hold A (1 GB in use), B (2 GB), E (3 GB); at 1.5 s slot 0 holds C (7 GB),
    // slot 1 still B, slot 2 nothing.
    let scn = json!({"devices": [{
        "uuid": GPU0, "name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * GB,
        "mig": {"instances": [instance(MIG_A, 1, GB), instance(MIG_B, 2, 2 * GB),
                              instance(MIG_E, 3, 3 * GB)],
                "reconfigure": {"at_ms": 1500,
                                "instances": [instance(MIG_C, 5, 7 * GB), instance(MIG_B, 2, 2 * GB)]}}
    }]});
    // A copy of the fake with its scenario beside it: this test's alone.
    let dir = TempDir::new("mig-reconfigure");
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    let lib = lib_dir.join("libnvidia-ml.so.1");
    std::fs::copy(fake_nvml(), &lib).unwrap();
    std::fs::write(lib_dir.join("fake-nvml-scenario.json"), scn.to_string()).unwrap();
    let started = Instant::now();
    let mut src = NvmlSource::open(Some(&lib), true).expect("open the fake");
    let uuids: Vec<&str> = src.devices().iter().map(|d| d.uuid.as_str()).collect();
    assert_eq!(uuids, [GPU0, MIG_A, MIG_B, MIG_E]);
    src.retain(|d| d.mig.is_some());
    let used = |src: &mut NvmlSource| (0..3).map(|i| src.read(i).map(|r| r.used)).collect();
    let before: Vec<_> = used(&mut src);
    assert_eq!(
        before,
        [Some(Some(GB)), Some(Some(2 * GB)), Some(Some(3 * GB))]
    );
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "the first reads came too late to be before the change"
    );
    std::thread::sleep(Duration::from_millis(1700).saturating_sub(started.elapsed()));
    let after: Vec<_> = used(&mut src);
    assert_eq!(
        after,
        [None, Some(Some(2 * GB)), None],
        "C's figures taken for A's?"
    );
    assert_eq!(src.read(0), None, "lost stays lost");
    let notes = src.take_problems().join("\n");
    assert!(
        notes.contains(&format!("{MIG_A}: MIG slot 0 now holds {MIG_C}")),
        "{notes}"
    );
    assert!(
        notes.contains(&format!("{MIG_E}: MIG slot 2 is empty now")),
        "{notes}"
    );
    assert!(!notes.contains(MIG_B), "{notes}");
}
