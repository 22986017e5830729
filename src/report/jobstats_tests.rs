use super::*;
use crate::report::stored::{Stored, StoredError, is_ours};
use crate::step::record::StepGpu;
use crate::step::record::tests_support::record;

const GIB: u64 = 1 << 30;

/// A job of `nodes` nodes with `gpus` GPUs each; figures differ from node to node as a real
/// job's do (a pseudo-random walk), so that gzip is not flattered.
fn job(nodes: usize, gpus: u32, limit: Option<u64>) -> Summary {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut recs = Vec::new();
    for i in 0..nodes {
        let mut r = record(&format!("della-r{:02}n{:02}", i / 40, i % 40), "batch");
        r.step.alloc_cpus = Some(64);
        r.cpu.alloc_cpus = 64;
        r.cpu.seconds = 200_000.0 + (next() % 10_000_000) as f64 / 100.0;
        r.memory.job_peak_bytes = Some(300 * GIB + next() % (50 * GIB));
        r.job.alloc_memory_bytes = limit;
        r.job.nodes = Some(nodes as u32);
        r.gpus = (0..gpus)
            .map(|g| StepGpu {
                slurm_index: Some(g),
                uuid: format!("GPU-{i}-{g}"),
                memory_total_bytes: 80 * GIB,
                peak_step_memory_bytes: next() % (80 * GIB),
                mean_utilization_percent: Some((next() % 1000) as f64 / 10.0),
                max_utilization_percent: Some(100.0),
                ..StepGpu::default()
            })
            .collect();
        recs.push(r);
    }
    Summary::from_records(&recs)
}

fn encoded(s: &Summary) -> String {
    encode(&Js1::of(s), &Stored::of(s).bounded_json(), None)
}

#[test]
fn base64_matches_the_standard_and_reads_back() {
    for (raw, text) in [
        (&b""[..], ""),
        (b"f", "Zg=="),
        (b"fo", "Zm8="),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg=="),
        (b"\xff\xfe\x00?", "//4APw=="),
    ] {
        assert_eq!(base64_encode(raw), text);
        assert_eq!(base64_decode(text).unwrap(), raw);
    }
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(base64_decode(&base64_encode(&all)).unwrap(), all);
    assert_eq!(base64_decode("Zm9v\nYg").unwrap(), b"foob");
    assert_eq!(base64_decode("Zm9v*"), None);
}

#[test]
fn a_summary_reads_back_whole_from_its_js1_text() {
    let s = job(2, 2, Some(512 * GIB));
    let text = encoded(&s);
    assert!(text.starts_with("JS1:H4sI"), "{text}");
    // Nothing sacctmgr or sacct -P would change or split (case aside: see the 22.05 test).
    assert!(
        text.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"+/=:".contains(&c)),
        "{text}"
    );
    let back = Stored::decode(&text).unwrap();
    let old = Stored::decode(&Stored::of(&s).encode()).unwrap();
    assert_eq!(back, old);
    let shown = back.to_summary("alice", 1001, None, &Default::default());
    assert_eq!(shown.per_node.len(), 2);
    assert_eq!(shown.gpus.len(), 4);
    assert_eq!(shown.cpu.seconds, old.cpu.0);
}

#[test]
fn jobstats_keys_hold_our_figures_and_leave_out_what_we_lack() {
    let mut s = job(2, 2, Some(512 * GIB));
    s.per_node[0].needed_peak_bytes = Some(100 * GIB);
    s.gpus[1].mean_utilization_percent = None;
    let top = decode_json(&encoded(&s)).unwrap().unwrap();
    assert_eq!(top["gpus"], 4);
    assert_eq!(top["total_time"], s.elapsed_seconds.round() as u64);
    let n0 = &top["nodes"][&node_name(&s.per_node[0].node)];
    assert_eq!(n0["cpus"], 64);
    assert_eq!(n0["total_time"], one_decimal(s.per_node[0].cpu_seconds));
    // "used": the peak without page cache where it is known.
    assert_eq!(n0["used_memory"], 100 * GIB);
    assert_eq!(n0["total_memory"], 512 * GIB);
    assert_eq!(n0["gpu_total_memory"]["0"], 80 * GIB);
    assert_eq!(n0["gpu_used_memory"]["1"], s.gpus[1].job_peak_bytes);
    // No utilization for GPU 1: left out, not 0.
    assert!(n0["gpu_utilization"].get("1").is_none(), "{n0}");
    assert!(n0["gpu_utilization"].get("0").is_some(), "{n0}");
    // No memory limit: neither memory figure (reportseff divides one by the other).
    let top = decode_json(&encoded(&job(1, 0, None))).unwrap().unwrap();
    let n = top["nodes"].as_object().unwrap().values().next().unwrap();
    assert!(
        n.get("used_memory").is_none() && n.get("total_memory").is_none(),
        "{n}"
    );
    assert!(n.get("gpu_total_memory").is_none(), "{n}");
    assert_eq!(top["gpus"], 0);
}

#[test]
fn python_reads_the_text_as_jobstats_readers_do() {
    // The decoding every jobstats reader does (reportseff's job.py, job_defense_shield's
    // efficiency.py): base64, gunzip, JSON, after the 4-character prefix.
    let s = job(3, 2, Some(256 * GIB));
    let text = encoded(&s);
    let script = "import base64,gzip,json,sys\n\
                  d=json.loads(gzip.decompress(base64.b64decode(sys.argv[1][4:])))\n\
                  n=d['nodes']\n\
                  print(d['gpus'], d['total_time'], len(n), d['gpu_tracker']['job'])\n\
                  for k in sorted(n):\n\
                  \x20print(k, n[k]['cpus'], n[k]['total_time'], n[k]['used_memory'], \
                  n[k]['total_memory'], n[k]['gpu_utilization']['1'], n[k]['gpu_used_memory']['0'])\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, &text])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let mut lines = said.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!("6 {} 3 {}", s.elapsed_seconds.round(), s.job_id)
    );
    for (n, line) in s.per_node.iter().zip(lines) {
        let g: Vec<_> = s.gpus.iter().filter(|g| g.node == n.node).collect();
        let want = format!(
            "{} 64 {:?} {} {} {:?} {}",
            n.node,
            one_decimal(n.cpu_seconds),
            n.sizing_bytes(),
            256 * GIB,
            one_decimal(g[1].mean_utilization_percent.unwrap()),
            g[0].job_peak_bytes
        );
        assert_eq!(line, want);
    }
}

#[test]
fn short_none_jobstats_own_and_lowercased_texts_are_told_apart() {
    assert_eq!(Stored::decode(SHORT), Err(StoredError::Absent));
    assert_eq!(Stored::decode(NONE), Err(StoredError::Absent));
    // jobstats' own summary: a JS1 text without our key.
    let theirs = format!(
        "JS1:{}",
        base64_encode(&gzip(
            br#"{"nodes":{"n1":{"cpus":4,"total_time":8.5}},"total_time":60,"gpus":0}"#
        ))
    );
    assert_eq!(Stored::decode(&theirs), Err(StoredError::Absent));
    assert!(!is_ours(&theirs));
    let ours = encoded(&job(1, 1, Some(GIB)));
    assert!(is_ours(&ours));
    assert!(is_ours("gpu-tracker:1:{`job`:1}"));
    assert!(!is_ours("some note of an operator"));
    // What Slurm 22.05's sacctmgr makes of it.
    let lowered = Stored::decode(&ours.to_lowercase());
    assert!(
        matches!(&lowered, Err(StoredError::Damaged(w)) if w.contains("lowercased")),
        "{lowered:?}"
    );
    // One that does not decode is not known to be ours; decode_json says why.
    assert_eq!(Stored::decode("JS1:H4sIAAAA"), Err(StoredError::Absent));
    assert!(matches!(
        decode_json("JS1:H4sIAAAA"),
        Err(Js1Error::Damaged(_))
    ));
    // A gzip bomb stops at the bound.
    let bomb = format!("JS1:{}", base64_encode(&gzip(&vec![b' '; 5 << 20])));
    assert!(matches!(decode_json(&bomb), Err(Js1Error::Damaged(w)) if w.contains("more than")));
}

#[test]
fn another_tool_s_comment_rides_along_when_ours_replaces_it() {
    let s = job(1, 1, Some(GIB));
    let theirs = "JS1:H4sIAtheirs";
    let text = encode(&Js1::of(&s), &Stored::of(&s).bounded_json(), Some(theirs));
    let top = decode_json(&text).unwrap().unwrap();
    assert_eq!(top[REPLACED], theirs);
    assert!(Stored::decode(&text).is_ok());
}

#[test]
fn a_thousand_node_job_fits_under_what_slurmdbd_keeps() {
    // slurmdbd keeps AdminComment in a MySQL `text` column: 65,535 bytes.
    let whole = |s: &Summary| {
        render(
            &Js1::of(s),
            &Js1::of(s).nodes.iter().collect::<Vec<_>>(),
            0,
            &Stored::of(s).bounded_json(),
            None,
        )
        .len()
    };
    // 1000 nodes without GPUs: every row fits.
    let s = job(1000, 0, Some(512 * GIB));
    let text = encoded(&s);
    eprintln!("JS1 text of 1000 nodes, no GPU: {} bytes", text.len());
    assert!(text.len() <= MAX_JS1_BYTES, "{}", text.len());
    let top = decode_json(&text).unwrap().unwrap();
    assert_eq!(top["nodes"].as_object().unwrap().len(), 1000);
    assert!(top.get(CUT_NODES).is_none());
    // 1000 nodes of 8 GPUs: whole, it is over the bound; rows are cut from the end and counted,
    // our summary's totals are whole.
    let s = job(1000, 8, Some(512 * GIB));
    let text = encoded(&s);
    eprintln!(
        "JS1 text of 1000 nodes x 8 GPUs: {} bytes whole, {} stored",
        whole(&s),
        text.len()
    );
    assert!(whole(&s) > MAX_JS1_BYTES);
    assert!(text.len() <= MAX_JS1_BYTES, "{}", text.len());
    let top = decode_json(&text).unwrap().unwrap();
    let kept = top["nodes"].as_object().unwrap().len();
    assert_eq!(kept as u64 + top[CUT_NODES].as_u64().unwrap(), 1000);
    eprintln!("kept {kept} of 1000 node rows");
    assert!(kept >= 300, "{kept}");
    assert!(
        text.len() > MAX_JS1_BYTES * 9 / 10,
        "cut far more than needed: {}",
        text.len()
    );
    assert_eq!(Stored::decode(&text).unwrap().totals.2, 8000);
}

#[test]
fn only_sacctmgr_before_23_02_is_known_to_lowercase() {
    assert!(!sacctmgr_keeps_case("slurm-wlm 22.05.8"));
    assert!(!sacctmgr_keeps_case("slurm 21.08.8-2"));
    assert!(sacctmgr_keeps_case("slurm 23.02.0"));
    assert!(sacctmgr_keeps_case("slurm 24.11.1"));
    assert!(sacctmgr_keeps_case("slurm-wlm 26.05.0"));
    assert!(sacctmgr_keeps_case(""));
}

#[test]
fn the_stored_summary_of_a_thousand_gpu_nodes_is_made_in_a_moment() {
    // Stored::encode used to take rows off one at a time, serializing the whole text again for
    // each: minutes for 8000 GPU rows, in the EpilogSlurmctld of every such job.
    let s = job(1000, 8, Some(512 * GIB));
    let st = Stored::of(&s);
    let t = std::time::Instant::now();
    let text = st.encode();
    let took = t.elapsed();
    eprintln!(
        "Stored::encode of 1000 nodes x 8 GPUs: {took:?}, {} bytes",
        text.len()
    );
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    let back = Stored::decode(&text).unwrap();
    assert_eq!(back.nodes.len() + back.cut_nodes, 1000);
    assert_eq!(back.gpus.len() + back.cut_gpus, 8000);
}
