//! Applicability and automatic selection (issue 15).
//!
//! Applicability reads only normalized, trusted attributes of the working directory: its
//! canonical path, and whether each named file is there, observed without following links. An
//! attribute that cannot be observed (a link, an unreadable entry, a directory that cannot be
//! normalized) never authorizes: a required file must be seen present and a forbidden one seen
//! absent. A release is chosen automatically only when exactly one valid, `auto`, applicable
//! release remains after a personal release shadows team releases of the same name; every
//! candidate gets the reason it was or was not chosen.

use super::validate::{Checked, Refused};
use super::{Applicability, Invocation, CONTRACT_FILE};
use crate::files::{PackDir, PackFileErrorKind};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a release was installed: a person's own releases take precedence over the team's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Personal,
    Team,
}

impl Scope {
    pub fn word(self) -> &'static str {
        match self {
            Scope::Personal => "personal",
            Scope::Team => "team",
        }
    }
}

/// What was observed of one path below the working directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fact {
    Present,
    Absent,
    /// Not observable as a trusted attribute (a link, a special file, an error).
    Unknown,
}

/// The trusted attributes applicability reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// The canonical working directory, when it could be normalized.
    pub cwd: Option<String>,
    /// Facts by path relative to the working directory; a path not here is [`Fact::Unknown`].
    pub files: BTreeMap<String, Fact>,
}

impl Attributes {
    /// Observes `cwd` and each of `paths` below it, without following links.
    pub fn observe<'a>(cwd: &Path, paths: impl IntoIterator<Item = &'a str>) -> Attributes {
        let canonical = cwd.canonicalize().ok();
        let dir = canonical.as_deref().and_then(|c| PackDir::open(c).ok());
        let files = paths
            .into_iter()
            .map(|rel| {
                let fact = match &dir {
                    None => Fact::Unknown,
                    Some(d) => match d.read(rel, 0) {
                        Ok(_) => Fact::Present,
                        Err(e) => match e.kind {
                            PackFileErrorKind::TooLarge { .. } => Fact::Present,
                            PackFileErrorKind::NotFound => Fact::Absent,
                            PackFileErrorKind::NotRegular if d.is_dir(rel).unwrap_or(false) => {
                                Fact::Present
                            }
                            _ => Fact::Unknown,
                        },
                    },
                };
                (rel.to_string(), fact)
            })
            .collect();
        Attributes {
            cwd: canonical.and_then(|c| c.to_str().map(str::to_string)),
            files,
        }
    }

    fn file(&self, rel: &str) -> Fact {
        self.files.get(rel).copied().unwrap_or(Fact::Unknown)
    }
}

/// Whether `a` applies: `Ok` with what was checked, or `Err` with the first condition not met.
pub fn applies(a: &Applicability, attrs: &Attributes) -> Result<Vec<String>, String> {
    let mut met = Vec::new();
    if !a.cwd_globs.is_empty() {
        let Some(cwd) = &attrs.cwd else {
            return Err("the working directory could not be normalized".into());
        };
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: false,
        };
        let hit = a
            .cwd_globs
            .iter()
            .find(|g| glob::Pattern::new(g).is_ok_and(|p| p.matches_with(cwd, options)));
        match hit {
            Some(g) => met.push(format!("cwd matches `{g}`")),
            None => {
                return Err(format!(
                    "cwd {cwd} matches none of {}",
                    a.cwd_globs
                        .iter()
                        .map(|g| format!("`{g}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
    }
    for f in &a.required_files {
        match attrs.file(f) {
            Fact::Present => met.push(format!("{f} present")),
            Fact::Absent => return Err(format!("required file {f} is absent")),
            Fact::Unknown => return Err(format!("required file {f} could not be observed")),
        }
    }
    for f in &a.forbidden_files {
        match attrs.file(f) {
            Fact::Absent => met.push(format!("{f} absent")),
            Fact::Present => return Err(format!("forbidden file {f} is present")),
            Fact::Unknown => return Err(format!("forbidden file {f} could not be observed")),
        }
    }
    if met.is_empty() {
        met.push("no conditions".into());
    }
    Ok(met)
}

/// One installed bundle and what checking it gave.
#[derive(Debug)]
pub struct Candidate {
    pub scope: Scope,
    pub dir: PathBuf,
    pub checked: Result<Checked, Refused>,
}

impl Candidate {
    /// Checks the bundle at `dir`.
    pub fn load(scope: Scope, dir: PathBuf) -> Candidate {
        let checked = super::check(&dir);
        Candidate {
            scope,
            dir,
            checked,
        }
    }

    pub fn name(&self) -> Option<&str> {
        self.checked.as_ref().ok().map(|c| c.runbook.name.as_str())
    }
}

/// Why a candidate was or was not chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The one release left: what made it applicable.
    Selected(Vec<String>),
    /// The contract was refused, with this many errors.
    Invalid(usize),
    /// `invocation: explicit`: runs only when named.
    Explicit,
    NotApplicable(String),
    /// A personal release of the same name applies (its directory).
    Shadowed(PathBuf),
    /// Applicable, but this many releases remain.
    Ambiguous(usize),
}

/// The verdict on each candidate, in order; at most one is [`Verdict::Selected`].
pub fn select(candidates: &[Candidate], attrs: &Attributes) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = candidates
        .iter()
        .map(|c| match &c.checked {
            Err(r) => Verdict::Invalid(r.errors.0.len()),
            Ok(ch) => match ch.runbook.invocation {
                Invocation::Explicit => Verdict::Explicit,
                Invocation::Auto => match applies(&ch.runbook.applicability, attrs) {
                    Ok(met) => Verdict::Selected(met),
                    Err(why) => Verdict::NotApplicable(why),
                },
            },
        })
        .collect();
    let applicable = |v: &Verdict| matches!(v, Verdict::Selected(_));
    for (i, c) in candidates.iter().enumerate() {
        if c.scope != Scope::Team || !applicable(&verdicts[i]) {
            continue;
        }
        let personal = candidates.iter().enumerate().find(|(j, p)| {
            p.scope == Scope::Personal && p.name() == c.name() && applicable(&verdicts[*j])
        });
        if let Some((_, p)) = personal {
            verdicts[i] = Verdict::Shadowed(p.dir.clone());
        }
    }
    let remaining = verdicts.iter().filter(|v| applicable(v)).count();
    if remaining > 1 {
        for v in verdicts.iter_mut().filter(|v| applicable(v)) {
            *v = Verdict::Ambiguous(remaining);
        }
    }
    verdicts
}

/// The bundles `dir` names: itself when it holds `runbook.json`, else its subdirectories
/// that do, in name order.
pub fn bundles_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if dir.join(CONTRACT_FILE).exists() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join(CONTRACT_FILE).is_file())
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runbook::{EvidencePolicy, Runbook};
    use crucible_plan::diag::Diagnostics;

    fn app(globs: &[&str], required: &[&str], forbidden: &[&str]) -> Applicability {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        Applicability {
            cwd_globs: v(globs),
            required_files: v(required),
            forbidden_files: v(forbidden),
        }
    }

    fn attrs(cwd: Option<&str>, files: &[(&str, Fact)]) -> Attributes {
        Attributes {
            cwd: cwd.map(str::to_string),
            files: files.iter().map(|(p, f)| (p.to_string(), *f)).collect(),
        }
    }

    // Applicability on trusted attributes; an attribute not observed never authorizes.
    #[test]
    fn applicability_table() {
        use Fact::*;
        let here = Some("/home/me/src/my-project");
        let table: &[(Applicability, Attributes, Result<&str, &str>)] = &[
            (app(&[], &[], &[]), attrs(None, &[]), Ok("no conditions")),
            (
                app(&["**/my-project"], &[], &[]),
                attrs(here, &[]),
                Ok("cwd matches `**/my-project`"),
            ),
            (
                app(&["/home/*/my-project"], &[], &[]),
                attrs(here, &[]),
                Err("cwd /home/me/src/my-project matches none of `/home/*/my-project`"),
            ),
            (
                app(&["**/my-project"], &[], &[]),
                attrs(None, &[]),
                Err("the working directory could not be normalized"),
            ),
            (
                app(&[], &["package.json"], &[]),
                attrs(here, &[("package.json", Present)]),
                Ok("package.json present"),
            ),
            (
                app(&[], &["package.json"], &[]),
                attrs(here, &[("package.json", Absent)]),
                Err("required file package.json is absent"),
            ),
            (
                app(&[], &["package.json"], &[]),
                attrs(here, &[("package.json", Unknown)]),
                Err("required file package.json could not be observed"),
            ),
            (
                app(&[], &["package.json"], &[]),
                attrs(here, &[]),
                Err("required file package.json could not be observed"),
            ),
            (
                app(&[], &[], &[".production-only"]),
                attrs(here, &[(".production-only", Absent)]),
                Ok(".production-only absent"),
            ),
            (
                app(&[], &[], &[".production-only"]),
                attrs(here, &[(".production-only", Present)]),
                Err("forbidden file .production-only is present"),
            ),
            (
                app(&[], &[], &[".production-only"]),
                attrs(here, &[(".production-only", Unknown)]),
                Err("forbidden file .production-only could not be observed"),
            ),
        ];
        for (a, at, want) in table {
            let got = applies(a, at);
            match (want, &got) {
                (Ok(w), Ok(met)) => assert_eq!(met, &[w.to_string()], "{a:?} {at:?}"),
                (Err(w), Err(why)) => assert_eq!(why, w, "{a:?} {at:?}"),
                _ => panic!("{a:?} {at:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    fn cand(scope: Scope, name: &str, inv: Invocation, a: Applicability) -> Candidate {
        Candidate {
            scope,
            dir: PathBuf::from(format!("/{}/{name}", scope.word())),
            checked: Ok(Checked {
                runbook: Runbook {
                    name: name.into(),
                    version: "1".into(),
                    description: "d".into(),
                    invocation: inv,
                    required_capabilities: vec![],
                    allowed_effect_classes: vec![],
                    procedure: "RUNBOOK.md".into(),
                    skill_dependencies: vec![],
                    applicability: a,
                    artifacts: vec![],
                    success_predicates: vec![],
                    checkpoints: vec![],
                    evidence_policy: EvidencePolicy::default(),
                },
                warnings: vec![],
            }),
        }
    }

    fn invalid() -> Candidate {
        Candidate {
            scope: Scope::Team,
            dir: PathBuf::from("/team/broken"),
            checked: Err(Refused {
                errors: Diagnostics(vec![]),
                warnings: vec![],
            }),
        }
    }

    // Exactly one applicable automatic release is selected, after personal-over-team.
    #[test]
    fn selection_table() {
        use Invocation::*;
        use Scope::*;
        let none = || app(&[], &[], &[]);
        let needs_pkg = || app(&[], &["package.json"], &[]);
        let at = attrs(Some("/w"), &[("package.json", Fact::Absent)]);
        let sel = Verdict::Selected(vec!["no conditions".into()]);
        // One auto release applies: selected; explicit and invalid ones never are.
        let v = select(
            &[
                cand(Team, "a", Auto, none()),
                cand(Team, "b", Explicit, none()),
                invalid(),
                cand(Team, "c", Auto, needs_pkg()),
            ],
            &at,
        );
        assert_eq!(
            v,
            [
                sel.clone(),
                Verdict::Explicit,
                Verdict::Invalid(0),
                Verdict::NotApplicable("required file package.json is absent".into())
            ]
        );
        // Two applicable: neither is selected.
        let v = select(
            &[cand(Team, "a", Auto, none()), cand(Team, "b", Auto, none())],
            &at,
        );
        assert_eq!(v, [Verdict::Ambiguous(2), Verdict::Ambiguous(2)]);
        // A personal release shadows the team's of the same name, leaving one.
        let v = select(
            &[
                cand(Team, "a", Auto, none()),
                cand(Personal, "a", Auto, none()),
            ],
            &at,
        );
        assert_eq!(
            v,
            [Verdict::Shadowed(PathBuf::from("/personal/a")), sel.clone()]
        );
        // A personal release that does not apply shadows nothing.
        let v = select(
            &[
                cand(Team, "a", Auto, none()),
                cand(Personal, "a", Auto, needs_pkg()),
            ],
            &at,
        );
        assert_eq!(v[0], sel);
        // Precedence is by name: a personal release does not hide another team release.
        let v = select(
            &[
                cand(Team, "a", Auto, none()),
                cand(Personal, "b", Auto, none()),
            ],
            &at,
        );
        assert_eq!(v, [Verdict::Ambiguous(2), Verdict::Ambiguous(2)]);
        // Nothing applicable: nothing selected.
        let v = select(&[cand(Team, "c", Auto, needs_pkg())], &at);
        assert!(!v.iter().any(|v| matches!(v, Verdict::Selected(_))));
    }

    // Observation reads the directory without following links: a linked file is unknown.
    #[test]
    fn observing_a_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("package.json"), "{}").unwrap();
        std::fs::write(d.path().join("empty"), "").unwrap();
        std::fs::create_dir(d.path().join(".git")).unwrap();
        std::os::unix::fs::symlink("package.json", d.path().join("link.json")).unwrap();
        let a = Attributes::observe(
            d.path(),
            [
                "package.json",
                "empty",
                ".git",
                "link.json",
                "missing",
                "../x",
            ],
        );
        assert_eq!(a.cwd.as_deref(), d.path().canonicalize().unwrap().to_str());
        use Fact::*;
        for (path, fact) in [
            ("package.json", Present),
            ("empty", Present),
            (".git", Present),
            ("link.json", Unknown),
            ("missing", Absent),
            ("../x", Unknown),
        ] {
            assert_eq!(a.files[path], fact, "{path}");
        }
        let gone = Attributes::observe(&d.path().join("nope"), ["a"]);
        assert_eq!(gone.cwd, None);
        assert_eq!(gone.files["a"], Unknown);
    }
}
