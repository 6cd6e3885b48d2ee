//! Typed workflow reports (RFC-0002:C-REPORTS): an engine-owned epilogue task that renders the
//! run's verdict, cost, bounded task statuses and its selected task's declared result into a
//! Slack card the engine builds, and delivers it to the webhook the operator configured. The
//! pack names a destination kind, a template and a result task; never an endpoint, a credential
//! or a payload fragment.

use std::time::Duration;

use minijinja::{Environment, Error, ErrorKind, Output, State, UndefinedBehavior};
use serde_json::{json, Map, Value};

use crucible_plan::{Status, Task};

/// The bound on the selected result's encoded size: 16 KiB unless the operator says otherwise.
pub const RESULT_MAX_BYTES_ENV: &str = "CRUCIBLE_REPORT_RESULT_MAX_BYTES";
pub const DEFAULT_RESULT_MAX_BYTES: u64 = 16 * 1024;
/// The most the operator may allow a selected result.
pub const RESULT_MAX_BYTES_CEILING: u64 = 64 * 1024;
/// The bound on the rendered body: Slack's section text limit, which is also its ceiling.
pub const BODY_MAX_BYTES_ENV: &str = "CRUCIBLE_REPORT_BODY_MAX_BYTES";
pub const BODY_MAX_BYTES_CEILING: u64 = 3000;
/// The Slack incoming webhook the operator (the controller) holds; it is the credential.
pub const SLACK_WEBHOOK_ENV: &str = "CRUCIBLE_REPORT_SLACK_WEBHOOK";
/// The controller's link to this run, shown on the card.
pub const RUN_URL_ENV: &str = "CRUCIBLE_RUN_URL";
/// How many task statuses the card and the template carry.
pub const MAX_TEMPLATE_TASKS: usize = 20;
/// The longest one delivery may take.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the operator configured for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportConfig {
    pub result_max_bytes: u64,
    pub body_max_bytes: u64,
    pub slack_webhook: Option<String>,
    pub run_url: Option<String>,
}

impl Default for ReportConfig {
    fn default() -> ReportConfig {
        ReportConfig {
            result_max_bytes: DEFAULT_RESULT_MAX_BYTES,
            body_max_bytes: BODY_MAX_BYTES_CEILING,
            slack_webhook: None,
            run_url: None,
        }
    }
}

impl ReportConfig {
    /// Check the bounds the operator set: a result bound from 1 byte to 64 KiB, a body bound
    /// from 1 byte to Slack's 3000.
    pub fn checked(self) -> Result<ReportConfig, String> {
        if self.result_max_bytes == 0 || self.result_max_bytes > RESULT_MAX_BYTES_CEILING {
            return Err(format!(
                "{RESULT_MAX_BYTES_ENV} must be from 1 to {RESULT_MAX_BYTES_CEILING} bytes"
            ));
        }
        if self.body_max_bytes == 0 || self.body_max_bytes > BODY_MAX_BYTES_CEILING {
            return Err(format!(
                "{BODY_MAX_BYTES_ENV} must be from 1 to {BODY_MAX_BYTES_CEILING} bytes"
            ));
        }
        Ok(self)
    }
}

/// Why a report was not delivered; each is told apart on the row (`output.delivery`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undelivered {
    Rendering(String),
    Oversized(String),
    Destination(String),
}

impl Undelivered {
    fn token(&self) -> &'static str {
        match self {
            Undelivered::Rendering(_) => "rendering_failed",
            Undelivered::Oversized(_) => "oversized",
            Undelivered::Destination(_) => "destination_failed",
        }
    }

    fn note(&self) -> String {
        match self {
            Undelivered::Rendering(m) => format!("the report could not be rendered: {m}"),
            Undelivered::Oversized(m) | Undelivered::Destination(m) => m.clone(),
        }
    }
}

/// The selected task as a report sees it: its terminal status, and where it passed its declared
/// output fields and nothing else (RFC-0002:C-REPORTS).
pub fn selected(task: &Task, status: Status, output: Option<&Value>) -> Value {
    let mut m = Map::new();
    m.insert("task".into(), Value::from(task.name.clone()));
    m.insert("status".into(), Value::from(status.to_string()));
    if status.is_pass() {
        let declared: Map<String, Value> = task
            .emits
            .keys()
            .filter_map(|f| Some((f.clone(), output?.get(f)?.clone())))
            .collect();
        m.insert("output".into(), Value::Object(declared));
    }
    Value::Object(m)
}

/// Render and deliver one report; `context` is what the engine built when the report was
/// dispatched: `verdict`, `spent_usd`, `passed`, `failed`, `tasks` (at most
/// [`MAX_TEMPLATE_TASKS`]), `run`, and `result` (the [`selected`] view, or null).
pub fn deliver(task: &Task, context: &Value, config: &ReportConfig) -> Result<(), Undelivered> {
    let spec = task.report.as_ref().expect("a report task has a report");
    let payload = card(task, context, config)?;
    match spec.destination.as_str() {
        "slack" => post_slack(config, &payload),
        other => Err(Undelivered::Destination(format!(
            "the destination kind `{other}` is not one this engine delivers to"
        ))),
    }
}

/// The Slack payload (Block Kit, in an attachment for the accent): an engine-authored header,
/// the verdict and cost, the rendered body, the selected result's fields, the bounded task
/// statuses and the controller's run link. Every value is escaped for Slack's mrkdwn.
pub fn card(task: &Task, context: &Value, config: &ReportConfig) -> Result<Value, Undelivered> {
    let spec = task.report.as_ref().expect("a report task has a report");
    let mut context = context.clone();
    context["run_url"] = config.run_url.clone().map_or(Value::Null, Value::from);
    let result = &context["result"];
    let size = serde_json::to_vec(result)
        .expect("JSON always serializes")
        .len() as u64;
    if size > config.result_max_bytes {
        return Err(Undelivered::Oversized(format!(
            "the selected result is {size} bytes, over the {}-byte bound ({RESULT_MAX_BYTES_ENV}); it is never truncated",
            config.result_max_bytes
        )));
    }
    let verdict = context["verdict"].as_str().unwrap_or("unknown");
    let spent = context["spent_usd"].as_f64().unwrap_or(0.0);
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text",
            "text": format!("{}: {verdict}", task.name)}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": format!(
            "*Verdict:* {}   *Cost:* ${spent:.2}   *Tasks:* {} passed, {} failed",
            escape(verdict), context["passed"], context["failed"])}}),
    ];
    if let Some(template) = &spec.template {
        let body = render(template, &context)?;
        if body.len() as u64 > config.body_max_bytes {
            return Err(Undelivered::Oversized(format!(
                "the rendered body is {} bytes, over the {}-byte bound ({BODY_MAX_BYTES_ENV}); it is never truncated",
                body.len(),
                config.body_max_bytes
            )));
        }
        if !body.trim().is_empty() {
            blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": body}}));
        }
    }
    if let Some(Value::Object(fields)) = result.get("output") {
        // Slack takes at most ten fields per section.
        let shown: Vec<Value> = fields
            .iter()
            .map(|(k, v)| {
                json!({"type": "mrkdwn", "text": format!("*{}*\n{}", escape(k), escape(&text_of(v)))})
            })
            .collect();
        for chunk in shown.chunks(10) {
            blocks.push(json!({"type": "section", "fields": chunk}));
        }
    } else if let Some(status) = result.get("status").and_then(Value::as_str) {
        let name = result["task"].as_str().unwrap_or_default();
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!("*{}* settled {}", escape(name), escape(status))}}));
    }
    let statuses: Vec<String> = (context["tasks"].as_array().into_iter().flatten())
        .map(|t| {
            format!(
                "{}: {}",
                escape(t["name"].as_str().unwrap_or_default()),
                escape(t["status"].as_str().unwrap_or_default())
            )
        })
        .collect();
    if !statuses.is_empty() {
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": statuses.join(" · ")}]}));
    }
    if let Some(url) = &config.run_url {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!("<{}|Open the run>", escape(url))}}));
    }
    Ok(json!({
        "text": format!("{}: {verdict}", task.name),
        "attachments": [{"color": accent(spec.severity_field.as_deref(), result), "blocks": blocks}],
    }))
}

/// The card's accent (RFC-0002:C-REPORTS): a failed, transport-failed or blocked selection is
/// danger; a passing one whose severity field holds good, warning or danger takes that accent;
/// anything else is neutral.
fn accent(severity_field: Option<&str>, result: &Value) -> &'static str {
    const NEUTRAL: &str = "#dddddd";
    match result.get("status").and_then(Value::as_str) {
        Some("fail" | "transport" | "blocked") => "#a30200",
        Some("pass") => {
            let field = severity_field.and_then(|f| result["output"].get(f));
            match field.and_then(Value::as_str) {
                Some("good") => "#2eb886",
                Some("warning") => "#daa038",
                Some("danger") => "#a30200",
                _ => NEUTRAL,
            }
        }
        _ => NEUTRAL,
    }
}

/// Render the pack's template over the report context. Every inserted value is escaped, `safe`
/// included, and reading anything the context does not hold (a field the selected task did not
/// declare) is a rendering failure rather than an empty string.
fn render(template: &str, context: &Value) -> Result<String, Undelivered> {
    render_escaped(template, context, escape).map_err(Undelivered::Rendering)
}

/// Renders `template` over `context` with every inserted value (`safe` included) passed through
/// `escape`, and reading anything the context does not hold an error: the report's renderer,
/// and a human-decided route's review (RFC-0002:C-DECISION-EVIDENCE) with CommonMark escaping.
pub(crate) fn render_escaped(
    template: &str,
    context: &Value,
    escape: fn(&str) -> String,
) -> Result<String, String> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_formatter(
        move |out: &mut Output<'_>, _: &State<'_, '_>, value: &minijinja::Value| {
            let text = if value.is_none() {
                "null".to_string()
            } else {
                value.to_string()
            };
            out.write_str(&escape(&text))
                .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
        },
    );
    env.render_str(template, template_value(context))
        .map_err(|e| e.to_string())
}

/// The context as template values, numbers kept as numbers. Built by hand rather than through
/// serde: with serde_json's arbitrary precision on (a dependency enables it), a number
/// serializes as a private wrapper object.
fn template_value(v: &Value) -> minijinja::Value {
    use minijinja::Value as T;
    match v {
        Value::Null => T::from(()),
        Value::Bool(b) => T::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => T::from(i),
            (_, Some(u), _) => T::from(u),
            (_, _, f) => T::from(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => T::from(s.clone()),
        Value::Array(items) => T::from(items.iter().map(template_value).collect::<Vec<_>>()),
        Value::Object(m) => T::from_iter(m.iter().map(|(k, v)| (k.clone(), template_value(v)))),
    }
}

/// Slack's mrkdwn escaping: `&`, `<` and `>` are the control characters.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A result value as card text: a string as itself, anything else as its JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// POST the card to the operator's webhook. Errors never carry the webhook's URL: it is the
/// credential.
fn post_slack(config: &ReportConfig, payload: &Value) -> Result<(), Undelivered> {
    let Some(url) = &config.slack_webhook else {
        return Err(Undelivered::Destination(format!(
            "no Slack webhook is configured ({SLACK_WEBHOOK_ENV})"
        )));
    };
    match crucible_agent::http::post_json(url, None, payload, DELIVERY_TIMEOUT) {
        Ok(a) if (200..300).contains(&a.status) => Ok(()),
        Ok(a) => Err(Undelivered::Destination(format!(
            "the Slack webhook answered HTTP {}",
            a.status
        ))),
        // The cause may name the webhook, which is the credential: it is not passed on.
        Err(_) => Err(Undelivered::Destination(
            "the Slack webhook could not be reached".into(),
        )),
    }
}

/// The row a delivery settles as: `output.delivery` tells a delivered report from a rendering
/// failure, an oversized result and a destination failure.
pub fn settled(
    spec_destination: &str,
    outcome: &Result<(), Undelivered>,
) -> (Status, Option<String>, Value) {
    match outcome {
        Ok(()) => (
            Status::Pass,
            None,
            json!({"delivery": "delivered", "destination": spec_destination}),
        ),
        Err(u) => (
            Status::Fail,
            Some(u.note()),
            json!({"delivery": u.token(), "destination": spec_destination}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::{ReportSpec, TaskKind};

    fn report(template: Option<&str>, severity: Option<&str>) -> Task {
        let mut t = Task::new("notify", TaskKind::Report);
        t.report = Some(ReportSpec {
            destination: "slack".into(),
            template: template.map(str::to_string),
            result: Some("scan".into()),
            severity_field: severity.map(str::to_string),
        });
        t
    }

    fn context(result: Value) -> Value {
        json!({"verdict": "valid", "spent_usd": 0.5, "passed": 2, "failed": 0,
               "tasks": [{"name": "scan", "status": "pass"}], "run": "r-1", "result": result})
    }

    fn scan() -> Task {
        let mut t = Task::new("scan", TaskKind::Command);
        t.emits = [
            ("summary".to_string(), crucible_plan::FieldType::Any),
            ("severity".to_string(), crucible_plan::FieldType::Any),
        ]
        .into_iter()
        .collect();
        t
    }

    // RFC-0002:C-REPORTS: only declared fields of a passing selection; only the status otherwise.
    #[test]
    fn the_selection_carries_declared_fields_or_only_the_status() {
        let out = json!({"summary": "ok", "severity": "good", "secret": "not declared"});
        assert_eq!(
            selected(&scan(), Status::Pass, Some(&out)),
            json!({"task": "scan", "status": "pass", "output": {"summary": "ok", "severity": "good"}})
        );
        assert_eq!(
            selected(&scan(), Status::Fail, Some(&out)),
            json!({"task": "scan", "status": "fail"})
        );
    }

    // RFC-0002:C-REPORTS: every inserted value is escaped, `safe` included; values keep types.
    #[test]
    fn templates_escape_every_value_and_keep_types() {
        let t = report(
            Some("{{ result.output.summary }} {{ result.output.summary|safe }} n={{ result.output.n + 1 }} {{ verdict }}"),
            None,
        );
        let ctx = context(json!({"task": "scan", "status": "pass",
                                 "output": {"summary": "<!channel> & co", "n": 41}}));
        let card = card(&t, &ctx, &ReportConfig::default()).unwrap();
        let body = card["attachments"][0]["blocks"][2]["text"]["text"]
            .as_str()
            .unwrap();
        assert_eq!(
            body,
            "&lt;!channel&gt; &amp; co &lt;!channel&gt; &amp; co n=42 valid"
        );
    }

    // RFC-0002:C-REPORTS: a field the selection does not hold cannot be read: rendering fails.
    #[test]
    fn reading_an_undeclared_field_fails_rendering() {
        let t = report(Some("{{ result.output.secret }}"), None);
        let ctx = context(json!({"task": "scan", "status": "pass", "output": {"summary": "x"}}));
        let e = card(&t, &ctx, &ReportConfig::default()).unwrap_err();
        assert_eq!(e.token(), "rendering_failed", "{e:?}");
    }

    // RFC-0002:C-REPORTS: oversized results and bodies fail, never truncated.
    #[test]
    fn oversized_results_and_bodies_fail() {
        let big = json!({"task": "scan", "status": "pass", "output": {"summary": "x".repeat(200)}});
        let small = ReportConfig {
            result_max_bytes: 100,
            ..ReportConfig::default()
        };
        let e = card(&report(None, None), &context(big.clone()), &small).unwrap_err();
        assert_eq!(e.token(), "oversized");
        let tight = ReportConfig {
            body_max_bytes: 50,
            ..ReportConfig::default()
        };
        let e = card(
            &report(Some("{{ result.output.summary }}"), None),
            &context(big),
            &tight,
        )
        .unwrap_err();
        assert_eq!(e.token(), "oversized");
        assert!(e.note().contains("50-byte bound"), "{}", e.note());
    }

    // RFC-0002:C-REPORTS: the accent.
    #[test]
    fn the_accent_follows_the_severity_field_and_the_selection() {
        let pass =
            |sev: &str| json!({"task": "scan", "status": "pass", "output": {"severity": sev}});
        assert_eq!(accent(Some("severity"), &pass("warning")), "#daa038");
        assert_eq!(accent(Some("severity"), &pass("good")), "#2eb886");
        assert_eq!(accent(Some("severity"), &pass("<b>")), "#dddddd");
        assert_eq!(accent(None, &pass("danger")), "#dddddd");
        assert_eq!(
            accent(Some("severity"), &json!({"status": "blocked"})),
            "#a30200"
        );
        assert_eq!(
            accent(Some("severity"), &json!({"status": "not_taken"})),
            "#dddddd"
        );
    }

    #[test]
    fn operator_bounds_are_checked() {
        let c = |r, b| {
            ReportConfig {
                result_max_bytes: r,
                body_max_bytes: b,
                ..ReportConfig::default()
            }
            .checked()
        };
        assert!(c(16 * 1024, 3000).is_ok());
        assert!(c(0, 3000).is_err());
        assert!(c(65 * 1024, 3000).is_err());
        assert!(c(1024, 3001).is_err());
    }
}
