//! The conformance map (`docs/conformance.md`) cites only what exists: every cited file, corpus
//! case and test function is in the tree, so a renamed or deleted test cannot leave a row
//! claiming coverage it no longer has (issue 16).
//!
//! What is read as a citation: in a table row, the tests cell (the second column); outside
//! tables, any paragraph naming a test file. In those, a backticked span is
//! - `path/to/file.rs::name` (or `::tests::name`, `::*`): the file exists and, unless `*`, holds a
//!   test function `name` (`#[test]` or `#[tokio::test]` on a `fn name(`);
//! - `path/to/file.rs` (holding tests), `path/to/case.star`, `path/to/dir/*`: it exists;
//!   paths are from the repository root (`tests/…` or `crates/…`);
//! - a bare `name` or `case.star`: resolved against the last file or corpus directory cited
//!   before it in the same cell or paragraph.
//!
//! Any other span in those places (a word quoted in a parenthesis) must not look like a test
//! name, so the map keeps such words out of backticks.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The backticked spans of `text`, in order.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether `source` declares `name` as a test function.
fn declares_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    lines.iter().enumerate().any(|(i, line)| {
        let line = line.trim_start();
        let declared = ["fn ", "async fn "].iter().any(|head| {
            line.strip_prefix(head)
                .and_then(|rest| rest.strip_prefix(name))
                .is_some_and(|rest| rest.starts_with('('))
        });
        declared
            && lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
                .any(|l| l == "#[test]" || l.starts_with("#[tokio::test"))
    })
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Checks one cell or paragraph; returns what it cites that does not exist.
fn check_citations(root: &Path, text: &str) -> Vec<String> {
    let mut missing = Vec::new();
    // The file a bare test name belongs to, and the directory a bare `.star` case is in.
    let mut file: Option<String> = None;
    let mut dir: Option<String> = None;
    for span in spans(text) {
        let (path, name) = match span.split_once("::") {
            Some((path, name)) => (path, Some(name.trim_start_matches("tests::"))),
            None => (span, None),
        };
        if name.is_some() && !path.contains('/') {
            missing.push(format!(
                "{span}: cite the file by its path from the repository root"
            ));
        } else if path.starts_with("tests/") || path.starts_with("crates/") {
            let on_disk = root.join(path.trim_end_matches("/*"));
            if !on_disk.exists() {
                missing.push(format!("{span}: no such path"));
                continue;
            }
            if path.ends_with(".rs") {
                let source = std::fs::read_to_string(&on_disk).unwrap_or_default();
                if name.is_none()
                    && !source.contains("#[test]")
                    && !source.contains("#[tokio::test")
                {
                    missing.push(format!("{span}: holds no test"));
                }
                file = Some(path.to_string());
            } else if path.ends_with(".star") || path.ends_with("/*") {
                dir = Path::new(path)
                    .parent()
                    .map(|d| d.to_string_lossy().into_owned());
            }
            match name {
                Some("*") | None => {}
                Some(name) => {
                    let source = std::fs::read_to_string(&on_disk).unwrap_or_default();
                    if !declares_test(&source, name) {
                        missing.push(format!("{span}: no test `{name}` in {path}"));
                    }
                }
            }
        } else if let Some(case) = span.strip_suffix(".star") {
            match &dir {
                Some(d) if root.join(d).join(span).is_file() => {}
                _ => missing.push(format!("{case}.star: not a case in {dir:?}")),
            }
        } else if is_identifier(span) && span.contains('_') {
            match &file {
                Some(f) => {
                    let source = std::fs::read_to_string(root.join(f)).unwrap_or_default();
                    if !declares_test(&source, span) {
                        missing.push(format!("{span}: no test of that name in {f}"));
                    }
                }
                None => missing.push(format!("{span}: a bare test name with no file before it")),
            }
        }
    }
    missing
}

// Every test, file and corpus case docs/conformance.md cites exists (issue 16).
#[test]
fn every_cited_test_exists() {
    let root = repo_root();
    let map = std::fs::read_to_string(root.join("docs/conformance.md")).unwrap();
    let mut missing = Vec::new();
    let mut cited = 0;
    for (n, line) in map.lines().enumerate() {
        let text = if let Some(row) = line.strip_prefix('|') {
            match row.split('|').nth(1) {
                Some(tests) if !tests.trim().starts_with("---") && tests.trim() != "tests" => {
                    tests.to_string()
                }
                _ => continue,
            }
        } else if line.contains("tests/conformance/") {
            line.to_string()
        } else {
            continue;
        };
        cited += spans(&text).len();
        missing.extend(
            check_citations(&root, &text)
                .into_iter()
                .map(|m| format!("docs/conformance.md:{}: {m}", n + 1)),
        );
    }
    assert!(
        cited > 100,
        "the map cites only {cited} things: was it read?"
    );
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

// The checker itself: a name that is not a test, or a file that is not there, is caught.
#[test]
fn the_citation_check_catches_what_is_missing() {
    let root = repo_root();
    let ok = "`tests/conformance/conformance_map.rs::every_cited_test_exists`, `the_citation_check_catches_what_is_missing`";
    assert_eq!(check_citations(&root, ok), Vec::<String>::new());
    for bad in [
        "`tests/conformance/conformance_map.rs::no_such_test`",
        "`tests/conformance/conformance_map.rs::*`, `repo_root`",
        "`tests/conformance/no_such_file.rs::*`",
        "`tests/corpus/compile/params/reject_not_first.star`, `reject_no_such_case.star`",
        "`a_bare_name`",
        "`conformance_map.rs::every_cited_test_exists`",
    ] {
        assert_eq!(check_citations(&root, bad).len(), 1, "{bad}");
    }
}
