//! The runbook contract corpus (issue 15): every `accept_*` / `reject_*` bundle under
//! `tests/corpus/runbooks/<rule>/` is checked; an accepted contract (and its warnings) or a
//! refused one's diagnostics is snapshotted. Every rule id is exercised by some case, except
//! `runbook.bundle` (links and special files), which the unit tests build on the fly.

use crucible_pack::runbook::{check, validate};
use std::collections::BTreeSet;

#[test]
fn corpus() {
    let mut seen = BTreeSet::new();
    insta::glob!("../../../tests/corpus/runbooks", "*/[ar][ce]*_*", |path| {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let result = check(path);
        if name.starts_with("accept_") {
            match result {
                Ok(c) => {
                    seen.extend(c.warnings.iter().map(|w| w.rule.clone()));
                    let warnings: Vec<String> =
                        c.warnings.iter().map(|w| w.render("warning")).collect();
                    insta::assert_snapshot!(format!(
                        "{:#?}\n\n{}",
                        c.runbook,
                        warnings.join("\n\n")
                    ))
                }
                Err(r) => panic!("{} should be valid:\n{r}", path.display()),
            }
        } else {
            match result {
                Ok(c) => panic!("{} should be refused: {:?}", path.display(), c.runbook),
                Err(r) => {
                    seen.extend(r.errors.0.iter().map(|d| d.rule.clone()));
                    let warnings: Vec<String> =
                        r.warnings.iter().map(|w| w.render("warning")).collect();
                    insta::assert_snapshot!(format!("{}\n\n{}", r.errors, warnings.join("\n\n")))
                }
            }
        }
    });
    let missing: Vec<&str> = validate::ALL_RULES
        .iter()
        .copied()
        .filter(|r| *r != validate::rules::BUNDLE && !seen.contains(*r))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a corpus case: {missing:?}"
    );
}
