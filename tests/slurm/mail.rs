//! The job's summary in Slurm's end-of-job mail (gpu-tracker-mail as slurmctld's MailProg,
//! docs/MAIL.md), delivered by a real mail server: the local cluster's `up --mail` runs Debian's
//! exim4 with local delivery only, and the tests read the test user's mailbox,
//! `/var/mail/gtuser`, as its mail reader would.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::advise::StoppedDbd;
use super::nodes::{local_spool_node, need_nodes};
use crate::support::*;

/// One delivered mail: its headers (continuation lines joined) and its body.
#[derive(Debug, Clone)]
struct Mail {
    headers: Vec<(String, String)>,
    body: String,
}

impl Mail {
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn subject(&self) -> &str {
        self.header("Subject").first().copied().unwrap_or("")
    }
}

fn mailbox(user: &str) -> PathBuf {
    PathBuf::from("/var/mail").join(user)
}

/// The mails in `user`'s mailbox (an mbox file: each mail opens with a `From ` line after an
/// empty line; exim writes a body line that opens so as `>From `).
fn mails(user: &str) -> Vec<Mail> {
    let text = std::fs::read_to_string(mailbox(user)).unwrap_or_default();
    let mut out = Vec::new();
    let mut cur: Option<(Vec<String>, Vec<String>, bool)> = None;
    let mut prev_empty = true;
    for line in text.lines() {
        if line.starts_with("From ") && prev_empty {
            if let Some(m) = cur.take() {
                out.push(m);
            }
            cur = Some((Vec::new(), Vec::new(), false));
        } else if let Some((head, body, in_body)) = cur.as_mut() {
            if *in_body {
                body.push(line.to_string());
            } else if line.is_empty() {
                *in_body = true;
            } else if line.starts_with([' ', '\t']) {
                if let Some(last) = head.last_mut() {
                    last.push(' ');
                    last.push_str(line.trim());
                }
            } else {
                head.push(line.to_string());
            }
        }
        prev_empty = line.is_empty();
    }
    out.extend(cur);
    out.into_iter()
        .map(|(head, body, _)| Mail {
            headers: head
                .iter()
                .filter_map(|h| h.split_once(':'))
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .collect(),
            body: body.join("\n"),
        })
        .collect()
}

/// Whether `m` is Slurm's mail of job `id` (its own, or its array's summary).
fn of_job(m: &Mail, id: u32) -> bool {
    let s = m.subject();
    s.contains(&format!("Job_id={id} ")) || s.contains(&format!("({id}) "))
}

/// Waits for a mail of job `id` to `user` whose subject holds `kind` (`Began`, `Ended`,
/// `Failed`), at most `limit`.
fn wait_mail(user: &str, id: u32, kind: &str, limit: Duration) -> Mail {
    let mut found = None;
    wait_until(&format!("a {kind} mail of job {id}"), limit, || {
        found = mails(user)
            .into_iter()
            .find(|m| of_job(m, id) && m.subject().contains(kind));
        found.is_some()
    });
    found.unwrap()
}

/// Fails with how to bring it up unless the cluster's slurmctld runs gpu-tracker-mail.
fn need_mail() {
    let conf = std::fs::read_to_string(slurm_conf()).unwrap();
    assert!(
        conf.lines()
            .any(|l| l.starts_with("MailProg=") && l.ends_with("/gpu-tracker-mail")),
        "the cluster has no gpu-tracker-mail: slurm/local-cluster.sh up --accounting --mail"
    );
}

/// The line of `text` that opens with `head`.
fn line_of<'a>(text: &'a str, head: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(head))
        .unwrap_or_else(|| panic!("no {head:?} line:\n{text}"))
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --accounting --mail) and root: tests/run-all.sh"]
fn an_end_mail_holds_the_jobs_summary_a_begin_mail_goes_untouched_and_a_user_can_say_no() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_mail();
    let h = hog();
    let mail = ["--mail-type=BEGIN,END", "--mail-user", USER];
    let script =
        format!("#!/bin/bash\n#SBATCH --gpu-track --mem=1G\n{h} --mb 120 --hold-ms 1500\n");
    let id = submit_as(USER, "mail-end", &script, &mail);
    let quiet = submit_with_env(
        USER,
        "mail-quiet",
        &script,
        &mail,
        &[("GPU_TRACKER_MAIL", "off")],
    );
    let job = wait_job(USER, "mail-end", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let end = wait_mail(USER, id, "Ended", Duration::from_secs(60));
    // The subject as Slurm wrote it, one header of each, to the job's user.
    assert!(
        end.subject()
            .starts_with(&format!("Slurm Job_id={id} Name=mail-end Ended, Run time ")),
        "{end:?}"
    );
    for h in ["Subject", "To", "From"] {
        assert_eq!(end.header(h).len(), 1, "{h}: {end:?}");
    }
    assert!(end.header("To")[0].starts_with(USER), "{end:?}");
    assert_eq!(end.header("Auto-Submitted"), ["auto-generated"], "{end:?}");
    // The body: the summary and advice in the words of the job's output, then the site's line.
    let output = output_with_summary(USER, "mail-end", id);
    let sum = summary_of(&output);
    assert!(
        end.body
            .contains(&format!("gpu-tracker summary of job {id}")),
        "{}",
        end.body
    );
    for head in ["Job name:", "User:", "Advice:"] {
        assert_eq!(line_of(&end.body, head), line_of(sum, head), "{}", end.body);
    }
    assert!(
        end.body
            .contains("Local test cluster: this mail was written by gpu-tracker-mail"),
        "{}",
        end.body
    );
    assert!(!end.body.contains('\u{1b}'), "{}", end.body);
    // BEGIN goes as Slurm sends it: the subject alone.
    let begin = wait_mail(USER, id, "Began", Duration::from_secs(5));
    assert!(begin.body.trim().is_empty(), "{begin:?}");
    // The user who said GPU_TRACKER_MAIL=off at submission gets Slurm's mail alone.
    wait_job(USER, "mail-quiet", quiet);
    let plain = wait_mail(USER, quiet, "Ended", Duration::from_secs(60));
    assert!(!plain.body.contains("gpu-tracker"), "{plain:?}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --accounting --mail) and root: tests/run-all.sh"]
fn an_oom_job_a_timed_out_job_and_an_array_get_their_advice_in_their_mail() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_mail();
    let h = hog();
    let mail = ["--mail-type=END,FAIL", "--mail-user", USER];
    let oom = submit_as(
        USER,
        "mail-oom",
        &format!("#!/bin/bash\n#SBATCH --gpu-track --mem=200M\nsrun {h} --mb 400 --hold-ms 500\n"),
        &mail,
    );
    let slow = submit_as(
        USER,
        "mail-slow",
        "#!/bin/bash\n#SBATCH --gpu-track -t 1\nsleep 300\n",
        &mail,
    );
    let array = submit_as(
        USER,
        "mail-array",
        &format!("#!/bin/bash\n#SBATCH --gpu-track --mem=1G -t 10\n{h} --mb 50 --hold-ms 800\n"),
        &[&mail[..], &["--array=1-3"]].concat(),
    );
    // Killed for memory: Slurm's FAIL mail carries the OOM advice.
    let fail = wait_mail(USER, oom, "Failed", Duration::from_secs(90));
    // (The job's state is FAILED: its batch script ends with srun's failure.)
    assert!(fail.body.contains(" killed for memory:"), "{}", fail.body);
    // One mail for the whole array, with the array's summary and the next request.
    let a = wait_mail(USER, array, "Ended", Duration::from_secs(120));
    assert!(
        a.subject()
            .starts_with(&format!("Slurm Array Summary Job_id={array}_* ")),
        "{a:?}"
    );
    assert!(
        a.body
            .contains(&format!("gpu-tracker summary of array {array} (3 task(s))"))
            && a.body.contains("Next time:"),
        "{}",
        a.body
    );
    let arrays = mails(USER).into_iter().filter(|m| of_job(m, array)).count();
    assert_eq!(arrays, 1, "one mail for the array");
    // Stopped at its 1-minute limit: the time it used against its limit. slurmctld sends the
    // mail as it marks the job TIMEOUT, while the job's steps are still being stopped: the
    // summary is of records not yet final where they stay so past the settings' 5 s wait.
    let timeout = wait_mail(USER, slow, "Failed", Duration::from_secs(150));
    assert!(timeout.subject().contains("TIMEOUT"), "{timeout:?}");
    assert!(
        timeout.body.contains("ran out of its 1:00 time limit")
            || line_of(&timeout.body, "Time:").contains(" of its 1:00 time limit ("),
        "{}",
        timeout.body
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --accounting --mail) and root: tests/run-all.sh"]
fn a_job_name_with_a_bcc_line_adds_no_header_and_reaches_no_one_else() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_mail();
    let root_before = mails("root").len();
    let dir = state_dir().join("jobs").join(USER);
    let script = dir.join("mail-evil.sh");
    std::fs::write(&script, "#!/bin/bash\n#SBATCH --gpu-track\ntrue\n").unwrap();
    let out = Command::new("runuser")
        .args(["-u", USER, "--", "sbatch", "--parsable", "-J"])
        .arg("mail-evil\nBcc: root\nX-Evil: 1\u{1b}[2J")
        .args(["--mail-type=END", "--mail-user", USER, "-o"])
        .arg(dir.join("mail-evil-%j.out"))
        .arg(&script)
        .env("SLURM_CONF", slurm_conf())
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let m = wait_mail(USER, id, "Ended", Duration::from_secs(60));
    // The name is in the one Subject line, its newlines and escape made spaces; no header of it.
    assert_eq!(m.header("Subject").len(), 1, "{m:?}");
    assert!(
        m.subject().contains("mail-evil Bcc: root X-Evil: 1"),
        "{m:?}"
    );
    assert!(
        m.header("Bcc").is_empty() && m.header("X-Evil").is_empty(),
        "{m:?}"
    );
    assert!(!m.body.contains('\u{1b}'), "{m:?}");
    // Nobody else got it.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        mails("root")
            .iter()
            .skip(root_before)
            .all(|r| !of_job(r, id)),
        "root got job {id}'s mail"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --accounting --mail --nodes 3 --node-local-spool) and root: tests/run-all.sh"]
fn with_slurmdbd_stopped_the_mail_still_arrives_within_the_bound() {
    // Alone: slurmdbd is stopped while the job ends.
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    need_mail();
    need_nodes();
    // A node whose spool the controller cannot see: the summary can only come from the
    // database, which does not answer.
    let node = local_spool_node();
    let id = submit_as(
        USER,
        "mail-nodbd",
        "#!/bin/bash\n#SBATCH --gpu-track\nsleep 3\n",
        &[
            "-p",
            "multi",
            "-w",
            &node,
            "--mail-type=END",
            "--mail-user",
            USER,
        ],
    );
    wait_started(id);
    let dbd = StoppedDbd::stop();
    let job = wait_job(USER, "mail-nodbd", id);
    let ended = Instant::now();
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let m = wait_mail(USER, id, "Ended", Duration::from_secs(30));
    let took = ended.elapsed();
    drop(dbd);
    // The settings' 5 s wait, sacct's deadline inside it, and a second of polling here.
    assert!(took < Duration::from_secs(9), "{took:?}");
    assert!(
        m.body.contains(&format!(
            "The gpu-tracker summary of this job was not stored yet: it will be in \
             `gpu-tracker-report {id}`."
        )),
        "{}",
        m.body
    );
}
