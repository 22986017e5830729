//! The job's two memory figures in the summary's words. The charged peak is what Slurm's limit
//! counts (page cache included) and what an OOM kill is measured against; the needed peak is
//! what the kernel could not take back (page cache left out), what the job needed, and what
//! every sizing uses ([`super::figures::NodeSummary::sizing_bytes`]). The summary names both
//! only where they differ much ([`differs`]); elsewhere the charged peak alone, as before.

use super::figures::NodeSummary;

/// Both figures are shown when the charged peak is over this many times the needed one ...
pub const CHARGED_OVER_NEEDED_RATIO: f64 = 1.5;
/// ... and at least this much above it (a few MiB of cache beside a tiny job is no news).
pub const CHARGED_OVER_NEEDED_BYTES: u64 = 64 << 20;

/// The node's needed peak, when the charged one is far enough above it to say both.
pub fn differs(n: &NodeSummary) -> Option<u64> {
    let needed = n.needed_peak_bytes?;
    let charged = n.peak_bytes;
    (charged as f64 > CHARGED_OVER_NEEDED_RATIO * needed as f64
        && charged.saturating_sub(needed) >= CHARGED_OVER_NEEDED_BYTES)
        .then_some(needed)
}

/// The `Memory:` line of a job on one node (without its label), with `mem` writing bytes.
pub fn line(n: &NodeSummary, mem: &dyn Fn(u64) -> String) -> String {
    let req = match (n.requested_bytes, n.percent_of_request) {
        (Some(r), Some(p)) => format!(" of {} requested ({p:.0}%)", mem(r)),
        _ => " (no memory limit)".into(),
    };
    match differs(n) {
        Some(needed) => format!(
            "peak {}{req}, of which {} page cache the kernel could reclaim; the job's own \
             memory peaked at {} [{}]",
            mem(n.peak_bytes),
            mem(n.peak_bytes - needed),
            mem(needed),
            n.source
        ),
        None => {
            let cache = if n.includes_page_cache {
                ", page cache included"
            } else {
                ""
            };
            format!("peak {}{req} [{}{cache}]", mem(n.peak_bytes), n.source)
        }
    }
}

/// Under the per-node table: each node's own memory, when some node's charged peak was mostly
/// page cache. At most 8 nodes are named.
pub fn nodes_note(nodes: &[NodeSummary], mem: &dyn Fn(u64) -> String) -> Option<String> {
    if !nodes.iter().any(|n| differs(n).is_some()) {
        return None;
    }
    let mut named: Vec<String> = nodes
        .iter()
        .take(8)
        .map(|n| format!("{} {}", n.node, mem(n.sizing_bytes())))
        .collect();
    if nodes.len() > 8 {
        named.push(format!("and {} more", nodes.len() - 8));
    }
    Some(format!(
        "(the job's own memory, without page cache the kernel could reclaim: {})",
        named.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::human_bytes;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn node(peak: u64, needed: Option<u64>) -> NodeSummary {
        NodeSummary {
            node: "n1".into(),
            peak_bytes: peak,
            needed_peak_bytes: needed,
            source: "job cgroup".into(),
            includes_page_cache: true,
            requested_bytes: Some(2 * GIB),
            percent_of_request: Some(100.0 * peak as f64 / (2 * GIB) as f64),
            ..NodeSummary::default()
        }
    }

    #[test]
    fn a_peak_of_page_cache_says_both_figures() {
        // The file-reading job: 1.21 GiB charged, 5 MiB its own.
        let n = node(1234 * MIB, Some(5 * MIB));
        assert_eq!(
            line(&n, &human_bytes),
            "peak 1.21 GiB of 2.00 GiB requested (60%), of which 1.20 GiB page cache the \
             kernel could reclaim; the job's own memory peaked at 5.0 MiB [job cgroup]"
        );
    }

    #[test]
    fn close_figures_or_no_needed_figure_keep_the_line_of_before() {
        let before = "peak 1.00 GiB of 2.00 GiB requested (50%) [job cgroup, page cache included]";
        // No figure (records of an earlier build).
        assert_eq!(line(&node(GIB, None), &human_bytes), before);
        // 300 MB in /dev/shm: needed as much as charged.
        assert_eq!(line(&node(GIB, Some(GIB - 3 * MIB)), &human_bytes), before);
        // Over 1.5 times, but under 64 MiB apart: small news.
        assert_eq!(differs(&node(100 * MIB, Some(40 * MIB))), None);
        // 64 MiB apart, but under 1.5 times.
        assert_eq!(differs(&node(GIB, Some(700 * MIB))), None);
        assert_eq!(differs(&node(GIB, Some(600 * MIB))), Some(600 * MIB));
    }

    #[test]
    fn several_nodes_are_named_when_one_differs() {
        let a = node(GIB, Some(GIB));
        let mut b = node(GIB, Some(5 * MIB));
        b.node = "n2".into();
        assert_eq!(nodes_note(std::slice::from_ref(&a), &human_bytes), None);
        assert_eq!(
            nodes_note(&[a, b], &human_bytes).unwrap(),
            "(the job's own memory, without page cache the kernel could reclaim: n1 1.00 GiB, \
             n2 5.0 MiB)"
        );
    }
}
