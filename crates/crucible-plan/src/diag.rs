//! Diagnostics rendered rustc-style: where, which rule, what is wrong, how to fix it. The
//! workflow compiler and the runbook contract both report through this one renderer.

use std::fmt;

/// One finding, rendered rustc-style (as an error by `Display`, or at any level by [`Diagnostic::render`]).
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

impl Diagnostic {
    /// The finding at `level` (`error`, `warning`).
    pub fn render(&self, level: &str) -> String {
        let mut out = format!("{level}[{}]: {}\n", self.rule, self.message);
        out.push_str(&format!(" --> {}:{}:{}\n", self.file, self.line, self.col));
        if let Some(src) = &self.source_line {
            out.push_str(&format!("  | {src}\n"));
            out.push_str(&format!(
                "  | {}^\n",
                " ".repeat(self.col.saturating_sub(1))
            ));
        }
        if let Some(s) = &self.did_you_mean {
            out.push_str(&format!("  = did you mean `{s}`?\n"));
        }
        out.push_str(&format!("  = help: {}", self.fix));
        out
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render("error"))
    }
}

/// Every error one check found, in source order.
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
