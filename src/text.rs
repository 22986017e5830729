//! Text from users and files made safe to show: control characters and the invisible
//! characters that steer a terminal are replaced. The record, the report, the settings' messages
//! and phase-mark names all clean their text here.

/// `text` with control characters (terminal escapes, newlines, NULs) replaced by `?`, and cut to
/// `max` characters: for text that came from the user (job names, command lines).
pub fn clean_text(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if is_unsafe_on_terminal(c) { '?' } else { c })
        .collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// Whether `c` must not reach a terminal as it is: control characters (C0, DEL, C1: escape
/// sequences start with them), and the invisible characters that reorder or hide text
/// (bidirectional embeddings, overrides and isolates, marks, zero-width characters, and the
/// line and paragraph separators).
pub fn is_unsafe_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

/// `text` made safe for a terminal, keeping its lines and tabs: every other character of
/// [`is_unsafe_on_terminal`] becomes `?`.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c != '\n' && c != '\t' && is_unsafe_on_terminal(c))
    {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| {
            if c != '\n' && c != '\t' && is_unsafe_on_terminal(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// JSON text (as serde_json writes it) with every character of [`is_unsafe_on_terminal`]
/// that serde_json leaves raw (C1, DEL, the invisible reordering ones) written as a `\uXXXX`
/// escape: the same JSON value, safe to print.
pub fn json_terminal_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c != '\n' && c != '\t' && c != '\r' && is_unsafe_on_terminal(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_loses_control_characters() {
        assert_eq!(clean_text("a\x1b[2Jb\nc\u{9b}d", 50), "a?[2Jb?c?d");
        assert_eq!(clean_text("abcdef", 3), "abc…");
        assert_eq!(clean_text("ünï", 3), "ünï");
    }

    #[test]
    fn text_for_terminals_keeps_lines_and_drops_what_steers_them() {
        let t = "a\tb\nc\u{1b}[31m\u{9b}d\u{202e}e\u{2066}f\u{200b}g\u{7f}";
        assert_eq!(terminal_safe(t), "a\tb\nc?[31m?d?e?f?g?");
        assert!(matches!(
            terminal_safe("plain\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        let json = serde_json::to_string(&"x\u{202e}\u{85}y").unwrap();
        let safe = json_terminal_safe(&json);
        assert_eq!(safe, "\"x\\u202e\\u0085y\"");
        assert_eq!(
            serde_json::from_str::<String>(&safe).unwrap(),
            "x\u{202e}\u{85}y"
        );
        assert_eq!(clean_text("n\u{202e}m", 10), "n?m");
    }
}
