//! Which mails carry the summary, and the bodies they get.

use super::request::{Env, MailRequest, Target};
use super::*;

fn request(pairs: &[(&str, &str)], subject: &str) -> MailRequest {
    let mut env = vec![
        ("SLURM_JOB_ID", "41"),
        ("SLURM_JOB_UID", "1001"),
        ("SLURM_JOB_USER", "alice"),
    ];
    env.extend_from_slice(pairs);
    let args: Vec<String> = ["-s", subject, "alice"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    MailRequest::parse(&args, &Env::of(env)).unwrap()
}

const SUBJECT: &str = "Slurm Job_id=41 Name=train Ended, Run time 00:01:00, COMPLETED, ExitCode 0";

#[test]
fn end_and_fail_carry_the_summary_and_the_other_types_pass_through() {
    let cfg = Config::default();
    for word in ["Ended", "Failed"] {
        let r = request(&[("SLURM_JOB_MAIL_TYPE", word)], SUBJECT);
        assert_eq!(plan(&r, &cfg), Plan::Summary(Target::Job(41)), "{word}");
    }
    for word in [
        "Began",
        "Requeued",
        "Reached time limit",
        "Reached 50% of time limit",
        "Reached 90% of time limit",
        "Invalid dependency",
        "StageOut/Teardown",
        "unknown",
    ] {
        let r = request(&[("SLURM_JOB_MAIL_TYPE", word)], SUBJECT);
        assert!(matches!(plan(&r, &cfg), Plan::Untouched(_)), "{word}");
    }
    // The site chooses: REQUEUE and TIME_LIMIT may carry it; `enabled = false` stops it all.
    let mut cfg = Config::default();
    cfg.mail.types = vec![
        crate::config::SummaryMailType::Requeue,
        crate::config::SummaryMailType::TimeLimit,
    ];
    let r = request(&[("SLURM_JOB_MAIL_TYPE", "Reached time limit")], SUBJECT);
    assert_eq!(plan(&r, &cfg), Plan::Summary(Target::Job(41)));
    let r = request(&[("SLURM_JOB_MAIL_TYPE", "Ended")], SUBJECT);
    assert!(matches!(plan(&r, &cfg), Plan::Untouched(_)));
    cfg.mail.enabled = false;
    let r = request(&[("SLURM_JOB_MAIL_TYPE", "Requeued")], SUBJECT);
    assert!(matches!(plan(&r, &cfg), Plan::Untouched(_)));
}

#[test]
fn the_user_and_an_untracked_job_get_the_plain_mail() {
    let cfg = Config::default();
    let ended = ("SLURM_JOB_MAIL_TYPE", "Ended");
    let token = ("SPANK_SLURM_GPU_TRACKER_SUBMIT", "1.2.3");
    let r = request(&[ended, ("SPANK_GPU_TRACKER_MAIL", "off")], SUBJECT);
    assert!(matches!(plan(&r, &cfg), Plan::Untouched(w) if w.contains("GPU_TRACKER_MAIL")));
    // The plugin ran at submission and the job did not ask for tracking: nothing to wait for.
    let r = request(&[ended, token], SUBJECT);
    assert_eq!(plan(&r, &cfg), Plan::Untouched("the job was not tracked"));
    let r = request(&[ended, token, ("SPANK_GPU_TRACKER_TRACK", "on")], SUBJECT);
    assert_eq!(plan(&r, &cfg), Plan::Summary(Target::Job(41)));
    let r = request(&[ended, ("SPANK_GPU_TRACKER_TRACK", "off")], SUBJECT);
    assert!(matches!(plan(&r, &cfg), Plan::Untouched(_)));
    let tracks_all = Config {
        track_all: true,
        ..Config::default()
    };
    let r = request(&[ended, token], SUBJECT);
    assert_eq!(plan(&r, &tracks_all), Plan::Summary(Target::Job(41)));
    // Without the plugin's token nothing says the job was not tracked: it is looked for.
    let r = request(&[ended], SUBJECT);
    assert_eq!(plan(&r, &cfg), Plan::Summary(Target::Job(41)));
}

#[test]
fn the_body_holds_the_summary_and_the_sites_line_or_where_it_will_be() {
    let b = compose(
        find::Outcome::Summary("Job 41: 2 GiB of 8 GiB".into()),
        Target::Job(41),
        "Help: https://example.org/gpu",
    );
    assert!(b.starts_with("Job 41: 2 GiB of 8 GiB\n\nHelp: https://example.org/gpu\n"));
    assert!(b.contains("GPU_TRACKER_MAIL=off"));
    let b = compose(
        find::Outcome::Missing("sacct did not answer".into()),
        Target::ArrayTask {
            array: 50,
            task: 3,
            job: 53,
        },
        "",
    );
    assert_eq!(b.lines().count(), 1);
    assert!(b.contains("`gpu-tracker-report 50_3`"), "{b}");
}
