//! The job's `AdminComment` in Princeton jobstats' `JS1:` form, so that the tools built around
//! jobstats (reportseff, job_defense_shield, seff-array, `jobstats` itself) read gpu-tracker's
//! figures, with gpu-tracker's whole stored summary ([`Stored`]) inside (docs/JOBSTATS.md).
//!
//! The text is `JS1:` and the base64 of the gzip of one line of JSON:
//! `{"nodes": {NODE: {"cpus", "total_time", "used_memory", "total_memory", "gpu_utilization":
//! {IDX: percent}, "gpu_used_memory": {IDX: bytes}, "gpu_total_memory": {IDX: bytes}}},
//! "total_time": elapsed seconds, "gpus": count, "gpu_tracker": {the stored summary}}`. The
//! keys before `gpu_tracker` mean what they mean to jobstats' readers; a figure gpu-tracker does
//! not have is left out, never written as 0 (a node's `used_memory` goes with its
//! `total_memory`: reportseff divides one by the other). `JS1:Short` and `JS1:None` carry no
//! JSON, as jobstats writes them.
//!
//! Base64 and gzip keep the text to `[A-Za-z0-9+/=:]`, which `sacctmgr` stores as it is from
//! Slurm 23.02 on; Slurm 22.05's `sacctmgr` lowercases every value it stores, which no base64
//! survives ([`sacctmgr_keeps_case`]): there the old `gpu-tracker:1:` form is stored instead.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::figures::Summary;

/// What opens a jobstats summary; `JS1:` followed by base64.
pub const PREFIX: &str = "JS1:";
/// jobstats' text for a job that ran too briefly for figures.
pub const SHORT: &str = "JS1:Short";
/// jobstats' text for a job it found no figures of.
pub const NONE: &str = "JS1:None";
/// The key under which gpu-tracker's whole stored summary rides in the JSON.
pub const OURS: &str = "gpu_tracker";
/// The key that keeps another tool's `AdminComment` that ours replaced, as it was.
pub const REPLACED: &str = "gpu_tracker_replaced";
/// Node rows of jobstats' part left out to stay within [`MAX_JS1_BYTES`].
pub const CUT_NODES: &str = "gpu_tracker_cut_nodes";
/// The most bytes of a `JS1:` text: slurmdbd keeps `AdminComment` in a MySQL `text` column
/// (65,535 bytes); a few KiB are left for another tool's comment carried under [`REPLACED`]
/// being counted in, and for the `sacctmgr` command line around it.
pub const MAX_JS1_BYTES: usize = 60_000;
/// The longest comment of another tool carried under [`REPLACED`]; a longer one is cut.
pub const MAX_REPLACED_BYTES: usize = 8_000;

/// One node as jobstats' readers take it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Js1Node {
    /// CPUs allocated on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// CPU seconds the job used on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_time: Option<f64>,
    /// The job's memory on the node without page cache (jobstats: RSS and shared memory), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_memory: Option<u64>,
    /// The job's memory limit on the node, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_memory: Option<u64>,
    /// Each GPU's mean utilization, percent, by its index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_utilization: BTreeMap<String, f64>,
    /// Each GPU's peak memory used by the job, bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_used_memory: BTreeMap<String, u64>,
    /// Each GPU's memory size, bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_total_memory: BTreeMap<String, u64>,
}

/// jobstats' part of a summary: per node, and the job's elapsed seconds and GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Js1 {
    /// Node rows by node name.
    pub nodes: BTreeMap<String, Js1Node>,
    /// Elapsed seconds.
    pub total_time: u64,
    /// GPUs of the job.
    pub gpus: usize,
}

fn one_decimal(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Node names as [`Stored`] keeps them: `[A-Za-z0-9._-]`, at most 64.
fn node_name(n: &str) -> String {
    n.chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(64)
        .collect()
}

impl Js1 {
    /// jobstats' figures of `s`. A GPU's key is Slurm's index of it on its node (the device's
    /// minor number where gres.conf lists the devices in order, as `AutoDetect=nvml` does),
    /// else its place among the node's GPUs.
    pub fn of(s: &Summary) -> Js1 {
        let mut nodes: BTreeMap<String, Js1Node> = BTreeMap::new();
        for n in &s.per_node {
            let row = nodes.entry(node_name(&n.node)).or_default();
            row.cpus = (n.alloc_cpus > 0).then_some(n.alloc_cpus);
            row.total_time = Some(one_decimal(n.cpu_seconds));
            // reportseff divides used by total: one without the other is left out.
            if let Some(limit) = n.requested_bytes.filter(|r| *r > 0) {
                row.total_memory = Some(limit);
                row.used_memory = Some(n.sizing_bytes());
            }
        }
        let mut place: BTreeMap<String, u32> = BTreeMap::new();
        for g in &s.gpus {
            let node = node_name(&g.node);
            let next = place.entry(node.clone()).or_default();
            let idx = g.slurm_index.unwrap_or(*next).to_string();
            *next += 1;
            let row = nodes.entry(node).or_default();
            if let Some(u) = g.mean_utilization_percent {
                row.gpu_utilization.insert(idx.clone(), one_decimal(u));
            }
            row.gpu_used_memory.insert(idx.clone(), g.job_peak_bytes);
            if g.memory_total_bytes > 0 {
                row.gpu_total_memory.insert(idx, g.memory_total_bytes);
            }
        }
        Js1 {
            nodes,
            total_time: s.elapsed_seconds.max(0.0).round() as u64,
            gpus: s.totals.gpus,
        }
    }
}

/// Why a text gives no JSON ([`decode_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Js1Error {
    /// Not a `JS1:` text.
    NotJs1,
    /// A `JS1:` text that does not decode: why.
    Damaged(String),
}

fn damaged(why: impl std::fmt::Display) -> Js1Error {
    Js1Error::Damaged(format!("a JS1 summary that does not decode: {why}"))
}

/// The text to store: `JS1:` and the encoded JSON of `js` with `stored` under [`OURS`] and
/// `replaced` (another tool's comment that this one replaces) under [`REPLACED`]; node rows of
/// jobstats' part are left out from the end (counted under [`CUT_NODES`]) until it is at most
/// [`MAX_JS1_BYTES`]. `ours` (gpu-tracker's stored summary as JSON) is itself bounded, as
/// `Stored::encode` bounds it.
pub fn encode(js: &Js1, ours: &Value, replaced: Option<&str>) -> String {
    let nodes: Vec<(&String, &Js1Node)> = js.nodes.iter().collect();
    let mut keep = nodes.len();
    loop {
        let text = render(js, &nodes[..keep], nodes.len() - keep, ours, replaced);
        if text.len() <= MAX_JS1_BYTES || keep == 0 {
            return text;
        }
        // Rows compress alike: keep what the bound holds in proportion, a little under, so
        // that a 100,000-node job takes a few rounds, not one a row.
        let fit = keep as f64 * MAX_JS1_BYTES as f64 / text.len() as f64 * 0.97;
        keep = (fit as usize).min(keep - 1);
    }
}

/// One `JS1:` text of `nodes`, `cut` rows left out.
fn render(
    js: &Js1,
    nodes: &[(&String, &Js1Node)],
    cut: usize,
    ours: &Value,
    replaced: Option<&str>,
) -> String {
    let mut top = Map::new();
    let rows: Map<String, Value> = nodes
        .iter()
        .map(|(k, v)| ((*k).clone(), serde_json::to_value(v).unwrap_or_default()))
        .collect();
    top.insert("nodes".into(), Value::Object(rows));
    top.insert("total_time".into(), js.total_time.into());
    top.insert("gpus".into(), js.gpus.into());
    top.insert(OURS.into(), ours.clone());
    if let Some(r) = replaced {
        top.insert(REPLACED.into(), cut_to(r, MAX_REPLACED_BYTES).into());
    }
    if cut > 0 {
        top.insert(CUT_NODES.into(), cut.into());
    }
    let json = serde_json::to_string(&Value::Object(top)).unwrap_or_default();
    format!("{PREFIX}{}", base64_encode(&gzip(json.as_bytes())))
}

fn cut_to(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The JSON of a `JS1:` text; `Ok(None)` for `JS1:Short` and `JS1:None`.
pub fn decode_json(text: &str) -> Result<Option<Map<String, Value>>, Js1Error> {
    let text = text.trim();
    if text == SHORT || text == NONE {
        return Ok(None);
    }
    let Some(b64) = text.strip_prefix(PREFIX) else {
        return Err(Js1Error::NotJs1);
    };
    let packed = base64_decode(b64).ok_or_else(|| damaged("not base64"))?;
    let json = gunzip(&packed, 4 << 20).map_err(damaged)?;
    match serde_json::from_slice(&json).map_err(damaged)? {
        Value::Object(m) => Ok(Some(m)),
        _ => Err(damaged("not a JSON object")),
    }
}

/// Whether the `sacctmgr` whose `--version` printed `version` (`slurm 24.11.1`, `slurm-wlm
/// 22.05.8`) stores an `AdminComment` as given: those before 23.02 lowercase it. A version
/// that cannot be read counts as a later one.
pub fn sacctmgr_keeps_case(version: &str) -> bool {
    let num = version.split_whitespace().last().unwrap_or_default();
    let mut parts = num.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (23, 2),
        _ => true,
    }
}

/// gzip of `data` (one member, best compression: the text lives in every job's row).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing to a Vec cannot fail.
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

/// The data of gzip `data`, at most `max` bytes of it (a larger one is an error: a comment
/// is small, and a bomb must not fill memory).
pub fn gunzip(data: &[u8], max: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut d = flate2::read::GzDecoder::new(data).take(max + 1);
    d.read_to_end(&mut out)
        .map_err(|e| format!("not gzip: {e}"))?;
    if out.len() as u64 > max {
        return Err(format!("more than {max} bytes unpacked"));
    }
    Ok(out)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648, `+/`, padded), as Python's `base64.b64encode` writes it.
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 read back; whitespace is skipped (`sacct` may wrap nothing, but a person
/// pasting may), padding is optional. `None` for any other character.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        let v = B64.iter().position(|&b| b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
#[path = "jobstats_tests.rs"]
mod tests;
