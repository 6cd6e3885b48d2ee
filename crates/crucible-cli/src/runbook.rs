//! `crucible runbook …`: prints what the runbook layer (`crucible_pack::runbook`) decides.

use crate::args::{ConvertArgs, RunbookDirArgs, SealArgs, SelectArgs};
use anyhow::Result;
use crucible_pack::runbook::select::{bundles_in, Attributes, Candidate, Scope, Verdict};
use crucible_pack::runbook::{self, BundleError, Checked, Refused};
use crucible_plan::diag::Diagnostic;
use crucible_plan::terminal::{escape, escape_lines};
use std::process::ExitCode;

fn warnings(ws: &[Diagnostic]) {
    for w in ws {
        eprintln!("{}\n", escape_lines(&w.render("warning")));
    }
}

fn refused(r: &Refused) -> ExitCode {
    warnings(&r.warnings);
    eprintln!("{}", escape_lines(&r.errors.to_string()));
    eprintln!("\n{} error(s)", r.errors.0.len());
    ExitCode::from(1)
}

/// The value, or the failure printed (a refused contract as its diagnostics) and exit 1.
fn done<T>(result: Result<T, BundleError>) -> Result<T, ExitCode> {
    result.map_err(|e| match e {
        BundleError::Refused(r) => refused(&r),
        other => {
            eprintln!("error: {}", escape_lines(&other.to_string()));
            ExitCode::from(1)
        }
    })
}

fn summary(c: &Checked) -> String {
    let r = &c.runbook;
    let n = r.skill_dependencies.len();
    format!(
        "{} {} (procedure {}, {n} skill dependenc{}, {} warning(s))",
        escape(&r.name),
        escape(&r.version),
        escape(&r.procedure),
        if n == 1 { "y" } else { "ies" },
        c.warnings.len()
    )
}

pub fn validate(a: &RunbookDirArgs) -> Result<ExitCode> {
    let c = match runbook::check(&a.dir) {
        Ok(c) => c,
        Err(r) => return Ok(refused(&r)),
    };
    warnings(&c.warnings);
    println!("valid: {}", summary(&c));
    Ok(ExitCode::SUCCESS)
}

pub fn seal(a: &SealArgs) -> Result<ExitCode> {
    let (release, ws) = match done(runbook::seal(&a.dir)) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    warnings(&ws);
    if let Some(store) = &a.store {
        match done(runbook::store(&a.dir, &release, store)) {
            Ok(at) => eprintln!("stored: {}", escape(&at.display().to_string())),
            Err(code) => return Ok(code),
        }
    }
    println!("{}", serde_json::to_string_pretty(&release)?);
    Ok(ExitCode::SUCCESS)
}

pub fn from_skill(a: &ConvertArgs) -> Result<ExitCode> {
    let c = match done(runbook::from_skill(&a.from, &a.dest)) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    warnings(&c.warnings);
    println!(
        "wrote {}: {}",
        escape(&a.dest.display().to_string()),
        summary(&c)
    );
    println!(
        "review runbook.json before sealing: a skill declares no effects, capabilities, \
         predicates or gates, so it allows only filesystem.read and runs only when named"
    );
    Ok(ExitCode::SUCCESS)
}

pub fn to_skill(a: &ConvertArgs) -> Result<ExitCode> {
    if let Err(code) = done(runbook::to_skill(&a.from, &a.dest)) {
        return Ok(code);
    }
    println!(
        "wrote {}: the procedure is its SKILL.md; runbook.json was left out",
        escape(&a.dest.display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}

pub fn select(a: &SelectArgs) -> Result<ExitCode> {
    let mut candidates = Vec::new();
    for (scope, dirs) in [(Scope::Personal, &a.personal), (Scope::Team, &a.team)] {
        for dir in dirs {
            let found = bundles_in(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
            candidates.extend(found.into_iter().map(|d| Candidate::load(scope, d)));
        }
    }
    let paths: Vec<&str> = candidates
        .iter()
        .filter_map(|c| c.checked.as_ref().ok())
        .flat_map(|c| {
            let ap = &c.runbook.applicability;
            ap.required_files.iter().chain(&ap.forbidden_files)
        })
        .map(String::as_str)
        .collect();
    let attrs = Attributes::observe(&a.cwd, paths);
    let verdicts = runbook::select::select(&candidates, &attrs);
    let mut chosen = None;
    for (c, v) in candidates.iter().zip(&verdicts) {
        let why = match v {
            Verdict::Selected(met) => {
                chosen = Some(c);
                format!("applicable ({})", met.join("; "))
            }
            Verdict::Invalid(n) => {
                format!("invalid: {n} error(s) (see `crucible runbook validate`)")
            }
            Verdict::Explicit => "explicit invocation: runs only when named".into(),
            Verdict::NotApplicable(why) => format!("not applicable: {why}"),
            Verdict::Shadowed(by) => format!(
                "shadowed by the personal release of the same name at {}",
                by.display()
            ),
            Verdict::Ambiguous(n) => {
                format!("applicable, but {n} applicable automatic releases remain")
            }
        };
        println!(
            "{:<12}  {:<8}  {}  {}: {}",
            if matches!(v, Verdict::Selected(_)) {
                "selected"
            } else {
                "not selected"
            },
            c.scope.word(),
            escape(c.name().unwrap_or("-")),
            escape(&c.dir.display().to_string()),
            escape(&why)
        );
    }
    match chosen {
        Some(c) => {
            println!(
                "selected: {} ({}) {}",
                escape(c.name().unwrap_or("-")),
                c.scope.word(),
                escape(&c.dir.display().to_string())
            );
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let ambiguous = verdicts.iter().any(|v| matches!(v, Verdict::Ambiguous(_)));
            println!(
                "selected: none ({})",
                if ambiguous {
                    "more than one applies: name the runbook explicitly"
                } else {
                    "no valid automatic runbook applies"
                }
            );
            Ok(ExitCode::from(1))
        }
    }
}
