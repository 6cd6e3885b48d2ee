//! The command/evaluate I/O contract (RFC-0001 notes §4) and the output rules of
//! RFC-0002:C-SETTLED-JOIN and C-PLAYBOOK-LANE: reading the result line, the notes, evaluate's
//! grading, the reserved output fields and the typed `emits` check.

use crucible_plan::{Direction, FieldType, Status, Task};
use serde_json::Value;

/// The settled shape of one attempt, before the engine's own bookkeeping.
#[derive(Clone, Debug, PartialEq)]
pub struct Graded {
    pub status: Status,
    pub note: Option<String>,
    pub output: Option<Value>,
}

impl Graded {
    pub fn fail(note: impl Into<String>, output: Option<Value>) -> Graded {
        Graded {
            status: Status::Fail,
            note: Some(note.into()),
            output,
        }
    }
}

/// The stderr tail a failure note carries: the last 40 lines, 240 characters each, 4000 in all,
/// joined with ` ⏎ ` and with `|` escaped.
pub fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(40);
    let mut parts: Vec<String> = lines[start..]
        .iter()
        .map(|l| l.chars().take(240).collect::<String>().replace('|', "\\|"))
        .collect();
    let mut joined = parts.join(" ⏎ ");
    while joined.chars().count() > 4000 && parts.len() > 1 {
        parts.remove(0);
        joined = parts.join(" ⏎ ");
    }
    if joined.chars().count() > 4000 {
        joined = joined.chars().skip(joined.chars().count() - 4000).collect();
    }
    joined
}

/// The last non-empty stdout line.
pub fn last_line(stdout: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// The last stdout line as a JSON object, if it is one within the bounds.
fn last_object(stdout: &[u8]) -> Option<Value> {
    read_result(stdout).ok()
}

/// The task's output: the last stdout line as a JSON object, read under the bounds every
/// logged row keeps (`wire::MAX_RESULT_BYTES`, `wire::MAX_OUTPUT_DEPTH`), so that the row the
/// engine writes can always be read back. Errs with the failure note.
fn read_result(stdout: &[u8]) -> Result<Value, String> {
    use crucible_plan::wire::{json_depth, MAX_OUTPUT_DEPTH, MAX_RESULT_BYTES};
    let Some(line) = last_line(stdout) else {
        return Err("no output: expected a JSON result on the last stdout line".into());
    };
    // The engine keeps only a stream's tail, so a longer line may already be cut: it is
    // reported as over the bound, never as malformed.
    if line.len() > MAX_RESULT_BYTES {
        return Err(format!(
            "the last stdout line is over the bound of {MAX_RESULT_BYTES} bytes for a result"
        ));
    }
    let value = match serde_json::from_str::<Value>(&line) {
        Ok(v) => v,
        Err(e) if e.to_string().contains("recursion limit") => {
            return Err(format!(
                "the output nests deeper than the bound of {MAX_OUTPUT_DEPTH} levels"
            ))
        }
        Err(_) => return Err(format!("last stdout line is not JSON: {}", shown(&line))),
    };
    if !value.is_object() {
        return Err(format!(
            "last stdout line is not a JSON object: {}",
            shown(&line)
        ));
    }
    let depth = json_depth(&value);
    if depth > MAX_OUTPUT_DEPTH {
        return Err(format!(
            "the output nests {depth} deep, over the bound of {MAX_OUTPUT_DEPTH} levels"
        ));
    }
    Ok(value)
}

/// The most of an offending line a note quotes.
const SHOWN_MAX: usize = 200;

/// An offending output line as a note quotes it: quoted, control characters escaped, cut to
/// [`SHOWN_MAX`] characters (the whole line is in the attempt's log).
fn shown(line: &str) -> String {
    let cut: String = line.chars().take(SHOWN_MAX).collect();
    let more = if cut.len() < line.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

fn own_note(output: Option<&Value>) -> Option<String> {
    output
        .and_then(|o| o.get("note"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

/// Grades a command or evaluate attempt that ran to its own exit.
pub fn grade_exit(task: &Task, code: Option<i32>, stdout: &[u8], stderr: &[u8]) -> Graded {
    let exited_ok = code == Some(0);
    if !exited_ok {
        // A nonzero exit keeps the last line's object; its own note replaces the stderr tail.
        let output = last_object(stdout);
        let status = match code {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".to_string(),
        };
        let detail = own_note(output.as_ref()).unwrap_or_else(|| stderr_tail(stderr));
        let note = if detail.is_empty() {
            status
        } else {
            format!("{status}: {detail}")
        };
        let output = output.map(|o| normalize_eval(task, o, false));
        return apply_status_field(Graded::fail(note, output.clone()), output.as_ref());
    }
    let value = match read_result(stdout) {
        Ok(v) => v,
        Err(note) => return Graded::fail(note, None),
    };
    let graded = if task.kind == crucible_plan::TaskKind::Evaluate {
        grade_evaluate(task, value)
    } else {
        Graded {
            status: Status::Pass,
            note: None,
            output: Some(value),
        }
    };
    let output = graded.output.clone();
    apply_status_field(graded, output.as_ref())
}

/// Evaluate's grade: `pass` must be a boolean when present; a threshold needs a numeric
/// `score` on the right side of it; `pass` can narrow the threshold's result, never widen it.
fn grade_evaluate(task: &Task, value: Value) -> Graded {
    let pass_field = value.get("pass");
    if pass_field.is_some_and(|p| !p.is_boolean()) {
        return Graded::fail("`pass` must be a boolean", Some(value));
    }
    let mut passed = pass_field.and_then(Value::as_bool).unwrap_or(true);
    if let Some(t) = task.threshold {
        let score = value.get("score").and_then(Value::as_f64);
        let within = match (score, task.direction.unwrap_or(Direction::Higher)) {
            (None, _) => false,
            (Some(s), Direction::Lower) => s <= t,
            (Some(s), Direction::Higher) => s >= t,
        };
        passed &= within;
    }
    let output = normalize_eval(task, value, passed);
    if passed {
        return Graded {
            status: Status::Pass,
            note: None,
            output: Some(output),
        };
    }
    let mut note =
        own_note(Some(&output)).unwrap_or_else(|| format!("evaluation {} did not pass", task.name));
    if let Some(t) = task.threshold {
        note.push_str(&format!(" threshold {t}"));
    }
    let logs: Vec<&str> = output
        .get("logs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !logs.is_empty() {
        note.push_str(&format!(" logs: {}", logs.join(",")));
    }
    Graded::fail(note, Some(output))
}

/// Writes the normalized `pass` back into an evaluate task's object.
fn normalize_eval(task: &Task, mut value: Value, passed: bool) -> Value {
    if task.kind == crucible_plan::TaskKind::Evaluate {
        if let Some(map) = value.as_object_mut() {
            let own = map.get("pass").and_then(Value::as_bool).unwrap_or(true);
            map.insert("pass".into(), Value::Bool(passed && own));
        }
    }
    value
}

/// The reserved `status` field narrows a settlement: "fail" and "skipped" settle the task that
/// way whatever else happened; "pass" never widens; anything else is ignored.
pub fn apply_status_field(graded: Graded, output: Option<&Value>) -> Graded {
    let Some(declared) = output.and_then(|o| o.get("status")).and_then(Value::as_str) else {
        return graded;
    };
    let status = match declared {
        "fail" => Status::Fail,
        "skipped" => Status::Skipped,
        _ => return graded,
    };
    let note = own_note(output)
        .or(graded.note.clone())
        .or_else(|| Some(format!("the task reported status {declared}")));
    Graded {
        status,
        note,
        output: graded.output,
    }
}

/// Checks a passing output against the task's typed `emits`; the first miss is the note.
pub fn check_emits(task: &Task, output: &Value) -> Result<(), String> {
    for (field, ty) in &task.emits {
        let Some(v) = output.get(field) else {
            return Err(format!("declared output field `{field}` is missing"));
        };
        let ok = match ty {
            FieldType::Any => true,
            FieldType::String => v.is_string(),
            FieldType::Integer => v.is_i64() || v.is_u64(),
            FieldType::Number => v.is_number(),
            FieldType::Boolean => v.is_boolean(),
            FieldType::List => v.is_array(),
            FieldType::Object => v.is_object(),
            FieldType::Link => v.as_str().is_some_and(is_http_url),
            FieldType::Links => v
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x.as_str().is_some_and(is_http_url))),
            FieldType::Labels(labels) => v.as_str().is_some_and(|s| labels.iter().any(|l| l == s)),
            FieldType::Schema(schema) => jsonschema::validator_for(schema)
                .map(|val| val.is_valid(v))
                .unwrap_or(false),
        };
        if !ok {
            return Err(format!(
                "declared output field `{field}` is not {}",
                describe(ty)
            ));
        }
    }
    Ok(())
}

fn describe(ty: &FieldType) -> String {
    match ty {
        FieldType::Any => "present".into(),
        FieldType::String => "a string".into(),
        FieldType::Integer => "an integer".into(),
        FieldType::Number => "a number".into(),
        FieldType::Boolean => "a boolean".into(),
        FieldType::List => "a list".into(),
        FieldType::Object => "an object".into(),
        FieldType::Link => "an http(s) URL".into(),
        FieldType::Links => "a list of http(s) URLs".into(),
        FieldType::Labels(l) => format!("one of {}", l.join(", ")),
        FieldType::Schema(_) => "a value its schema admits".into(),
    }
}

/// An absolute http(s) URL with a host.
pub fn is_http_url(s: &str) -> bool {
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    match rest {
        Some(r) => {
            let host = r.split(['/', '?', '#']).next().unwrap_or("");
            let host = host.rsplit('@').next().unwrap_or("");
            !host.is_empty() && !host.starts_with(':') && !s.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::TaskKind;
    use serde_json::json;

    fn cmd() -> Task {
        Task::new("t", TaskKind::Command)
    }

    fn eval(threshold: Option<f64>, dir: Option<Direction>) -> Task {
        let mut t = Task::new("e", TaskKind::Evaluate);
        t.threshold = threshold;
        t.direction = dir;
        t
    }

    // RFC-0002:C-SETTLED-JOIN: a nonzero exit keeps the object and its own note.
    #[test]
    fn nonzero_exit_notes() {
        let g = grade_exit(&cmd(), Some(2), b"", b"one\ntwo|three\n");
        assert_eq!(g.status, Status::Fail);
        assert_eq!(g.note.as_deref(), Some("exit 2: one ⏎ two\\|three"));
        assert_eq!(g.output, None);
        let g = grade_exit(
            &cmd(),
            Some(1),
            b"{\"note\":\"disk full\",\"n\":1}\n",
            b"noise",
        );
        assert_eq!(g.note.as_deref(), Some("exit 1: disk full"));
        assert_eq!(g.output, Some(json!({"note":"disk full","n":1})));
        // "pass" can never rescue a nonzero exit.
        let g = grade_exit(&cmd(), Some(1), b"{\"status\":\"pass\"}", b"");
        assert_eq!(g.status, Status::Fail);
    }

    #[test]
    fn output_line_rules() {
        assert_eq!(
            grade_exit(&cmd(), Some(0), b"", b"").note.as_deref(),
            Some("no output: expected a JSON result on the last stdout line")
        );
        assert_eq!(
            grade_exit(&cmd(), Some(0), b"{}\nhello\n\n", b"")
                .note
                .as_deref(),
            Some("last stdout line is not JSON: \"hello\"")
        );
        // The offending line is quoted escaped and cut; its whole text is in the log.
        let long = format!("\x1b[2J{}\n", "y".repeat(300));
        let note = grade_exit(&cmd(), Some(0), long.as_bytes(), b"")
            .note
            .unwrap();
        assert!(
            note.starts_with("last stdout line is not JSON: \"\\u{1b}[2Jyyy"),
            "{note}"
        );
        assert!(
            note.ends_with("yyy\"…") && note.chars().count() < 260,
            "{note}"
        );
        assert_eq!(
            grade_exit(&cmd(), Some(0), b"[1]\n", b"").note.as_deref(),
            Some("last stdout line is not a JSON object: \"[1]\"")
        );
        let g = grade_exit(&cmd(), Some(0), b"log\n{\"a\":1}\n  \n", b"");
        assert_eq!(g.status, Status::Pass);
        assert_eq!(g.output, Some(json!({"a":1})));
    }

    // RFC-0002:C-SETTLED-JOIN: status "fail"/"skipped" narrow; the note comes from the task.
    #[test]
    fn status_field_narrows() {
        let g = grade_exit(
            &cmd(),
            Some(0),
            b"{\"status\":\"fail\",\"note\":\"nope\"}",
            b"",
        );
        assert_eq!((g.status, g.note.as_deref()), (Status::Fail, Some("nope")));
        let g = grade_exit(&cmd(), Some(0), b"{\"status\":\"skipped\"}", b"");
        assert_eq!(g.status, Status::Skipped);
        let g = grade_exit(&cmd(), Some(0), b"{\"status\":\"weird\"}", b"");
        assert_eq!(g.status, Status::Pass);
    }

    #[test]
    fn evaluate_grading() {
        let t = eval(Some(0.5), Some(Direction::Higher));
        let g = grade_exit(&t, Some(0), b"{\"score\":0.7}", b"");
        assert_eq!(g.status, Status::Pass);
        assert_eq!(g.output, Some(json!({"score":0.7,"pass":true})));
        let g = grade_exit(&t, Some(0), b"{\"score\":0.7,\"pass\":false}", b"");
        assert_eq!(
            g.note.as_deref(),
            Some("evaluation e did not pass threshold 0.5")
        );
        let g = grade_exit(
            &t,
            Some(0),
            b"{\"score\":0.2,\"pass\":true,\"logs\":[\"h1\",\"h2\"]}",
            b"",
        );
        assert_eq!(g.status, Status::Fail);
        assert_eq!(
            g.note.as_deref(),
            Some("evaluation e did not pass threshold 0.5 logs: h1,h2")
        );
        assert_eq!(g.output.unwrap()["pass"], json!(false));
        let t = eval(Some(3.0), Some(Direction::Lower));
        let g = grade_exit(&t, Some(0), b"{\"score\":4,\"note\":\"too slow\"}", b"");
        assert_eq!(g.note.as_deref(), Some("too slow threshold 3"));
        let g = grade_exit(&t, Some(0), b"{}", b"");
        assert_eq!(g.status, Status::Fail);
        let g = grade_exit(&eval(None, None), Some(0), b"{\"pass\":\"yes\"}", b"");
        assert_eq!(g.note.as_deref(), Some("`pass` must be a boolean"));
    }

    // RFC-0002:C-PLAYBOOK-LANE (typed emits): link/links must be http(s) URLs.
    #[test]
    fn emits_types() {
        let mut t = cmd();
        t.emits.insert("pr".into(), FieldType::Link);
        t.emits.insert("n".into(), FieldType::Integer);
        assert!(check_emits(&t, &json!({"pr":"https://x.io/1","n":3})).is_ok());
        assert_eq!(
            check_emits(&t, &json!({"pr":"ftp://x","n":3})).unwrap_err(),
            "declared output field `pr` is not an http(s) URL"
        );
        assert!(check_emits(&t, &json!({"pr":"https://x.io"})).is_err());
        t.emits.clear();
        t.emits.insert("ls".into(), FieldType::Links);
        assert!(check_emits(&t, &json!({"ls":["http://a.b/c"]})).is_ok());
        assert!(check_emits(&t, &json!({"ls":["http://a.b/c", "nope"]})).is_err());
        assert!(!is_http_url("https://"));
    }

    #[test]
    fn tail_is_bounded() {
        let many: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = stderr_tail(many.as_bytes());
        assert!(t.starts_with("line 60 ⏎"));
        let long = "x".repeat(1000);
        let t = stderr_tail(format!("{long}\n").repeat(40).as_bytes());
        assert!(t.chars().count() <= 4000);
    }
}
