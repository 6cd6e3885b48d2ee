//! Agent harnesses ([`harness`]: the seam, and the command stand-in backend, `[agent] backend =
//! "command"` or `--agent-cmd`, which runs a shell command as the turn), the process an attempt
//! starts ([`spawn`]), and the model bindings of `CRUCIBLE_INFERENCE` ([`inference`]) with the
//! decision model's System One call ([`decision`]). The engine owns the process (its group,
//! deadline and kill); this crate owns what goes in (the prompt, argv and environment) and what
//! comes out (the `PLAN_TASK_RESULT.json` object, the conversation and its spend).

pub mod decision;
pub mod harness;
pub mod http;
pub mod inference;
pub mod prices;
pub mod spawn;

use crucible_plan::{markers, wire};
use serde_json::Value;
use std::path::Path;

/// The file an agent turn writes its one JSON object to, at the workspace root.
pub const RESULT_FILE: &str = "PLAN_TASK_RESULT.json";

/// The instruction every prompt ends with (RFC-0001 notes §4).
pub const RESULT_INSTRUCTION: &str = "When you are done, write exactly one JSON object to the file PLAN_TASK_RESULT.json at the root of the workspace. It is your result: put every field this task promises in it. Write nothing else to that file.";

/// What a prompt is built from.
pub struct PromptParts<'a> {
    /// The run's goal (`[agent].goal` or the text of `goal_file`): pack text.
    pub goal: Option<&'a str>,
    pub task: &'a str,
    /// The task's rendered prompt (for a skill, its SKILL.md plus its arguments), already
    /// carrying marked regions for any outside values.
    pub prompt: &'a str,
    /// The inputs the task receives from its dependencies (and reserved inputs), as JSON.
    pub inputs: &'a Value,
    /// A skill's directory, where its files are for the turn to read.
    pub skill_dir: Option<&'a std::path::Path>,
    /// The run's steering (per-run input from whoever launched it, not pack content): each file
    /// by name with its text. It reaches the prompt only inside external-input regions.
    pub steering: &'a [(String, String)],
}

/// Assembles the turn's prompt: goal, task prompt, the dependencies' outputs, the result
/// instruction. Dependency outputs were written by other tasks (often models), so they reach the
/// prompt only inside an external-input region; an output that carries the marker text itself is
/// refused rather than rewritten (RFC-0002:C-PLAYBOOK-PARAMS).
pub fn assemble_prompt(parts: &PromptParts<'_>) -> Result<String, AgentError> {
    let mut out = String::new();
    if let Some(goal) = parts.goal.filter(|g| !g.trim().is_empty()) {
        out.push_str("# Goal\n\n");
        out.push_str(goal.trim_end());
        out.push_str("\n\n");
    }
    out.push_str(&format!("# Task: {}\n\n", parts.task));
    out.push_str(parts.prompt.trim_end());
    out.push_str("\n\n");
    if let Some(dir) = parts.skill_dir {
        out.push_str(&format!(
            "# Skill files\n\nThis skill's files are in {} (read-only; also $CRUCIBLE_SKILL_DIR).\n\n",
            dir.display()
        ));
    }
    if !parts.steering.is_empty() {
        out.push_str(
            "# Steering from whoever launched this run

",
        );
        for (name, text) in parts.steering {
            // The launcher refused marker text already; refused here too, never rewritten.
            if markers::carries_marker(text) || markers::carries_marker(name) {
                return Err(AgentError {
                    task: parts.task.to_string(),
                    kind: AgentErrorKind::MarkerInSteering,
                });
            }
            out.push_str(&markers::wrap(&format!("steering {name}"), text));
            out.push_str("\n\n");
        }
    }
    let has_inputs = parts.inputs.as_object().is_some_and(|m| !m.is_empty());
    if has_inputs {
        let text = serde_json::to_string_pretty(parts.inputs).expect("JSON always serializes");
        if markers::carries_marker(&text) {
            return Err(AgentError {
                task: parts.task.to_string(),
                kind: AgentErrorKind::MarkerInInputs,
            });
        }
        out.push_str("# Results of the tasks this one depends on\n\n");
        out.push_str(&markers::wrap("dependency results", &text));
        out.push_str("\n\n");
    }
    out.push_str("# Result\n\n");
    out.push_str(RESULT_INSTRUCTION);
    out.push('\n');
    Ok(out)
}

/// The prompt of repair turn `round` of `of`: the masked notes on what the last turn's result
/// missed or broke, and the request to fix that in place. The turn resumes the same
/// conversation, so the task's prompt is not repeated.
pub fn repair_prompt(task: &str, notes: &[String], round: u32, of: u32) -> String {
    let mut out = format!("# Repair {round} of {of}: task {task}\n\n");
    out.push_str(
        "Your last turn finished, but its result does not meet what this task declares:\n\n",
    );
    for note in notes {
        out.push_str(&format!("- {note}\n"));
    }
    out.push_str(
        "\nFix exactly this, in place: keep the rest of your work, and write the whole result \
         again.\n\n# Result\n\n",
    );
    out.push_str(RESULT_INSTRUCTION);
    out.push('\n');
    out
}

/// The resolved settings of one turn; `None` leaves the setting to the harness.
#[derive(Clone, Debug, Default)]
pub struct TurnSettings {
    pub harness: Option<String>,
    pub model: Option<String>,
    pub effort: Option<String>,
    /// The only tools the turn may use, by the harness's own names (a runbook's `tool:<name>`
    /// classes, issue 15); `None` leaves the harness its own tools.
    pub tools: Option<Vec<String>>,
}

/// A turn's result object and the spend it reported.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnResult {
    pub output: Value,
    /// The optional numeric `cost_usd` field of the result object; 0 when absent.
    pub cost_usd: f64,
}

/// Reads and removes `PLAN_TASK_RESULT.json` from `workdir`. A missing or malformed file is a
/// measured failure of the turn, reported as an error whose text is the task's note.
pub fn take_result(task: &str, workdir: &Path) -> Result<TurnResult, AgentError> {
    let path = workdir.join(RESULT_FILE);
    let err = |kind| AgentError {
        task: task.to_string(),
        kind,
    };
    let text = match read_bounded(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(err(AgentErrorKind::NoResult))
        }
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            let _ = std::fs::remove_file(&path);
            return Err(err(AgentErrorKind::OverBound));
        }
        Err(e) => return Err(err(AgentErrorKind::Unreadable(e.to_string()))),
    };
    // The file is the turn's answer, not part of the work: it must not reach a commit.
    let _ = std::fs::remove_file(&path);
    let output: Value = serde_json::from_str(text.trim()).map_err(|e| {
        err(if e.to_string().contains("recursion limit") {
            AgentErrorKind::TooDeep
        } else {
            AgentErrorKind::NotJson(e.to_string())
        })
    })?;
    if !output.is_object() {
        return Err(err(AgentErrorKind::NotObject));
    }
    if wire::json_depth(&output) > wire::MAX_OUTPUT_DEPTH {
        return Err(err(AgentErrorKind::TooDeep));
    }
    let cost_usd = output
        .get("cost_usd")
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite() && *c >= 0.0)
        .unwrap_or(0.0);
    Ok(TurnResult { output, cost_usd })
}

/// The result file's text, refused (`FileTooLarge`) past `wire::MAX_RESULT_BYTES` from its size
/// or from what was read, so a huge or sparse file is never read whole (issue 11 item 6).
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let over = || std::io::Error::from(std::io::ErrorKind::FileTooLarge);
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() > wire::MAX_RESULT_BYTES as u64 {
        return Err(over());
    }
    let mut text = String::new();
    file.take(wire::MAX_RESULT_BYTES as u64 + 1)
        .read_to_string(&mut text)?;
    if text.len() > wire::MAX_RESULT_BYTES {
        return Err(over());
    }
    Ok(text)
}

/// Removes a result file a previous turn left behind, so a stale answer is never read.
pub fn clear_result(workdir: &Path) {
    let _ = std::fs::remove_file(workdir.join(RESULT_FILE));
}

#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct AgentError {
    pub task: String,
    pub kind: AgentErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentErrorKind {
    #[error("no result: the turn wrote no {RESULT_FILE}")]
    NoResult,
    #[error("{RESULT_FILE} could not be read: {0}")]
    Unreadable(String),
    #[error("{RESULT_FILE} is not JSON: {0}")]
    NotJson(String),
    #[error("{RESULT_FILE} is not a JSON object")]
    NotObject,
    #[error(
        "{RESULT_FILE} is over the bound of {} bytes for a result",
        wire::MAX_RESULT_BYTES
    )]
    OverBound,
    #[error(
        "{RESULT_FILE} nests deeper than the bound of {} levels",
        wire::MAX_OUTPUT_DEPTH
    )]
    TooDeep,
    #[error("a dependency's output carries the external-input marker text, so it cannot be placed in a marked region of the prompt")]
    MarkerInInputs,
    #[error("the run's steering carries the external-input marker text, so it cannot be placed in a marked region of the prompt")]
    MarkerInSteering,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_carries_goal_task_marked_inputs_and_instruction() {
        let inputs = json!({"scan": {"files": 3}});
        let p = assemble_prompt(&PromptParts {
            goal: Some("Keep the repo tidy."),
            task: "review",
            prompt: "Review the scan.",
            inputs: &inputs,
            skill_dir: None,
            steering: &[("focus.md".into(), "Only the docs.".into())],
        })
        .unwrap();
        assert!(p.starts_with("# Goal\n\nKeep the repo tidy."));
        assert!(p.contains("# Task: review\n\nReview the scan."));
        // Steering, then the inputs, each inside its own marked region.
        let steer = p.find("Only the docs.").unwrap();
        let open = p.find(markers::OPEN).unwrap();
        let close = p.find(markers::CLOSE).unwrap();
        assert!(open < steer && steer < close, "{p}");
        assert!(p[open..close].contains("[steering focus.md]"), "{p}");
        let data = p.find("\"files\": 3").unwrap();
        let open = p.rfind(markers::OPEN).unwrap();
        let close = p.rfind(markers::CLOSE).unwrap();
        assert!(open < data && data < close && close > steer);
        assert!(p.trim_end().ends_with(RESULT_INSTRUCTION));
    }

    #[test]
    fn marker_text_in_inputs_is_refused_not_rewritten() {
        let inputs = json!({"a": {"x": markers::CLOSE}});
        let e = assemble_prompt(&PromptParts {
            goal: None,
            task: "t",
            prompt: "p",
            inputs: &inputs,
            skill_dir: None,
            steering: &[],
        })
        .unwrap_err();
        assert!(matches!(e.kind, AgentErrorKind::MarkerInInputs));
        let e = assemble_prompt(&PromptParts {
            goal: None,
            task: "t",
            prompt: "p",
            inputs: &json!({}),
            skill_dir: None,
            steering: &[("s".into(), format!("x {} y", markers::OPEN))],
        })
        .unwrap_err();
        assert!(matches!(e.kind, AgentErrorKind::MarkerInSteering));
    }

    #[test]
    fn result_file_is_read_removed_and_costed() {
        let d = std::env::temp_dir().join(format!("crucible-agent-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        assert!(matches!(
            take_result("t", &d).unwrap_err().kind,
            AgentErrorKind::NoResult
        ));
        std::fs::write(d.join(RESULT_FILE), r#"{"ok": true, "cost_usd": 0.25}"#).unwrap();
        let r = take_result("t", &d).unwrap();
        assert_eq!(r.cost_usd, 0.25);
        assert!(!d.join(RESULT_FILE).exists());
        std::fs::write(d.join(RESULT_FILE), "[1]").unwrap();
        assert!(matches!(
            take_result("t", &d).unwrap_err().kind,
            AgentErrorKind::NotObject
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    // Issue 11 item 6: a result the log could not hold is refused at capture, naming the bound,
    // and a huge (here sparse) file is refused from its size without being read.
    #[test]
    fn oversized_or_too_deep_result_files_are_refused_naming_the_bound() {
        let d = std::env::temp_dir().join(format!("crucible-agent-bound-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = std::fs::File::create(d.join(RESULT_FILE)).unwrap();
        f.set_len(2 << 30).unwrap();
        let e = take_result("t", &d).unwrap_err();
        assert!(matches!(e.kind, AgentErrorKind::OverBound), "{e}");
        assert!(e.to_string().contains("524288 bytes"), "{e}");
        assert!(!d.join(RESULT_FILE).exists());
        let deep = format!("{}1{}", "{\"a\":".repeat(126), "}".repeat(126));
        std::fs::write(d.join(RESULT_FILE), deep).unwrap();
        let e = take_result("t", &d).unwrap_err();
        assert!(matches!(e.kind, AgentErrorKind::TooDeep), "{e}");
        let deeper = format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200));
        std::fs::write(d.join(RESULT_FILE), deeper).unwrap();
        assert!(matches!(
            take_result("t", &d).unwrap_err().kind,
            AgentErrorKind::TooDeep
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
