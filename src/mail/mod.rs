//! `gpu-tracker-mail`, the `MailProg` a site sets in slurm.conf in place of `/bin/mail`: the
//! mail slurmctld sends when a job ends gets the job's summary and advice (the same words as the
//! end of the job's output); every other mail passes through as Slurm made it. docs/MAIL.md says
//! what users see and what slurmctld does.
//!
//! Never in the way: a mail is always sent (the plain one, with one line saying where the
//! summary will be, when it cannot be found within `mail.wait_seconds`), whatever fails; text
//! the user chose cannot add headers or recipients, nor reach the mailer as an option.
//!
//! `request` reads slurmctld's argv and environment, `find` looks for the summary within the
//! bound, `message` makes the mail, `send` hands it to the site's mailer.

mod find;
mod message;
mod request;
mod send;

use std::time::{Duration, Instant};

use crate::config::{Config, ConfigError, MailConfig, MailerKind};
pub use request::{Env, OPT_OUT_VAR, submission_env};
use request::{MailRequest, Target, TrackAsked};

/// How a run ended, as its exit status: slurmctld logs MailProg's output when it is not 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The mailer took the mail (with the summary, or the plain one).
    Sent = 0,
    /// The mailer could not be run, failed or did not finish in time.
    MailerFailed = 1,
    /// Not called as slurmctld calls MailProg (`-s SUBJECT RECIPIENT`).
    Usage = 2,
    /// The recipient is not an address (it could have been read as an option), and the job's
    /// user's name is not one either: nothing was sent.
    NoRecipient = 3,
}

/// `PATH` when slurmctld gives none (it gives MailProg only the job's variables): root's
/// directories, where `sacct` and the mailer are.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// At the start of `main`, while the process has one thread: takes the environment slurmctld
/// gave (the job's variables, for [`run`]) and leaves the process only `PATH` (else
/// [`DEFAULT_PATH`]), `SLURM_CONF` and `GPU_TRACKER_CONFIG`, so that neither `sacct` nor the
/// mailer sees the job's variables, some of which hold the user's text.
pub fn take_environment_at_start() -> Env {
    let env = Env::of_process();
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH).to_string();
    let mut keep = vec![("PATH", path.as_str())];
    for name in ["SLURM_CONF", "GPU_TRACKER_CONFIG"] {
        if let Some(v) = env.get(name) {
            keep.push((name, v));
        }
    }
    crate::sys::replace_environment_at_start(&keep);
    env
}

/// What a mail gets.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Plan {
    /// Passed through as Slurm made it (why, for the log).
    Untouched(&'static str),
    /// The summary of the job, looked for within the bound.
    Summary(Target),
}

/// Whether the mail of `req` carries a summary under the settings `cfg`.
fn plan(req: &MailRequest, cfg: &Config) -> Plan {
    let Some(word) = req.mail_type.as_deref() else {
        return Plan::Untouched("not run by slurmctld (no SLURM_JOB_MAIL_TYPE)");
    };
    if !cfg.mail.carries(word) {
        return Plan::Untouched("a mail type that carries no summary here");
    }
    if req.opted_out {
        return Plan::Untouched("the user left the summary out (GPU_TRACKER_MAIL=off)");
    }
    let untracked = match req.track {
        TrackAsked::Off => true,
        TrackAsked::On => false,
        // The plugin ran at submission (its token is there) and the job did not ask.
        TrackAsked::Unknown => req.token.is_some() && !cfg.track_all,
    };
    if untracked {
        return Plan::Untouched("the job was not tracked");
    }
    match req.target {
        Some(t) => Plan::Summary(t),
        None => Plan::Untouched("the subject and Slurm's ids do not name one job"),
    }
}

/// The mailer and its kind when the settings cannot be used (`e`): their `[mail]` table's when
/// it can be read alone, else the default `sendmail` where it is, else Slurm's own default
/// MailProg, `/bin/mail`.
fn fallback_mailer(e: &ConfigError) -> (String, MailerKind) {
    let path = match e {
        ConfigError::Io(p, _) | ConfigError::Syntax(p, _) | ConfigError::Value(p, ..) => p,
    };
    let table = crate::sys::read_small_file(path, crate::config::MAX_SETTINGS_BYTES, "settings")
        .ok()
        .and_then(|text| crate::config::mail_table_of(&text));
    if let Some(m) = table {
        return (m.mailer, m.mailer_kind);
    }
    let d = MailConfig::default();
    if std::path::Path::new(&d.mailer).exists() {
        (d.mailer, d.mailer_kind)
    } else {
        ("/bin/mail".into(), MailerKind::Mail)
    }
}

/// One line on stderr, which slurmctld writes to its log.
fn note(line: &str) {
    eprintln!("gpu-tracker-mail: {line}");
}

/// Sends the mail slurmctld asked for with `args` (without the program's name) and `env`.
pub fn run(args: &[String], env: &Env) -> Exit {
    let begun = Instant::now();
    let req = match MailRequest::parse(args, env) {
        Ok(r) => r,
        Err(e) => {
            note(&e.to_string());
            return Exit::Usage;
        }
    };
    let places = crate::config::discover::Places::from_env(None);
    let (cfg, (mailer, kind)) = match crate::config::discover::find(&places) {
        Ok(found) => {
            let m = (
                found.config.mail.mailer.clone(),
                found.config.mail.mailer_kind,
            );
            (Some(found.config), m)
        }
        Err(e) => {
            note(&format!(
                "settings not usable, the mail goes as Slurm made it: {e}"
            ));
            (None, fallback_mailer(&e))
        }
    };
    let to = match message::recipients(&req.recipient) {
        Some(to) => to,
        None => match req.user.as_deref().and_then(message::recipients) {
            Some(user) => {
                note("the recipient is not a plain address: the mail goes to the job's user");
                user
            }
            None => {
                note("the recipient is not a plain address, nor is the job's user: not sent");
                return Exit::NoRecipient;
            }
        },
    };
    let subject = message::clean_subject(&req.subject);
    let body = match cfg.as_ref().map(|c| (plan(&req, c), c)) {
        Some((Plan::Summary(target), c)) => summary_body(&req, target, c, begun),
        _ => String::new(),
    };
    let inv = message::invocation(kind, &to, &subject, &message::clean_body(&body));
    let deadline = Duration::from_secs(crate::config::mail::MAILER_DEADLINE_SECONDS);
    match send::send(&mailer, &inv, deadline) {
        Ok(()) => Exit::Sent,
        Err(e) => {
            note(&e);
            Exit::MailerFailed
        }
    }
}

/// The body of a mail that carries the summary: the summary found within the bound, the site's
/// line and how to leave it out; else the one line saying where the summary will be.
fn summary_body(req: &MailRequest, target: Target, cfg: &Config, begun: Instant) -> String {
    let cluster = crate::config::slurmconf::cluster_dir_name(req.cluster.as_deref());
    let source = find::DbAndSpool {
        spool: cfg.spool_dir.join(&cluster),
        uid: req.uid,
        name: req.job_name.clone(),
        token: req.token.clone(),
        cluster,
        rules: crate::report::classes::ClassRules::from_config(cfg),
        max_records: cfg.max_summary_records as usize,
        co2: cfg.co2_grams_per_kwh,
    };
    let bound = Duration::from_secs_f64(cfg.mail.wait_seconds);
    compose(
        find::search_within(Box::new(source), target, begun, bound),
        target,
        &cfg.mail.footer,
    )
}

/// The body for `outcome`.
fn compose(outcome: find::Outcome, target: Target, footer: &str) -> String {
    let job = target.job_ref();
    match outcome {
        find::Outcome::Summary(text) => {
            let mut b = text;
            if !b.ends_with('\n') {
                b.push('\n');
            }
            if !footer.is_empty() {
                b.push('\n');
                b.push_str(footer);
                b.push('\n');
            }
            b.push_str(&format!(
                "\n(gpu-tracker-report {job} shows it again; submit with {}=off to leave it out \
                 of your mails.)\n",
                request::OPT_OUT_VAR
            ));
            b
        }
        find::Outcome::Missing(why) => {
            note(&format!("job {job}: no summary in the mail: {why}"));
            format!(
                "The gpu-tracker summary of this job was not stored yet: it will be in \
                 `gpu-tracker-report {job}`.\n"
            )
        }
    }
}

#[cfg(test)]
mod tests;
