//! The environment a task's process starts from: built here and nowhere else, since `proc`
//! clears the engine's own (ARCHITECTURE.md: "an environment built from an allowlist"; issue 11).
//!
//! A task receives a fixed base taken from the launch environment ([`BASE`]), the names the
//! manifest's `[env]` declares, and the engine's `CRUCIBLE_*` task contract over them; an agent
//! task also gets `[agent].env` and its harness's contract. Nothing else the engine was launched
//! with (model API keys, cloud credentials, tokens, the engine's own `CRUCIBLE_*` settings)
//! reaches a task. The values of declared secrets (`[env].secrets`, `[agent].env`) are masked by
//! [`Masker`] wherever a task's text is stored or printed.

use crucible_pack::manifest::{AgentConfig, EnvConfig};
use serde_json::Value;

/// The launch environment variables every task receives when they are set: enough to find
/// programs, a home, and the locale and terminal type.
pub const BASE: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ"];

/// The contract every command, evaluate and agent task receives from the engine.
pub const CONTRACT: &[&str] = &[
    "CRUCIBLE_TASK",
    "CRUCIBLE_INPUTS_FILE",
    "CRUCIBLE_INPUTS",
    "CRUCIBLE_STEERING_DIR",
];

/// The base and declared variables of one launch, read once when the run starts.
#[derive(Clone, Debug, Default)]
pub struct TaskEnv {
    vars: Vec<(String, String)>,
    /// The names `[env].secrets` declares: a task in a named sandbox gets only those it lists.
    secrets: Vec<String>,
}

impl TaskEnv {
    /// The base and the manifest's `[env]` names, with their values at launch; a name unset at
    /// launch is not given.
    pub fn from_launch(declared: &EnvConfig) -> TaskEnv {
        let names = BASE
            .iter()
            .copied()
            .chain(declared.names().map(String::as_str));
        let mut vars: Vec<(String, String)> = Vec::new();
        for name in names {
            if vars.iter().any(|(k, _)| k == name) {
                continue;
            }
            if let Some(value) = std::env::var_os(name).and_then(|v| v.into_string().ok()) {
                vars.push((name.to_string(), value));
            }
        }
        TaskEnv {
            vars,
            secrets: declared.secrets.clone(),
        }
    }

    /// The environment of a task process: the launch's allowed variables, then `contract`. With
    /// `only_secrets` (a task in a named sandbox), a declared secret it does not list is withheld.
    pub fn for_task(
        &self,
        contract: &[(String, String)],
        only_secrets: Option<&[String]>,
    ) -> Vec<(String, String)> {
        let withheld = |k: &String| {
            only_secrets.is_some_and(|only| self.secrets.contains(k) && !only.contains(k))
        };
        let mut env: Vec<(String, String)> = (self.vars.iter())
            .filter(|(k, _)| !contract.iter().any(|(c, _)| c == k) && !withheld(k))
            .cloned()
            .collect();
        env.extend(contract.iter().cloned());
        env
    }
}

/// Secret values shorter than this are not masked: masking a one- or two-character value would
/// garble every note without hiding anything worth the name.
pub const MASK_MIN_LEN: usize = 4;

/// What a masked value is replaced with.
pub const MASK: &str = "***";

/// Replaces the values of a run's declared secrets with [`MASK`] in task-derived text.
#[derive(Clone, Debug, Default)]
pub struct Masker {
    /// Longest first, so a secret containing another is masked whole.
    values: Vec<String>,
}

impl Masker {
    /// The secrets of a launch: the values of `[env].secrets` at launch and of `[agent].env`.
    pub fn from_launch(env: &EnvConfig, agent: &AgentConfig) -> Masker {
        let launch = env.secrets.iter().filter_map(|n| std::env::var(n).ok());
        let mut values: Vec<String> = launch
            .chain(agent.env.values().cloned())
            .filter(|v| v.len() >= MASK_MIN_LEN)
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Masker { values }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every secret value replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), MASK);
            }
        }
        out
    }

    /// Masks an optional text in place.
    pub fn opt(&self, text: &mut Option<String>) {
        if let Some(t) = text {
            *t = self.text(t);
        }
    }

    /// Masks every string in a JSON value in place, object keys included.
    pub fn json(&self, value: &mut Value) {
        match value {
            Value::String(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.json(v)),
            Value::Object(map) => {
                let masked: serde_json::Map<String, Value> = std::mem::take(map)
                    .into_iter()
                    .map(|(k, mut v)| {
                        self.json(&mut v);
                        (self.text(&k), v)
                    })
                    .collect();
                *map = masked;
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_comes_last_and_once() {
        let base = TaskEnv {
            vars: vec![
                ("PATH".into(), "/bin".into()),
                ("CRUCIBLE_TASK".into(), "ambient".into()),
                ("KEY_A".into(), "a".into()),
                ("KEY_B".into(), "b".into()),
            ],
            secrets: vec!["KEY_A".into(), "KEY_B".into()],
        };
        let contract = vec![("CRUCIBLE_TASK".to_string(), "t".to_string())];
        let env = base.for_task(&contract, None);
        assert_eq!(env.last(), contract.last());
        assert_eq!(env.iter().filter(|(k, _)| k == "CRUCIBLE_TASK").count(), 1);
        assert_eq!(env[0], ("PATH".to_string(), "/bin".to_string()));
        assert!(env.iter().any(|(k, _)| k == "KEY_B"));
        // A named sandbox listing only KEY_A: KEY_B is withheld, the rest unchanged.
        let only = base.for_task(&contract, Some(&["KEY_A".to_string()]));
        let names: Vec<&str> = only.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "KEY_A", "CRUCIBLE_TASK"]);
    }

    #[test]
    fn secrets_are_masked_longest_first_in_text_and_json() {
        let m = Masker {
            values: vec!["hunter22-long".into(), "hunter22".into()],
        };
        assert_eq!(m.text("a hunter22-long b hunter22"), "a *** b ***");
        let mut v = serde_json::json!({"k hunter22": ["x hunter22", 3, null]});
        m.json(&mut v);
        assert_eq!(v, serde_json::json!({"k ***": ["x ***", 3, null]}));
    }
}
