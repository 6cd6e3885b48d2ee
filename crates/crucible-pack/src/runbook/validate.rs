//! `runbook.json` checked against every rule of the contract, all errors at once, each naming
//! the JSON path and the rule at `runbook.json:line:col` (rendered by `crucible_plan::diag`).
//! Unknown fields and duplicate keys are refused: a misspelt field must not silently mean
//! "absent". The procedure and skill dependencies are resolved in the bundle here, through
//! [`PackDir`], so what `validate` accepts is exactly what `seal` will seal.

use super::jsonpos::{element, member, Pos, Positions};
use super::{
    Applicability, Artifact, Checkpoint, EffectClass, EvidencePolicy, Gate, Invocation, Predicate,
    PredicateKind, Runbook, CONTRACT_FILE,
};
use crate::files::{pack_files, split_rel, PackDir, PackFileErrorKind, MAX_FILE_BYTES};
use crucible_plan::diag::{Diagnostic, Diagnostics};
use crucible_plan::validate::did_you_mean;
use serde_json::{Map, Value};
use std::path::Path;

/// Rule ids, one per contract rule (each has a corpus directory under `tests/corpus/runbooks/`).
pub mod rules {
    /// The contract file is missing, unreadable, not JSON or not an object.
    pub const FILE: &str = "runbook.file";
    /// The bundle holds a link or special file, which a release cannot seal.
    pub const BUNDLE: &str = "runbook.bundle";
    pub const DUPLICATE_KEY: &str = "runbook.duplicate-key";
    pub const UNKNOWN_FIELD: &str = "runbook.unknown-field";
    pub const REQUIRED: &str = "runbook.required";
    pub const TYPE: &str = "runbook.type";
    pub const SCHEMA_VERSION: &str = "runbook.schema-version";
    pub const NAME: &str = "runbook.name";
    pub const TEXT: &str = "runbook.text";
    pub const INVOCATION: &str = "runbook.invocation";
    pub const CAPABILITY: &str = "runbook.capability";
    pub const EFFECT: &str = "runbook.effect";
    pub const DUPLICATE: &str = "runbook.duplicate";
    pub const PROCEDURE: &str = "runbook.procedure";
    pub const SKILL_DEPENDENCY: &str = "runbook.skill-dependency";
    pub const APPLICABILITY: &str = "runbook.applicability";
    pub const PATH: &str = "runbook.path";
    pub const PREDICATE: &str = "runbook.predicate";
    pub const CHECKPOINT: &str = "runbook.checkpoint";
    pub const EVIDENCE: &str = "runbook.evidence";
}

/// A contract that passed, with the warnings it raised.
#[derive(Debug)]
pub struct Checked {
    pub runbook: Runbook,
    pub warnings: Vec<Diagnostic>,
}

/// A refused contract: every error, and the warnings raised on the way.
#[derive(Debug)]
pub struct Refused {
    pub errors: Diagnostics,
    pub warnings: Vec<Diagnostic>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.errors)
    }
}

impl std::error::Error for Refused {}

const TOP_REQUIRED: &[&str] = &[
    "schemaVersion",
    "name",
    "version",
    "description",
    "invocation",
    "requiredCapabilities",
    "allowedEffectClasses",
];
const TOP_OPTIONAL: &[&str] = &[
    "procedure",
    "skillDependencies",
    "applicability",
    "artifacts",
    "successPredicates",
    "checkpoints",
    "evidencePolicy",
];

/// Checks the bundle at `dir`: its `runbook.json`, procedure and skill dependencies.
pub fn check(dir: &Path) -> Result<Checked, Refused> {
    let refuse = |at: &str, message: String, fix: &str| Refused {
        errors: Diagnostic {
            file: at.to_string(),
            line: 1,
            col: 1,
            rule: rules::FILE.into(),
            message,
            fix: fix.into(),
            source_line: None,
            did_you_mean: None,
        }
        .into(),
        warnings: Vec::new(),
    };
    let bundle = PackDir::open(dir).map_err(|e| {
        refuse(
            &dir.display().to_string(),
            format!("cannot open the bundle: {}", e.kind),
            "name a runbook bundle directory",
        )
    })?;
    let bytes = bundle.read(CONTRACT_FILE, MAX_FILE_BYTES).map_err(|e| {
        refuse(
            CONTRACT_FILE,
            format!("cannot read {CONTRACT_FILE}: {}", e.kind),
            "a runbook bundle holds a regular runbook.json file at its root",
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        refuse(
            CONTRACT_FILE,
            "not UTF-8 text".into(),
            "write runbook.json as UTF-8 JSON",
        )
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        let mut r = refuse(
            CONTRACT_FILE,
            format!("not valid JSON: {e}"),
            "fix the JSON syntax",
        );
        r.errors.0[0].line = e.line().max(1);
        r.errors.0[0].col = e.column().max(1);
        r.errors.0[0].source_line = text.lines().nth(e.line().max(1) - 1).map(str::to_string);
        r
    })?;
    let mut c = Checker {
        pos: Positions::scan(&text),
        lines: text.lines().collect(),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    for (path, at) in c.pos.duplicates.clone() {
        c.error(
            at,
            rules::DUPLICATE_KEY,
            format!("`{path}` is given twice"),
            "give each field once: a JSON reader would silently keep only the last",
        );
    }
    if let Err(e) = pack_files(dir) {
        c.error(
            Pos { line: 1, col: 1 },
            rules::BUNDLE,
            format!("the bundle file `{}` cannot be sealed: {}", e.path, e.kind),
            "a bundle holds only regular files and directories (no links, pipes or devices)",
        );
    }
    let runbook = c.runbook(&value, &bundle);
    match runbook {
        Some(runbook) if c.errors.is_empty() => Ok(Checked {
            runbook,
            warnings: c.warnings,
        }),
        _ => Err(Refused {
            errors: Diagnostics(c.errors),
            warnings: c.warnings,
        }),
    }
}

struct Checker<'t> {
    pos: Positions,
    lines: Vec<&'t str>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

fn diagnostic(lines: &[&str], at: Pos, rule: &str, message: String, fix: &str) -> Diagnostic {
    Diagnostic {
        file: CONTRACT_FILE.into(),
        line: at.line,
        col: at.col,
        rule: rule.into(),
        message,
        fix: fix.into(),
        source_line: lines.get(at.line - 1).map(|l| l.to_string()),
        did_you_mean: None,
    }
}

/// A runbook, artifact, stage or gate name: lowercase letters, digits and single inner hyphens.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.split('-').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// A tool name (a capability, or the `<name>` of `tool:<name>`).
fn is_tool(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl Checker<'_> {
    fn error(&mut self, at: Pos, rule: &str, message: String, fix: &str) {
        self.errors
            .push(diagnostic(&self.lines, at, rule, message, fix));
    }

    fn warn(&mut self, at: Pos, rule: &str, message: String, fix: &str) {
        self.warnings
            .push(diagnostic(&self.lines, at, rule, message, fix));
    }

    fn type_error(&mut self, path: &str, want: &str) {
        let at = self.pos.value(path);
        self.error(
            at,
            rules::TYPE,
            format!("`{path}` must be {want}"),
            &format!("give {want} here"),
        );
    }

    /// The object at `path`, its unknown members refused and missing required ones reported.
    fn object<'v>(
        &mut self,
        v: &'v Value,
        path: &str,
        known: &[&str],
        required: &[&str],
    ) -> Option<&'v Map<String, Value>> {
        let Some(obj) = v.as_object() else {
            self.type_error(path, "an object");
            return None;
        };
        for key in obj.keys() {
            if !known.contains(&key.as_str()) {
                let child = member(path, key);
                let at = self.pos.key(&child);
                let mut d = diagnostic(
                    &self.lines,
                    at,
                    rules::UNKNOWN_FIELD,
                    format!("`{child}` is not a field of this contract"),
                    &format!("known fields here: {}", known.join(", ")),
                );
                d.did_you_mean = did_you_mean(key, known.iter().copied()).map(str::to_string);
                self.errors.push(d);
            }
        }
        for key in required {
            if !obj.contains_key(*key) {
                let at = self.pos.value(path);
                self.error(
                    at,
                    rules::REQUIRED,
                    format!("`{}` is required", member(path, key)),
                    &format!("add `{key}`"),
                );
            }
        }
        Some(obj)
    }

    fn string<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v str> {
        let s = v.as_str();
        if s.is_none() {
            self.type_error(path, "a string");
        }
        s
    }

    /// A non-empty string.
    fn text(&mut self, v: &Value, path: &str) -> Option<String> {
        let s = self.string(v, path)?;
        if s.trim().is_empty() {
            let at = self.pos.value(path);
            self.error(
                at,
                rules::TEXT,
                format!("`{path}` is empty"),
                "write a non-empty value",
            );
            return None;
        }
        Some(s.to_string())
    }

    /// A name (`is_name`), reported under `rule`.
    fn name(&mut self, v: &Value, path: &str, rule: &str) -> Option<String> {
        let s = self.string(v, path)?;
        if !is_name(s) {
            let at = self.pos.value(path);
            self.error(
                at,
                rule,
                format!("`{path}`: `{s}` is not a name"),
                "use 1 to 64 lowercase letters, digits and single inner hyphens, e.g. `triage-bug`",
            );
            return None;
        }
        Some(s.to_string())
    }

    fn boolean(&mut self, v: &Value, path: &str) -> Option<bool> {
        let b = v.as_bool();
        if b.is_none() {
            self.type_error(path, "true or false");
        }
        b
    }

    /// The array's elements with their paths.
    fn array<'v>(&mut self, v: &'v Value, path: &str) -> Vec<(String, &'v Value)> {
        match v.as_array() {
            Some(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| (element(path, i), item))
                .collect(),
            None => {
                self.type_error(path, "an array");
                Vec::new()
            }
        }
    }

    /// An array of strings, a repeated one refused.
    fn strings(&mut self, v: &Value, path: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for (p, item) in self.array(v, path) {
            let Some(s) = self.string(item, &p) else {
                continue;
            };
            if out.iter().any(|(_, seen)| seen == s) {
                let at = self.pos.value(&p);
                self.error(
                    at,
                    rules::DUPLICATE,
                    format!("`{p}`: `{s}` is listed twice"),
                    "list each entry once",
                );
                continue;
            }
            out.push((p, s.to_string()));
        }
        out
    }

    /// A path relative to the run's working directory: no absolute path, `..`, `.` or empty
    /// segment.
    fn run_path(&mut self, v: &Value, path: &str) -> Option<String> {
        let s = self.string(v, path)?;
        self.relative(s, path).then(|| s.to_string())
    }

    /// Whether `s` (at `path`) is such a relative path; reported when not.
    fn relative(&mut self, s: &str, path: &str) -> bool {
        let Err(e) = split_rel(s) else {
            return true;
        };
        let at = self.pos.value(path);
        self.error(
            at,
            rules::PATH,
            format!("`{path}`: `{s}` is refused: {}", shape(&e.kind)),
            "give a relative path below the run's working directory, without `..`",
        );
        false
    }

    fn runbook(&mut self, v: &Value, bundle: &PackDir) -> Option<Runbook> {
        let known = [TOP_REQUIRED, TOP_OPTIONAL].concat();
        let obj = self.object(v, "$", &known, TOP_REQUIRED)?;
        let get = |k: &str| obj.get(k);

        if let Some(sv) = get("schemaVersion") {
            if sv.as_u64() != Some(1) {
                let at = self.pos.value("$.schemaVersion");
                self.error(
                    at,
                    rules::SCHEMA_VERSION,
                    format!("`$.schemaVersion` is {sv}: only version 1 is known"),
                    "set `\"schemaVersion\": 1`",
                );
            }
        }
        let name = get("name").and_then(|n| self.name(n, "$.name", rules::NAME));
        let version = get("version").and_then(|n| self.text(n, "$.version"));
        let description = get("description").and_then(|n| self.text(n, "$.description"));
        let invocation = get("invocation").and_then(|n| self.invocation(n));
        let capabilities = get("requiredCapabilities")
            .map(|n| self.capabilities(n))
            .unwrap_or_default();
        let effects = get("allowedEffectClasses")
            .map(|n| self.effects(n))
            .unwrap_or_default();
        let procedure = self.procedure(get("procedure"), bundle);
        let skill_dependencies = get("skillDependencies")
            .map(|n| self.skill_dependencies(n, bundle))
            .unwrap_or_default();
        let applicability = get("applicability")
            .map(|n| self.applicability(n))
            .unwrap_or_default();
        let artifacts = get("artifacts")
            .map(|n| self.artifacts(n))
            .unwrap_or_default();
        let success_predicates = get("successPredicates")
            .map(|n| self.predicates(n))
            .unwrap_or_default();
        let checkpoints = get("checkpoints")
            .map(|n| self.checkpoints(n, &artifacts))
            .unwrap_or_default();
        let evidence_policy = get("evidencePolicy")
            .map(|n| self.evidence(n))
            .unwrap_or_default();
        Some(Runbook {
            name: name?,
            version: version?,
            description: description?,
            invocation: invocation?,
            required_capabilities: capabilities,
            allowed_effect_classes: effects,
            procedure: procedure?,
            skill_dependencies,
            applicability,
            artifacts,
            success_predicates,
            checkpoints,
            evidence_policy,
        })
    }

    fn invocation(&mut self, v: &Value) -> Option<Invocation> {
        match self.string(v, "$.invocation")? {
            "explicit" => Some(Invocation::Explicit),
            "auto" => Some(Invocation::Auto),
            other => {
                let at = self.pos.value("$.invocation");
                let mut d = diagnostic(
                    &self.lines,
                    at,
                    rules::INVOCATION,
                    format!("`$.invocation` is `{other}`: it is `explicit` or `auto`"),
                    "use `explicit` (run only when named) or `auto` (may be selected)",
                );
                d.did_you_mean = did_you_mean(other, ["explicit", "auto"]).map(str::to_string);
                self.errors.push(d);
                None
            }
        }
    }

    fn capabilities(&mut self, v: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for (p, s) in self.strings(v, "$.requiredCapabilities") {
            if is_tool(&s) {
                out.push(s);
            } else {
                let at = self.pos.value(&p);
                self.error(
                    at,
                    rules::CAPABILITY,
                    format!("`{p}`: `{s}` is not a tool name"),
                    "name a tool: letters, digits, `_`, `-` and `.`, starting with a letter or digit",
                );
            }
        }
        out
    }

    fn effects(&mut self, v: &Value) -> Vec<EffectClass> {
        let mut out = Vec::new();
        for (p, s) in self.strings(v, "$.allowedEffectClasses") {
            let at = self.pos.value(&p);
            if s == "*" {
                self.warn(
                    at,
                    rules::EFFECT,
                    format!("`{p}`: `*` allows every effect"),
                    "list only the classes the procedure needs, e.g. `filesystem.read`",
                );
                out.push(EffectClass::Any);
            } else if let Some((_, class)) = EffectClass::NAMED.iter().find(|(n, _)| *n == s) {
                out.push(class.clone());
            } else if let Some(tool) = s.strip_prefix("tool:").filter(|t| is_tool(t)) {
                out.push(EffectClass::Tool(tool.to_string()));
            } else {
                let names = EffectClass::NAMED.iter().map(|(n, _)| *n);
                let mut d = diagnostic(
                    &self.lines,
                    at,
                    rules::EFFECT,
                    format!("`{p}`: `{s}` is not an effect class"),
                    "use filesystem.read, filesystem.write, process.exec, network, governance, \
                     tool:<name> or *",
                );
                d.did_you_mean = did_you_mean(&s, names).map(str::to_string);
                self.errors.push(d);
            }
        }
        out
    }

    /// The procedure: `procedure` if given, else `RUNBOOK.md`, else a root `SKILL.md`.
    fn procedure(&mut self, v: Option<&Value>, bundle: &PackDir) -> Option<String> {
        let fix = "give `procedure` a Markdown file in the bundle, or add RUNBOOK.md (or SKILL.md)";
        let Some(v) = v else {
            for candidate in ["RUNBOOK.md", "SKILL.md"] {
                match bundle.read(candidate, MAX_FILE_BYTES) {
                    Err(e) if matches!(e.kind, PackFileErrorKind::NotFound) => continue,
                    result => return self.procedure_text(result, "$", candidate, fix),
                }
            }
            let at = self.pos.value("$");
            self.error(
                at,
                rules::PROCEDURE,
                "no procedure: `procedure` is not given and the bundle has neither RUNBOOK.md \
                 nor SKILL.md"
                    .into(),
                fix,
            );
            return None;
        };
        let s = self.string(v, "$.procedure")?;
        if s == CONTRACT_FILE {
            let at = self.pos.value("$.procedure");
            self.error(
                at,
                rules::PROCEDURE,
                "`$.procedure` names the contract itself".into(),
                fix,
            );
            return None;
        }
        let result = bundle.read(s, MAX_FILE_BYTES);
        self.procedure_text(result, "$.procedure", s, fix)
    }

    fn procedure_text(
        &mut self,
        result: Result<Vec<u8>, crate::files::PackFileError>,
        path: &str,
        file: &str,
        fix: &str,
    ) -> Option<String> {
        let at = self.pos.value(path);
        match result {
            Ok(bytes) if std::str::from_utf8(&bytes).is_ok() => Some(file.to_string()),
            Ok(_) => {
                self.error(
                    at,
                    rules::PROCEDURE,
                    format!("the procedure `{file}` is not UTF-8 text"),
                    fix,
                );
                None
            }
            Err(e) => {
                self.error(
                    at,
                    rules::PROCEDURE,
                    format!("the procedure `{file}` cannot be read: {}", shape(&e.kind)),
                    fix,
                );
                None
            }
        }
    }

    fn skill_dependencies(&mut self, v: &Value, bundle: &PackDir) -> Vec<String> {
        let fix = "name a directory inside the bundle that holds a SKILL.md";
        let mut out = Vec::new();
        for (p, s) in self.strings(v, "$.skillDependencies") {
            let at = self.pos.value(&p);
            let dir = s.trim_end_matches('/');
            let problem = match bundle.is_dir(dir) {
                Err(e) => Some(format!("`{s}` is refused: {}", shape(&e.kind))),
                Ok(false) => Some(format!("`{s}` is not a directory in the bundle")),
                Ok(true) => match bundle.read(&format!("{dir}/SKILL.md"), MAX_FILE_BYTES) {
                    Ok(_) => None,
                    Err(e) => Some(format!("`{dir}/SKILL.md` cannot be read: {}", e.kind)),
                },
            };
            match problem {
                Some(problem) => self.error(
                    at,
                    rules::SKILL_DEPENDENCY,
                    format!("`{p}`: {problem}"),
                    fix,
                ),
                None => out.push(dir.to_string()),
            }
        }
        out
    }

    fn applicability(&mut self, v: &Value) -> Applicability {
        let path = "$.applicability";
        let known = ["cwdGlobs", "requiredFiles", "forbiddenFiles"];
        let Some(obj) = self.object(v, path, &known, &[]) else {
            return Applicability::default();
        };
        let mut a = Applicability::default();
        if let Some(g) = obj.get("cwdGlobs") {
            let p = member(path, "cwdGlobs");
            for (ep, s) in self.strings(g, &p) {
                if let Err(e) = glob::Pattern::new(&s) {
                    let at = self.pos.value(&ep);
                    self.error(
                        at,
                        rules::APPLICABILITY,
                        format!("`{ep}`: `{s}` is not a glob: {}", e.msg),
                        "use `*`, `**`, `?` and `[...]` patterns, e.g. `**/my-project`",
                    );
                } else if s.split('/').any(|seg| seg == "..") {
                    let at = self.pos.value(&ep);
                    self.error(
                        at,
                        rules::APPLICABILITY,
                        format!("`{ep}`: `{s}` has a `..` segment, which never matches a normalized directory"),
                        "match the normalized working directory, without `..`",
                    );
                } else {
                    a.cwd_globs.push(s);
                }
            }
        }
        for (key, list) in [
            ("requiredFiles", &mut a.required_files),
            ("forbiddenFiles", &mut a.forbidden_files),
        ] {
            if let Some(files) = obj.get(key) {
                let p = member(path, key);
                for (ep, s) in self.strings(files, &p) {
                    if self.relative(&s, &ep) {
                        list.push(s);
                    }
                }
            }
        }
        a
    }

    fn artifacts(&mut self, v: &Value) -> Vec<Artifact> {
        let mut out: Vec<Artifact> = Vec::new();
        for (p, item) in self.array(v, "$.artifacts") {
            let Some(obj) = self.object(
                item,
                &p,
                &["name", "path", "stage", "required"],
                &["name", "path", "stage"],
            ) else {
                continue;
            };
            let name = obj
                .get("name")
                .and_then(|n| self.name(n, &member(&p, "name"), rules::NAME));
            let path = obj
                .get("path")
                .and_then(|n| self.run_path(n, &member(&p, "path")));
            let stage = obj
                .get("stage")
                .and_then(|n| self.name(n, &member(&p, "stage"), rules::NAME));
            let required = match obj.get("required") {
                Some(r) => self.boolean(r, &member(&p, "required")).unwrap_or(false),
                None => false,
            };
            let (Some(name), Some(path), Some(stage)) = (name, path, stage) else {
                continue;
            };
            for (field, clash) in [
                ("name", out.iter().any(|a| a.name == name)),
                ("path", out.iter().any(|a| a.path == path)),
            ] {
                if clash {
                    let fp = member(&p, field);
                    let at = self.pos.value(&fp);
                    self.error(
                        at,
                        rules::DUPLICATE,
                        format!("`{fp}`: another artifact has the same {field}"),
                        "give each artifact its own name and path",
                    );
                }
            }
            out.push(Artifact {
                name,
                path,
                stage,
                required,
            });
        }
        out
    }

    fn predicates(&mut self, v: &Value) -> Vec<Predicate> {
        let mut out = Vec::new();
        for (p, item) in self.array(v, "$.successPredicates") {
            let Some(obj) = self.object(item, &p, &["type", "path"], &["type", "path"]) else {
                continue;
            };
            let tp = member(&p, "type");
            let kind = obj.get("type").and_then(|t| {
                let s = self.string(t, &tp)?;
                let found = PredicateKind::ALL.iter().find(|(n, _)| *n == s);
                if found.is_none() {
                    let at = self.pos.value(&tp);
                    let mut d = diagnostic(
                        &self.lines,
                        at,
                        rules::PREDICATE,
                        format!("`{tp}`: `{s}` is not a predicate type"),
                        "use `artifact_exists` or `artifact_nonempty`",
                    );
                    d.did_you_mean = did_you_mean(s, PredicateKind::ALL.iter().map(|(n, _)| *n))
                        .map(str::to_string);
                    self.errors.push(d);
                }
                found.map(|(_, k)| *k)
            });
            let path = obj
                .get("path")
                .and_then(|n| self.run_path(n, &member(&p, "path")));
            if let (Some(kind), Some(path)) = (kind, path) {
                out.push(Predicate { kind, path });
            }
        }
        out
    }

    fn checkpoints(&mut self, v: &Value, artifacts: &[Artifact]) -> Vec<Checkpoint> {
        let mut out: Vec<Checkpoint> = Vec::new();
        for (p, item) in self.array(v, "$.checkpoints") {
            let Some(obj) = self.object(
                item,
                &p,
                &["stage", "summary", "artifactPaths", "gate"],
                &["stage", "summary"],
            ) else {
                continue;
            };
            let sp = member(&p, "stage");
            let stage = obj
                .get("stage")
                .and_then(|n| self.name(n, &sp, rules::NAME));
            if let Some(stage) = &stage {
                if out.iter().any(|c| &c.stage == stage) {
                    let at = self.pos.value(&sp);
                    self.error(
                        at,
                        rules::DUPLICATE,
                        format!("`{sp}`: stage `{stage}` already has a checkpoint"),
                        "give each stage one checkpoint",
                    );
                }
            }
            let summary = obj
                .get("summary")
                .and_then(|n| self.text(n, &member(&p, "summary")));
            let mut artifact_paths = Vec::new();
            if let Some(paths) = obj.get("artifactPaths") {
                for (ep, s) in self.strings(paths, &member(&p, "artifactPaths")) {
                    let declared = artifacts.iter().find(|a| a.path == s);
                    let problem = match (declared, &stage) {
                        (None, _) => Some(format!("`{s}` is not a declared artifact's path")),
                        (Some(a), Some(stage)) if &a.stage != stage => Some(format!(
                            "`{s}` is an artifact of stage `{}`, not `{stage}`",
                            a.stage
                        )),
                        _ => None,
                    };
                    match problem {
                        Some(problem) => {
                            let at = self.pos.value(&ep);
                            self.error(
                                at,
                                rules::CHECKPOINT,
                                format!("`{ep}`: {problem}"),
                                "a checkpoint hashes the artifacts its stage declares in `artifacts`",
                            );
                        }
                        None => artifact_paths.push(s),
                    }
                }
            }
            let gate = obj
                .get("gate")
                .and_then(|g| self.gate(g, &member(&p, "gate")));
            if let Some(g) = &gate {
                if out
                    .iter()
                    .any(|c| c.gate.as_ref().is_some_and(|o| o.id == g.id))
                {
                    let gp = member(&member(&p, "gate"), "id");
                    let at = self.pos.value(&gp);
                    self.error(
                        at,
                        rules::DUPLICATE,
                        format!("`{gp}`: gate `{}` is declared twice", g.id),
                        "give each gate its own id",
                    );
                }
            }
            if let (Some(stage), Some(summary)) = (stage, summary) {
                out.push(Checkpoint {
                    stage,
                    summary,
                    artifact_paths,
                    gate,
                });
            }
        }
        out
    }

    fn gate(&mut self, v: &Value, path: &str) -> Option<Gate> {
        let obj = self.object(v, path, &["id", "prompt"], &["id", "prompt"])?;
        let id = obj
            .get("id")
            .and_then(|n| self.name(n, &member(path, "id"), rules::CHECKPOINT));
        let prompt = obj
            .get("prompt")
            .and_then(|n| self.text(n, &member(path, "prompt")));
        Some(Gate {
            id: id?,
            prompt: prompt?,
        })
    }

    fn evidence(&mut self, v: &Value) -> EvidencePolicy {
        let path = "$.evidencePolicy";
        let known = ["retainArgumentValues", "promotionLevels"];
        let Some(obj) = self.object(v, path, &known, &[]) else {
            return EvidencePolicy::default();
        };
        let mut e = EvidencePolicy::default();
        if let Some(r) = obj.get("retainArgumentValues") {
            let rp = member(path, "retainArgumentValues");
            e.retain_argument_values = self.boolean(r, &rp).unwrap_or(false);
            if e.retain_argument_values {
                let at = self.pos.value(&rp);
                self.warn(
                    at,
                    rules::EVIDENCE,
                    format!("`{rp}` is true, but the ledger keeps only hashes of argument values"),
                    "set it to false: argument values are never retained",
                );
            }
        }
        if let Some(levels) = obj.get("promotionLevels") {
            for (lp, s) in self.strings(levels, &member(path, "promotionLevels")) {
                if is_name(&s) {
                    e.promotion_levels.push(s);
                } else {
                    let at = self.pos.value(&lp);
                    self.error(
                        at,
                        rules::EVIDENCE,
                        format!("`{lp}`: `{s}` is not a promotion level name"),
                        "name a level in lowercase letters, digits and hyphens, e.g. `sandboxed`",
                    );
                }
            }
        }
        e
    }
}

/// Why a relative path was refused, in words that fit a bundle and a run directory alike.
fn shape(kind: &PackFileErrorKind) -> String {
    match kind {
        PackFileErrorKind::Absolute => "it is absolute".into(),
        PackFileErrorKind::BadSegment(seg) if seg.is_empty() => "it has an empty segment".into(),
        PackFileErrorKind::BadSegment(seg) => format!("it has a `{seg}` segment"),
        other => other.to_string(),
    }
}

/// Names every rule id, for the corpus test to check each has a case.
pub const ALL_RULES: &[&str] = &[
    rules::FILE,
    rules::BUNDLE,
    rules::DUPLICATE_KEY,
    rules::UNKNOWN_FIELD,
    rules::REQUIRED,
    rules::TYPE,
    rules::SCHEMA_VERSION,
    rules::NAME,
    rules::TEXT,
    rules::INVOCATION,
    rules::CAPABILITY,
    rules::EFFECT,
    rules::DUPLICATE,
    rules::PROCEDURE,
    rules::SKILL_DEPENDENCY,
    rules::APPLICABILITY,
    rules::PATH,
    rules::PREDICATE,
    rules::CHECKPOINT,
    rules::EVIDENCE,
];

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{mkfifoat, Mode, CWD};

    fn bundle() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(CONTRACT_FILE),
            r#"{"schemaVersion": 1, "name": "a", "version": "1", "description": "d",
               "invocation": "explicit", "requiredCapabilities": [],
               "allowedEffectClasses": ["filesystem.read"]}"#,
        )
        .unwrap();
        std::fs::write(d.path().join("RUNBOOK.md"), "# Steps\n").unwrap();
        d
    }

    fn rules_of(dir: &Path) -> Vec<String> {
        check(dir)
            .unwrap_err()
            .errors
            .0
            .into_iter()
            .map(|d| d.rule)
            .collect()
    }

    // A link anywhere in the bundle cannot be sealed, so validate refuses it already.
    #[test]
    fn a_link_in_the_bundle_is_refused() {
        let d = bundle();
        assert!(check(d.path()).is_ok());
        std::fs::create_dir(d.path().join("notes")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("notes/passwd")).unwrap();
        assert_eq!(rules_of(d.path()), [rules::BUNDLE]);
    }

    #[test]
    fn a_fifo_in_the_bundle_is_refused() {
        let d = bundle();
        mkfifoat(CWD, d.path().join("pipe"), Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(rules_of(d.path()), [rules::BUNDLE]);
    }

    // The contract itself and the procedure are read without following links.
    #[test]
    fn a_linked_procedure_is_refused() {
        let d = bundle();
        std::fs::remove_file(d.path().join("RUNBOOK.md")).unwrap();
        std::fs::write(d.path().join("real.md"), "# Steps\n").unwrap();
        std::os::unix::fs::symlink("real.md", d.path().join("RUNBOOK.md")).unwrap();
        let rules = rules_of(d.path());
        assert!(rules.contains(&rules::PROCEDURE.to_string()), "{rules:?}");
    }

    #[test]
    fn names() {
        for good in ["a", "triage-bug", "fix-2-bugs", "x1"] {
            assert!(is_name(good), "{good}");
        }
        for bad in ["", "A", "a_b", "-a", "a-", "a--b", "a.b", &"a".repeat(65)] {
            assert!(!is_name(bad), "{bad}");
        }
    }
}
