//! The mail as the mailer gets it, made only from parts that cannot add headers: the
//! recipients checked (never a mailer option), the subject on one line (RFC 2047 words where it
//! is not ASCII), the body without control characters.

use crate::config::MailerKind;

/// Longest subject kept, in characters (Slurm's own is a job name plus about 80).
pub const MAX_SUBJECT_CHARS: usize = 400;
/// Longest body line, in bytes: SMTP's limit is 998.
pub const MAX_LINE_BYTES: usize = 900;
/// Most recipients in one `--mail-user`.
pub const MAX_RECIPIENTS: usize = 16;

/// The subject on one line: every control character (CR, LF, tab, escapes) and invisible
/// reordering character becomes a space, cut to [`MAX_SUBJECT_CHARS`].
pub fn clean_subject(subject: &str) -> String {
    let one: String = subject
        .chars()
        .take(MAX_SUBJECT_CHARS)
        .map(|c| {
            if crate::text::is_unsafe_on_terminal(c) {
                ' '
            } else {
                c
            }
        })
        .collect();
    one.trim().to_string()
}

/// A cleaned subject as a header's value: as it is when ASCII, else RFC 2047 encoded words
/// (UTF-8, base64), each at most 75 characters, folded onto lines of their own.
pub fn encode_subject(clean: &str) -> String {
    if clean.is_ascii() {
        return clean.to_string();
    }
    // "=?utf-8?b?" + "?=" is 12 characters: 45 bytes of text make 60 of base64.
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in clean.chars() {
        if chunk.len() + c.len_utf8() > 45 {
            words.push(std::mem::take(&mut chunk));
        }
        chunk.push(c);
    }
    words.push(chunk);
    words
        .iter()
        .map(|w| {
            format!(
                "=?utf-8?b?{}?=",
                crate::report::jobstats::base64_encode(w.as_bytes())
            )
        })
        .collect::<Vec<_>>()
        .join("\n ")
}

/// Whether `r` is one recipient a mailer takes as an address and nothing else: a local user's
/// name, or `local@domain` of plain characters. Nothing that starts with `-` (an option), `|`
/// or `/` (a pipe or a file to some mailers), and no spaces, quotes, angle brackets or commas.
pub fn is_recipient(r: &str) -> bool {
    let local_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 64
            && !l.starts_with(['-', '.'])
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._%+=-".contains(&b))
    };
    if r.len() > 254 {
        return false;
    }
    match r.split_once('@') {
        None => local_ok(r),
        Some((local, domain)) => {
            local_ok(local)
                && !domain.is_empty()
                && domain.len() <= 253
                && !domain.starts_with(['-', '.'])
                && !domain.ends_with(['-', '.'])
                && domain
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        }
    }
}

/// The recipients of a `--mail-user` value: Slurm passes it as one argument, which may list
/// several addresses separated by commas. `None` when any of them is not [`is_recipient`].
pub fn recipients(value: &str) -> Option<Vec<String>> {
    let list: Vec<String> = value.split(',').map(|r| r.trim().to_string()).collect();
    let ok =
        !list.is_empty() && list.len() <= MAX_RECIPIENTS && list.iter().all(|r| is_recipient(r));
    ok.then_some(list)
}

/// A body safe to mail and to show: lines kept, tabs made spaces, every other control or
/// invisible reordering character (terminal escapes, CR, NUL) left out, each line cut to
/// [`MAX_LINE_BYTES`].
pub fn clean_body(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split('\n') {
        let mut l = String::new();
        for c in line.chars() {
            let c = if c == '\t' { ' ' } else { c };
            if crate::text::is_unsafe_on_terminal(c) {
                continue;
            }
            if l.len() + c.len_utf8() > MAX_LINE_BYTES {
                break;
            }
            l.push(c);
        }
        out.push_str(l.trim_end());
        out.push('\n');
    }
    // The split's last piece is what followed the last newline: one newline ends the body.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// What the mailer is run with: its arguments and what goes on its standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Its standard input.
    pub stdin: String,
}

/// The mailer's call for `kind`: the mail to `to` (checked with [`recipients`]) with the
/// subject `subject` (cleaned with [`clean_subject`]) and `body` (cleaned with
/// [`clean_body`]; empty: Slurm's own empty mail). The recipients always follow `--`.
pub fn invocation(kind: MailerKind, to: &[String], subject: &str, body: &str) -> Invocation {
    let mut args = Vec::new();
    let stdin = match kind {
        MailerKind::Sendmail => {
            // -oi: a line of one dot does not end the message.
            args.push("-oi".to_string());
            let mut m = String::new();
            m.push_str(&format!("To: {}\n", to.join(", ")));
            m.push_str(&format!("Subject: {}\n", encode_subject(subject)));
            m.push_str("MIME-Version: 1.0\n");
            m.push_str("Content-Type: text/plain; charset=utf-8\n");
            m.push_str("Content-Transfer-Encoding: 8bit\n");
            // RFC 3834: no vacation replies to it.
            m.push_str("Auto-Submitted: auto-generated\n\n");
            m.push_str(body);
            m
        }
        MailerKind::Mail => {
            args.push("-s".to_string());
            args.push(subject.to_string());
            body.to_string()
        }
    };
    args.push("--".to_string());
    args.extend(to.iter().cloned());
    Invocation { args, stdin }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The headers of a sendmail message: the lines before the first empty one.
    fn headers(m: &str) -> Vec<&str> {
        m.split("\n\n").next().unwrap().lines().collect()
    }

    #[test]
    fn a_job_name_with_a_newline_and_bcc_adds_no_header() {
        let subject = "Slurm Job_id=9 Name=x\r\nBcc: evil@example.com\nX-Y: z Ended, COMPLETED";
        let clean = clean_subject(subject);
        assert!(!clean.contains(['\r', '\n']));
        let inv = invocation(
            MailerKind::Sendmail,
            &["alice".into()],
            &clean,
            &clean_body("body\nBcc: not a header\n"),
        );
        let h = headers(&inv.stdin);
        assert_eq!(h.len(), 6, "{h:?}");
        assert!(
            h.iter()
                .all(|l| !l.starts_with("Bcc") && !l.starts_with("X-Y"))
        );
        assert!(h[1].starts_with("Subject: Slurm Job_id=9 Name=x  Bcc: evil@example.com"));
        assert_eq!(inv.args, ["-oi", "--", "alice"]);
        // The mail(1) form: the subject is one argument of one line.
        let inv = invocation(MailerKind::Mail, &["alice".into()], &clean, "");
        assert_eq!(inv.args.len(), 4);
        assert!(!inv.args[1].contains('\n'));
        assert_eq!(&inv.args[2..], ["--", "alice"]);
    }

    #[test]
    fn a_recipient_that_reads_as_an_option_is_refused() {
        for bad in [
            "-oQ/tmp",
            "-C/tmp/x.cf alice",
            "--help",
            "alice -oQ/tmp",
            "|/bin/sh",
            "/tmp/mbox",
            "a@b.c,-oQ/tmp",
            "\"a b\"@c.d",
            "a@-b.c",
            "a\n@b.c",
            "",
            "<a@b.c>",
        ] {
            assert_eq!(recipients(bad), None, "{bad:?}");
        }
        assert_eq!(recipients("alice"), Some(vec!["alice".to_string()]));
        assert_eq!(
            recipients("a.b+gpu@x-y.example.org, c@d.e"),
            Some(vec!["a.b+gpu@x-y.example.org".into(), "c@d.e".into()])
        );
    }

    #[test]
    fn control_characters_are_stripped_from_the_body_and_subject() {
        let body = clean_body("a\u{1b}[31mred\u{1b}[0m\r\n\tb\u{7}\u{0}\u{9b}c\u{202e}d\n\n");
        assert_eq!(body, "a[31mred[0m\n bcd\n");
        assert!(body.chars().all(|c| c == '\n' || !c.is_control()));
        assert_eq!(clean_subject("\u{1b}]0;title\u{7}job"), "]0;title job");
        let long = clean_body(&"x".repeat(5000));
        assert_eq!(long.len(), MAX_LINE_BYTES + 1);
    }

    #[test]
    fn a_non_ascii_subject_is_encoded() {
        let s = clean_subject("Slurm Job_id=1 Name=entraînement-ü-😀 Ended");
        let e = encode_subject(&s);
        assert!(e.is_ascii());
        assert!(
            e.lines()
                .all(|l| l.trim().starts_with("=?utf-8?b?") && l.len() <= 76)
        );
        let back: String = e
            .lines()
            .map(|l| {
                let b = l
                    .trim()
                    .trim_start_matches("=?utf-8?b?")
                    .trim_end_matches("?=");
                String::from_utf8(crate::report::jobstats::base64_decode(b).unwrap()).unwrap()
            })
            .collect();
        assert_eq!(back, s);
        assert_eq!(encode_subject("plain"), "plain");
    }
}
