//! `gpu-tracker-report --check-node`: the node check ([`crate::check`]) printed one check a
//! line, then the verdict; exit status 1 when a check failed.

use super::exit::{Exit, Stop};
use super::out::Out;
use crate::check::{self, Check, Places};

/// Version of `--check-node -f json`'s document.
pub const SCHEMA: u32 = 1;

/// Runs the checks of this node and prints them (`json`: as one JSON document).
pub fn run(json: bool, out: &mut Out) -> Result<Exit, Stop> {
    let checks = check::run(&Places::from_env());
    print(&checks, json, out)
}

/// Prints `checks` and returns the status they call for.
pub fn print(checks: &[Check], json: bool, out: &mut Out) -> Result<Exit, Stop> {
    let tracks = check::tracks(checks);
    if json {
        let doc = serde_json::json!({
            "node_check": SCHEMA,
            "node": crate::sys::hostname(),
            "tracks": tracks,
            "checks": checks,
        });
        out.json(&format!("{doc:#}\n"))?;
    } else {
        for line in text_lines(checks) {
            out.line(&line)?;
        }
    }
    Ok(if tracks { Exit::Ok } else { Exit::Failed })
}

/// The text: one line a check (`FAIL  release: ... Fix: ...`), then the verdict.
pub fn text_lines(checks: &[Check]) -> Vec<String> {
    let mut lines: Vec<String> = checks
        .iter()
        .map(|c| {
            let mut l = format!("{:<4}  {}: {}", c.status.word(), c.name, c.said);
            if let Some(fix) = &c.fix {
                l.push_str(&format!(". Fix: {fix}"));
            }
            l
        })
        .collect();
    let failed = checks
        .iter()
        .filter(|c| c.status == check::Status::Fail)
        .count();
    lines.push(if failed == 0 {
        "This node tracks jobs: slurmstepd will load the plugin and the plugin can record them."
            .into()
    } else {
        format!(
            "This node does NOT track jobs as it should: {failed} check{} failed.",
            if failed == 1 { "" } else { "s" }
        )
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_is_one_line_and_a_failure_makes_the_status() {
        let checks = vec![
            Check::ok("plugstack", "a.conf:1 loads x.so"),
            Check::fail("release", "built for Slurm 24.11.0", "rebuild"),
        ];
        let lines = text_lines(&checks);
        assert_eq!(
            lines,
            vec![
                "ok    plugstack: a.conf:1 loads x.so",
                "FAIL  release: built for Slurm 24.11.0. Fix: rebuild",
                "This node does NOT track jobs as it should: 1 check failed.",
            ]
        );
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let exit = print(&checks, true, &mut Out::new(&mut o, &mut e)).unwrap();
        assert_eq!(exit, Exit::Failed);
        let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
        assert_eq!(v["tracks"], false);
        assert_eq!(v["checks"][1]["status"], "fail");
        let exit = print(&checks[..1], false, &mut Out::new(Vec::new(), Vec::new())).unwrap();
        assert_eq!(exit, Exit::Ok);
    }
}
