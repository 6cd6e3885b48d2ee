//! The nesting bound (issue 11 item 5): a scan of the source's tokens, before the parser, that
//! refuses a source nested deeper than [`crate::Limits::max_nesting`] with a diagnostic at the
//! token that crossed it. The parser, the compiler and the evaluator all recurse on the
//! syntax tree, so 20,000 nested `[` (or `-`, `.b`, `+` terms) would overflow the stack; a
//! bound any real workflow stays far below keeps every depth the source size allows a
//! diagnostic.
//!
//! The depth counted is an upper bound on the syntax tree's: each open bracket and each block
//! (`Indent`) is a level, and so is each operator, keyword or postfix bracket since the last
//! separator (`,`, `:`, `=`, `;`, newline) at the same bracket level, because `a + b + c` and
//! `f()()` nest one node per operator.

use starlark::syntax::Dialect;
use starlark_syntax::codemap::CodeMap;
use starlark_syntax::lexer::{Lexer, Token};

/// Where the source first nests deeper than `max`: `(byte offset, depth)`, or `None` when it
/// stays within. A lexical error ends the scan; the parser reports it.
pub fn too_deep(file: &str, text: &str, dialect: &Dialect, max: usize) -> Option<(usize, usize)> {
    let lexer = Lexer::new(
        text,
        dialect,
        CodeMap::new(file.to_string(), text.to_string()),
    );
    // One counter per open bracket level (the statement itself is level 0): operators since
    // that level's last separator.
    let mut ops: Vec<usize> = vec![0];
    let mut blocks = 0usize;
    for lexeme in lexer {
        let Ok((start, token, _)) = lexeme else {
            return None;
        };
        match token {
            Token::OpeningRound | Token::OpeningSquare | Token::OpeningCurly => {
                // A bracket after an operand (a call, an index) wraps it: count it where it
                // stands, then open its own level.
                *ops.last_mut().expect("level 0 is never popped") += 1;
                ops.push(0);
            }
            Token::ClosingRound | Token::ClosingSquare | Token::ClosingCurly => {
                if ops.len() > 1 {
                    ops.pop();
                }
            }
            Token::Comma
            | Token::Colon
            | Token::Semicolon
            | Token::Equal
            | Token::Newline
            | Token::PlusEqual
            | Token::MinusEqual
            | Token::StarEqual
            | Token::SlashEqual
            | Token::SlashSlashEqual
            | Token::PercentEqual
            | Token::AmpersandEqual
            | Token::PipeEqual
            | Token::CaretEqual
            | Token::LessLessEqual
            | Token::GreaterGreaterEqual => {
                *ops.last_mut().expect("level 0 is never popped") = 0;
            }
            Token::Indent => blocks += 1,
            Token::Dedent => blocks = blocks.saturating_sub(1),
            Token::Identifier(_)
            | Token::Int(_)
            | Token::Float(_)
            | Token::String(_)
            | Token::Bytes(_)
            | Token::Comment(_)
            | Token::Pass
            | Token::Break
            | Token::Continue => {}
            _ => *ops.last_mut().expect("level 0 is never popped") += 1,
        }
        let depth = blocks + ops.len() + ops.iter().sum::<usize>();
        if depth > max {
            return Some((start, depth));
        }
    }
    None
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_of(src: &str) -> Option<(usize, usize)> {
        too_deep("t.star", src, &crate::dialect(), 50)
    }

    #[test]
    fn ordinary_sources_stay_within() {
        let list: Vec<String> = (0..500).map(|i| format!("\"s{i}\"")).collect();
        assert_eq!(depth_of(&format!("x = [{}]\n", list.join(", "))), None);
        assert_eq!(
            depth_of("def f(a, b = 1):\n    if a:\n        return [x for x in b if x]\n"),
            None
        );
    }

    #[test]
    fn every_nesting_shape_is_bounded() {
        for src in [
            format!("x = {}{}", "[".repeat(60), "]".repeat(60)),
            format!("x = {}1", "-".repeat(60)),
            format!("x = {}", vec!["1"; 60].join(" + ")),
            format!("x = a{}", ".b".repeat(60)),
            format!("x = f{}", "()".repeat(60)),
        ] {
            assert!(depth_of(&src).is_some(), "{src}");
        }
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 0), (1, 1));
    }
}
