//! Text bound for a terminal. Whatever a task prints (notes, stderr tails, output values, `over`
//! item keys) and whatever a run's files hold is untrusted: a raw ESC, CR or newline in it could
//! set the window title, clear the screen, or forge a `verdict: valid` line. Every place the CLI
//! prints such text passes it through [`escape`] (issue 11 item 4).

use std::borrow::Cow;

/// `text` with every control character (C0 including newline and tab, DEL, and C1) replaced by
/// its Rust escape (`\n`, `\u{1b}`), so the result is one line that drives nothing. Text with no
/// control character is returned as is.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Multi-line text the engine composed (a diagnostic, an error chain): each line escaped, the
/// line breaks kept, so untrusted text quoted inside a line cannot start a line of its own.
pub fn escape_lines(text: &str) -> String {
    text.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(escape("plain ⏎ text"), Cow::Borrowed(_)));
        assert_eq!(escape("\u{1b}]0;owned\u{7}"), "\\u{1b}]0;owned\\u{7}");
        assert_eq!(escape("a\nverdict: valid"), "a\\nverdict: valid");
        assert_eq!(escape("\r\t\u{7f}\u{9b}2J"), "\\r\\t\\u{7f}\\u{9b}2J");
    }

    #[test]
    fn escape_lines_keeps_breaks_and_escapes_within_lines() {
        assert_eq!(escape_lines("one\u{1b}[2J\ntwo\r"), "one\\u{1b}[2J\ntwo\\r");
    }
}
