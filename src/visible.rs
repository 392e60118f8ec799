//! Characters that change how text looks without being seen — bidirectional overrides,
//! zero-width characters, control characters — written out as `\u{…}` in what approvers are
//! shown (`kubectl hitl`, the notifiers' messages), so an approver reads the call as the tool
//! server will, not as a terminal renders it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is invisible or reorders the text around it. Newlines and tabs are layout.
fn hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'  // control characters
        | '\u{ad}'                                                   // soft hyphen
        | '\u{61c}' | '\u{200e}' | '\u{200f}'                        // bidi marks
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'          // bidi embeddings, isolates
        | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' // zero-width
        | '\u{2028}' | '\u{2029}'                                    // line, paragraph separators
    )
}

/// `text` with every hidden character written as `\u{XXXX}`; borrowed when there is none.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_and_zero_width_characters_are_written_out() {
        // "rm -rf /" shown reversed by a right-to-left override, and a zero-width space.
        assert_eq!(
            visible("echo \u{202e}/ fr- mr\u{202c} x\u{200b}y"),
            "echo \\u{202e}/ fr- mr\\u{202c} x\\u{200b}y"
        );
        assert_eq!(visible("a\u{1b}[2Jb"), "a\\u{001b}[2Jb", "terminal escapes");
        assert_eq!(visible("a\u{feff}\u{2066}b"), "a\\u{feff}\\u{2066}b");
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        for text in ["plain", "multi\nline\twith tabs", "日本語 • émoji 🎉", ""] {
            assert!(
                matches!(visible(text), Cow::Borrowed(t) if t == text),
                "{text:?}"
            );
        }
    }
}
