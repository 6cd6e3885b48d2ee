//! Launch settings: dotted `--param` names (`<task>.model|harness|effort`, `*.<setting>`,
//! `repo.ref`), checked against `[agent.overrides]` and resolved onto the compiled agent tasks
//! (RFC-0002:C-PLAYBOOK-PARAMS).

use crate::diag::{did_you_mean, rules, Diagnostic};
use crucible_pack::manifest::{AgentConfig, Overrides};
use crucible_plan::{Plan, TaskKind};
use std::collections::BTreeMap;

/// Harnesses a setting may name (read without regard to case, stored lowercase).
pub const HARNESSES: &[&str] = &["claude", "codex", "opencode", "pi", "hermes"];
/// Reasoning efforts a setting may name (read without regard to case, stored lowercase).
pub const EFFORTS: &[&str] = &["minimal", "low", "medium", "high", "xhigh"];
const SETTINGS: &[&str] = &["model", "harness", "effort"];

/// One supplied launch setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSetting {
    /// `*` for every agent task, else a task name.
    pub target: String,
    pub setting: String,
    pub value: String,
    /// Position among the `--param` values, for errors.
    pub index: usize,
}

/// The settings a launch supplied, after the checks that need no plan.
#[derive(Clone, Debug, Default)]
pub struct LaunchSettings {
    pub agent: Vec<LaunchSetting>,
    pub repo_ref: Option<String>,
}

fn diag(index: usize, message: String, fix: &str) -> Diagnostic {
    Diagnostic {
        file: "--param".into(),
        line: index + 1,
        col: 1,
        rule: rules::PARAMS.into(),
        message,
        fix: fix.into(),
        source_line: None,
        did_you_mean: None,
    }
}

/// Whether `m` is a model name: 1 to 200 characters of letters, digits and `. _ - : / @ [ ]`,
/// not beginning with `-`.
pub fn is_model_name(m: &str) -> bool {
    (1..=200).contains(&m.chars().count())
        && !m.starts_with('-')
        && m.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/@[]".contains(c))
}

/// A git ref name the manifest's `[repo].ref` could hold (the `git check-ref-format` rules that
/// matter for a launch value).
pub fn is_git_ref(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 255
        && !r.starts_with('-')
        && !r.starts_with('/')
        && !r.ends_with('/')
        && !r.ends_with('.')
        && !r.ends_with(".lock")
        && !r.contains("..")
        && !r.contains("@{")
        && !r.contains("//")
        && r != "@"
        && !r
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c))
}

/// Checks every launch setting that needs no plan: the address shape, the manifest's
/// permission, and the value.
pub fn parse(
    dotted: &[(usize, String, String)],
    overrides: &Overrides,
) -> Result<LaunchSettings, Vec<Diagnostic>> {
    let mut out = LaunchSettings::default();
    let mut errors = Vec::new();
    let mut seen = BTreeMap::new();
    for (index, name, value) in dotted {
        let index = *index;
        if seen.insert(name.clone(), index).is_some() {
            errors.push(diag(
                index,
                format!("launch setting `{name}` is supplied twice"),
                "supply each setting once",
            ));
            continue;
        }
        let (target, setting) = name.rsplit_once('.').expect("dotted");
        if target == "repo" && setting == "ref" {
            if !overrides.git_ref {
                errors.push(diag(
                    index,
                    format!("`{name}`: [agent.overrides] does not allow ref"),
                    "set ref = true under [agent.overrides], or drop the setting",
                ));
            } else if !is_git_ref(value) {
                errors.push(diag(
                    index,
                    format!("`{name}`: `{value}` is not a git ref"),
                    "name a branch, tag or commit",
                ));
            } else {
                out.repo_ref = Some(value.clone());
            }
            continue;
        }
        if !SETTINGS.contains(&setting) || target.is_empty() {
            let hint = did_you_mean(setting, SETTINGS.iter().copied());
            errors.push(Diagnostic {
                did_you_mean: hint,
                ..diag(index, format!("`{name}` is not a launch setting"), "write <task>.model, <task>.harness, <task>.effort, *.<setting> or repo.ref; a parameter name has no dot")
            });
            continue;
        }
        let allowed = match setting {
            "model" => overrides.model,
            "harness" => overrides.harness,
            _ => overrides.effort,
        };
        if !allowed {
            errors.push(diag(
                index,
                format!("`{name}`: [agent.overrides] does not allow {setting}"),
                &format!("set {setting} = true under [agent.overrides], or drop the setting"),
            ));
            continue;
        }
        let value = match setting {
            "model" => {
                if !is_model_name(value) {
                    errors.push(diag(index, format!("`{name}`: `{value}` is not a model name"), "a model name is 1 to 200 letters, digits and . _ - : / @ [ ], not starting with -"));
                    continue;
                }
                if !overrides.models.is_empty() && !overrides.models.contains(value) {
                    errors.push(diag(
                        index,
                        format!("`{name}`: `{value}` is not in [agent.overrides].models"),
                        &format!("use one of {}", overrides.models.join(", ")),
                    ));
                    continue;
                }
                value.clone()
            }
            kind => {
                let list = if kind == "harness" {
                    HARNESSES
                } else {
                    EFFORTS
                };
                let lower = value.to_ascii_lowercase();
                if !list.contains(&lower.as_str()) {
                    errors.push(diag(
                        index,
                        format!("`{name}`: `{value}` is not a known {kind}"),
                        &format!("use one of {}", list.join(", ")),
                    ));
                    continue;
                }
                lower
            }
        };
        out.agent.push(LaunchSetting {
            target: target.to_string(),
            setting: setting.to_string(),
            value,
            index,
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// Checks the task addresses against the plan and resolves every agent setting: launch
/// `<task>.x` > launch `*.x` > the task's own argument (or its session's default, already on the
/// task) > the manifest's `[agent]` default.
pub fn apply(
    plan: &mut Plan,
    settings: &LaunchSettings,
    agent: Option<&AgentConfig>,
) -> Result<(), Vec<Diagnostic>> {
    let mut errors = Vec::new();
    for s in settings.agent.iter().filter(|s| s.target != "*") {
        let name = format!("{}.{}", s.target, s.setting);
        match plan.task(&s.target) {
            None => {
                let hint = did_you_mean(&s.target, plan.tasks.iter().map(|t| t.name.as_str()));
                errors.push(Diagnostic {
                    did_you_mean: hint,
                    ..diag(
                        s.index,
                        format!("`{name}`: no task is named `{}`", s.target),
                        "address an agent task of the workflow",
                    )
                });
            }
            Some(t) if t.kind != TaskKind::Agent => errors.push(diag(
                s.index,
                format!(
                    "`{name}`: `{}` is a {} task and runs no agent",
                    s.target, t.kind
                ),
                "address an agent or skill task",
            )),
            Some(t) if t.session.is_some() => errors.push(diag(
                s.index,
                format!(
                    "`{name}`: `{}` shares session `{}`, which runs under one agent config",
                    s.target,
                    t.session.as_deref().unwrap_or_default()
                ),
                "use *.<setting>, or set it on the session in the source",
            )),
            Some(_) => {}
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let pick = |target: &str, setting: &str| {
        settings
            .agent
            .iter()
            .find(|s| s.target == target && s.setting == setting)
            .map(|s| s.value.clone())
    };
    for t in plan.tasks.iter_mut().filter(|t| t.kind == TaskKind::Agent) {
        let slots: [(&str, &mut Option<String>, Option<&String>); 3] = [
            ("model", &mut t.model, agent.and_then(|a| a.model.as_ref())),
            (
                "harness",
                &mut t.harness,
                agent.and_then(|a| a.harness.as_ref()),
            ),
            (
                "effort",
                &mut t.effort,
                agent.and_then(|a| a.effort.as_ref()),
            ),
        ];
        for (setting, slot, default) in slots {
            if let Some(v) = pick(&t.name, setting).or_else(|| pick("*", setting)) {
                *slot = Some(v);
            } else if slot.is_none() {
                *slot = default.cloned();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names() {
        assert!(is_model_name("claude-sonnet-4.5"));
        assert!(is_model_name("openai/gpt-5@2025[x]:1"));
        assert!(!is_model_name("-rf"));
        assert!(!is_model_name(""));
        assert!(!is_model_name("a b"));
        assert!(!is_model_name(&"a".repeat(201)));
    }

    // RFC-0002:C-PLAYBOOK-PARAMS — every refusal names the address.
    #[test]
    fn refusals_name_the_address() {
        let allow = Overrides {
            model: true,
            harness: true,
            effort: false,
            models: vec!["m1".into()],
            git_ref: false,
        };
        let dotted = vec![
            (0, "a.model".to_string(), "m2".to_string()),
            (1, "a.effort".to_string(), "high".to_string()),
            (2, "*.harness".to_string(), "nope".to_string()),
            (3, "repo.ref".to_string(), "main".to_string()),
            (4, "a.colour".to_string(), "x".to_string()),
        ];
        let errs = parse(&dotted, &allow).unwrap_err();
        let names = [
            "`a.model`",
            "`a.effort`",
            "`*.harness`",
            "`repo.ref`",
            "`a.colour`",
        ];
        assert_eq!(errs.len(), names.len());
        for (e, n) in errs.iter().zip(names) {
            assert!(e.message.contains(n), "{e}");
        }
        let ok = parse(&[(0, "*.harness".into(), "CLAUDE".into())], &allow).unwrap();
        assert_eq!(ok.agent[0].value, "claude");
    }
}
