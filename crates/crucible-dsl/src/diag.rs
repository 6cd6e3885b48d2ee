//! Compile diagnostics: where, which rule, what is wrong, how to fix it.

use std::fmt;

/// One compile error, rendered rustc-style.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Diagnostic {
    /// The source file, relative to the pack root (or `--param` for a launch value).
    pub file: String,
    /// 1-based line and column.
    pub line: usize,
    pub col: usize,
    /// A clause id such as `RFC-0002:C-PLAYBOOK-PARAMS`, or a short rule id.
    pub rule: String,
    pub message: String,
    pub fix: String,
    /// The offending source line, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_line: Option<String>,
    /// The closest known name, for a misspelt one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub did_you_mean: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error[{}]: {}", self.rule, self.message)?;
        writeln!(f, " --> {}:{}:{}", self.file, self.line, self.col)?;
        if let Some(src) = &self.source_line {
            writeln!(f, "  | {src}")?;
            writeln!(f, "  | {}^", " ".repeat(self.col.saturating_sub(1)))?;
        }
        if let Some(s) = &self.did_you_mean {
            writeln!(f, "  = did you mean `{s}`?")?;
        }
        write!(f, "  = help: {}", self.fix)
    }
}

/// Every error one compile found, in source order.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

/// The closest candidate, when near enough to be a likely misspelling.
pub fn did_you_mean<'s>(
    word: &str,
    candidates: impl IntoIterator<Item = &'s str>,
) -> Option<String> {
    crucible_plan::validate::did_you_mean(word, candidates).map(str::to_string)
}

/// Rule ids of the dialect itself (clause ids are used where a clause applies).
pub mod rules {
    pub const PARAMS: &str = "RFC-0002:C-PLAYBOOK-PARAMS";
    pub const LANE: &str = "RFC-0002:C-PLAYBOOK-LANE";
    pub const ROUTE: &str = "RFC-0001:C-ROUTE";
    pub const WORKFLOW: &str = "RFC-0001:C-WORKFLOW";
    pub const ARG: &str = "argument";
    pub const SYNTAX: &str = "syntax";
    pub const EVAL: &str = "evaluation";
    pub const LIMIT: &str = "limit";
    pub const FILE: &str = "file-access";
    pub const SCHEMA: &str = "schema_file";
    pub const LISTED: &str = "workflow-tasks";
}
