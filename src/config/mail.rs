//! The `[mail]` table of the settings file: what `gpu-tracker-mail`, the `MailProg` slurmctld
//! runs, adds to the mails Slurm sends at the end of a job, and how it hands them to the site's
//! own mailer (docs/MAIL.md).

use serde::Deserialize;

use crate::units::within;

/// The mail types (as `--mail-type` names them) that may carry the job's summary: those sent
/// when a job, an array task or a whole array has ended. The others (BEGIN, the time-limit
/// warnings at 50, 80 and 90 %, INVALID_DEPEND, STAGE_OUT) always pass through untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum SummaryMailType {
    /// `END` (Slurm's "Ended"): the job completed, or was cancelled (and, from 24.11, any end
    /// when FAIL was not asked for).
    #[serde(rename = "END")]
    End,
    /// `FAIL` (Slurm's "Failed"): the job failed, ran out of time or of memory, or its node
    /// failed.
    #[serde(rename = "FAIL")]
    Fail,
    /// `REQUEUE` (Slurm's "Requeued"): one run of the job ended and it was put back in the
    /// queue. Off by default: the database holds one summary per job id, which a later run
    /// replaces.
    #[serde(rename = "REQUEUE")]
    Requeue,
    /// `TIME_LIMIT` (Slurm's "Reached time limit"): sent when the limit is reached, while the
    /// job is still being stopped, so its summary is seldom stored yet. Off by default: the
    /// FAIL (or END) mail that follows carries it.
    #[serde(rename = "TIME_LIMIT")]
    TimeLimit,
}

impl SummaryMailType {
    /// How slurmctld names it in `SLURM_JOB_MAIL_TYPE` and the subject (the same in 22.05,
    /// 24.11 and 26.05: `_mail_type_str` in `src/slurmctld/agent.c`).
    pub fn slurm_word(self) -> &'static str {
        match self {
            SummaryMailType::End => "Ended",
            SummaryMailType::Fail => "Failed",
            SummaryMailType::Requeue => "Requeued",
            SummaryMailType::TimeLimit => "Reached time limit",
        }
    }

    /// The type slurmctld's word `w` names, when it is one that may carry the summary.
    pub fn from_slurm_word(w: &str) -> Option<SummaryMailType> {
        [
            SummaryMailType::End,
            SummaryMailType::Fail,
            SummaryMailType::Requeue,
            SummaryMailType::TimeLimit,
        ]
        .into_iter()
        .find(|t| t.slurm_word() == w)
    }
}

/// How the mailer is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MailerKind {
    /// A `sendmail`-compatible program (exim4, postfix, msmtp, ...): `MAILER -oi -- RECIPIENT`
    /// with the whole message, headers we write, on its standard input.
    Sendmail,
    /// A `mail`/`mailx` program (Slurm's own default `/bin/mail`): `MAILER -s SUBJECT --
    /// RECIPIENT` with the body on its standard input; it writes the headers.
    Mail,
}

/// Settings of the summary in Slurm's end-of-job mail.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MailConfig {
    /// The summary in the mail, for the whole site. Off: every mail passes through untouched.
    pub enabled: bool,
    /// Which mail types carry it.
    pub types: Vec<SummaryMailType>,
    /// Longest time (seconds, 1 to [`MAX_MAIL_WAIT_SECONDS`]) a mail waits for the summary to
    /// be stored (the EpilogSlurmctld stores it while slurmctld already sends the mail); then
    /// the plain mail goes with one line saying where the summary will be.
    pub wait_seconds: f64,
    /// The site's mailer, an absolute path.
    pub mailer: String,
    /// How the mailer is called.
    pub mailer_kind: MailerKind,
    /// One line of the site's own at the end of each summary (a link to its documentation);
    /// `""`: none.
    pub footer: String,
}

/// Longest `wait_seconds`: slurmctld stops `MailProg` after 120 s (`MAIL_PROG_TIMEOUT`), which
/// must leave time for the mailer ([`MAILER_DEADLINE_SECONDS`]).
pub const MAX_MAIL_WAIT_SECONDS: f64 = 60.0;

/// How long the mailer itself may take before it is stopped: with the longest wait, still
/// under slurmctld's 120 s.
pub const MAILER_DEADLINE_SECONDS: u64 = 30;

/// Longest footer, in bytes.
pub const MAX_FOOTER_BYTES: usize = 200;

impl Default for MailConfig {
    fn default() -> Self {
        MailConfig {
            enabled: true,
            types: vec![SummaryMailType::End, SummaryMailType::Fail],
            wait_seconds: 10.0,
            mailer: "/usr/sbin/sendmail".into(),
            mailer_kind: MailerKind::Sendmail,
            footer: String::new(),
        }
    }
}

impl MailConfig {
    /// The first key with a value that cannot work, and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !within(self.wait_seconds, 1.0, MAX_MAIL_WAIT_SECONDS) {
            return Err((
                "mail.wait_seconds",
                format!("must be from 1 to {MAX_MAIL_WAIT_SECONDS}"),
            ));
        }
        if !self.mailer.starts_with('/') || self.mailer.chars().any(char::is_control) {
            return Err(("mail.mailer", "must be an absolute path".into()));
        }
        if self.footer.len() > MAX_FOOTER_BYTES || self.footer.chars().any(char::is_control) {
            return Err((
                "mail.footer",
                format!("must be one line of at most {MAX_FOOTER_BYTES} bytes"),
            ));
        }
        Ok(())
    }

    /// Whether a mail of slurmctld's type word `word` carries the summary here.
    pub fn carries(&self, word: &str) -> bool {
        self.enabled
            && SummaryMailType::from_slurm_word(word).is_some_and(|t| self.types.contains(&t))
    }
}

/// The `[mail]` table alone of a settings file `text` whose other keys may be unusable: so that
/// broken settings elsewhere still leave the site's mailer known. `None` when the table itself
/// cannot be used.
pub fn mail_table_of(text: &str) -> Option<MailConfig> {
    #[derive(Deserialize)]
    struct MailOnly {
        #[serde(default)]
        mail: MailConfig,
    }
    let m = toml::from_str::<MailOnly>(text).ok()?.mail;
    m.check().is_ok().then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn mail_settings_parse_with_defaults_and_bounds() {
        let c = Config::parse("", Path::new("t.toml")).unwrap();
        assert_eq!(c.mail, MailConfig::default());
        assert!(c.mail.carries("Ended") && c.mail.carries("Failed"));
        assert!(!c.mail.carries("Began") && !c.mail.carries("Requeued"));
        let c = Config::parse(
            "[mail]\ntypes = [\"END\", \"TIME_LIMIT\"]\nwait_seconds = 2.5\n\
             mailer = \"/usr/bin/mail\"\nmailer_kind = \"mail\"\nfooter = \"Help: https://x/gpu\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(c.mail.mailer_kind, MailerKind::Mail);
        assert_eq!(c.mail.wait_seconds, 2.5);
        assert!(c.mail.carries("Reached time limit") && !c.mail.carries("Failed"));
        let off = Config::parse("[mail]\nenabled = false\n", Path::new("t.toml")).unwrap();
        assert!(!off.mail.carries("Ended"));
        for (text, key) in [
            ("[mail]\nwait_seconds = 61\n", "mail.wait_seconds"),
            ("[mail]\nwait_seconds = 0.5\n", "mail.wait_seconds"),
            ("[mail]\nmailer = \"sendmail\"\n", "mail.mailer"),
            ("[mail]\nfooter = \"a\\nBcc: x@y\"\n", "mail.footer"),
        ] {
            let e = Config::parse(text, Path::new("t.toml")).unwrap_err();
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
        // Broken settings elsewhere leave the mailer known; a broken [mail] table does not.
        let text = "interval = -5\nnot_a_key = 1\n[mail]\nmailer = \"/usr/bin/mail\"\nmailer_kind = \"mail\"\n";
        assert!(Config::parse(text, Path::new("t.toml")).is_err());
        assert_eq!(mail_table_of(text).unwrap().mailer, "/usr/bin/mail");
        assert_eq!(mail_table_of("[mail]\nmailer = \"x\"\n"), None);
        // A type that never ends a job, and an unknown key, are refused by name.
        for text in ["[mail]\ntypes = [\"BEGIN\"]\n", "[mail]\nattach = true\n"] {
            assert!(Config::parse(text, Path::new("t.toml")).is_err(), "{text}");
        }
    }
}
