//! Typed workflow reports (RFC-0002:C-REPORTS): an engine-owned epilogue that renders the run's
//! verdict, cost, task statuses and its selected task's declared result into a Slack card the
//! engine builds, delivered to the operator's webhook (a Slack double on loopback here).

use crate::fanout::star;
use crate::http_double::HttpDouble;
use crate::support::{Pack, Ran};
use serde_json::{json, Value};

const HOOK: &str = "/services/T000/B000/not-a-real-secret";

fn pack(scan_run: &str, template: &str) -> Pack {
    let p = star(&format!(
        r#"scan = command(name = "scan", run = "{scan_run}", required = False,
    emits = {{"summary": "string", "severity": "string"}})
notify = report(name = "notify", destination = {{"kind": "slack"}}, template = "card.md",
    result = scan, severity_field = "severity")
workflow([scan, notify])
"#
    ));
    p.file("card.md", template);
    p
}

const SCAN: &str = r#"echo '{\"summary\": \"3 <weeds> & more\", \"severity\": \"warning\", \"secret\": \"undeclared\"}'"#;
const CARD: &str =
    "Found: {{ result.output.summary }} ({{ passed }} passed, verdict {{ verdict }})";

fn run(p: &Pack, slack: Option<&HttpDouble>, extra: &[(&str, &str)]) -> Ran {
    let mut cmd = p
        .command(&p.run_args(&[]))
        .env("CRUCIBLE_RUN_URL", "https://ctl.example/runs/1");
    if let Some(s) = slack {
        cmd = cmd.env("CRUCIBLE_REPORT_SLACK_WEBHOOK", &s.url(HOOK));
    }
    for (k, v) in extra {
        cmd = cmd.env(k, v);
    }
    cmd.run()
}

fn blocks(payload: &Value) -> Vec<Value> {
    payload["attachments"][0]["blocks"]
        .as_array()
        .unwrap()
        .clone()
}

// The card: an engine-authored header, verdict and cost, the rendered body with every value
// escaped, the selected task's declared fields only, task statuses and the run link; the accent
// is the severity field's; the row says it was delivered and never holds the webhook.
#[test]
fn a_report_is_rendered_escaped_and_delivered() {
    let p = pack(SCAN, CARD);
    let slack = HttpDouble::start(vec![(200, "ok".into())]);
    let r = run(&p, Some(&slack), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("notify");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(
        row["output"],
        json!({"delivery": "delivered", "destination": "slack"})
    );
    let seen = slack.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, HOOK);
    let payload = &seen[0].body;
    assert_eq!(payload["attachments"][0]["color"], "#daa038");
    let b = blocks(payload);
    assert_eq!(b[0]["text"]["text"], "notify: valid");
    assert!(b[1]["text"]["text"]
        .as_str()
        .unwrap()
        .contains("*Verdict:* valid"));
    assert_eq!(
        b[2]["text"]["text"],
        "Found: 3 &lt;weeds&gt; &amp; more (1 passed, verdict valid)"
    );
    let text = payload.to_string();
    assert!(
        text.contains("*summary*\\n3 &lt;weeds&gt; &amp; more"),
        "{text}"
    );
    assert!(
        !text.contains("undeclared"),
        "an undeclared field reached the card: {text}"
    );
    assert!(text.contains("scan: pass"), "{text}");
    assert!(
        text.contains("<https://ctl.example/runs/1|Open the run>"),
        "{text}"
    );
    let log =
        std::fs::read_to_string(crate::resume::log_path(&p, &crate::resume::current(&p))).unwrap();
    assert!(
        !log.contains("not-a-real-secret"),
        "the webhook reached the log"
    );
}

// A destination failure, and no destination at all, fail the report (told apart on the row);
// an epilogue failure never changes the verdict.
#[test]
fn a_destination_failure_fails_the_report_not_the_verdict() {
    let p = pack(SCAN, CARD);
    let slack = HttpDouble::start(vec![(500, "oops".into())]);
    let r = run(&p, Some(&slack), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("notify");
    assert_eq!(row["status"], "fail");
    assert_eq!(row["output"]["delivery"], "destination_failed");
    assert_eq!(row["note"], "the Slack webhook answered HTTP 500");
    assert!(!row.to_string().contains("not-a-real-secret"));

    let r = run(&p, None, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("notify");
    assert_eq!(row["output"]["delivery"], "destination_failed");
    assert!(row["note"]
        .as_str()
        .unwrap()
        .contains("no Slack webhook is configured"));
}

// A selected task that did not pass gives the report its status only, and a danger card; a
// template that reads its output then fails to render, distinguishable from other failures.
#[test]
fn a_failed_selection_carries_only_its_status() {
    let guarded = "{% if result.status == \"pass\" %}{{ result.output.summary }}{% else %}{{ result.task }} {{ result.status }}{% endif %}";
    let p = pack("exit 1", guarded);
    let slack = HttpDouble::start(vec![(200, "ok".into())]);
    assert_eq!(run(&p, Some(&slack), &[]).code, 0);
    assert_eq!(p.row("notify")["status"], "pass");
    let payload = &slack.requests()[0].body;
    assert_eq!(payload["attachments"][0]["color"], "#a30200");
    assert_eq!(blocks(payload)[2]["text"]["text"], "scan fail");

    let p = pack("exit 1", CARD);
    let slack = HttpDouble::start(vec![(200, "ok".into())]);
    assert_eq!(run(&p, Some(&slack), &[]).code, 0);
    let row = p.row("notify");
    assert_eq!(row["output"]["delivery"], "rendering_failed", "{row}");
    assert!(slack.requests().is_empty());
}

// The operator's bounds: an oversized result or body fails the report without truncating or
// sending anything; the bounds are shown by check and a bad one is refused before any work.
#[test]
fn oversized_reports_fail_and_bounds_are_discoverable() {
    let p = pack(SCAN, CARD);
    let slack = HttpDouble::start(vec![(200, "ok".into())]);
    let r = run(
        &p,
        Some(&slack),
        &[("CRUCIBLE_REPORT_RESULT_MAX_BYTES", "40")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("notify");
    assert_eq!(row["output"]["delivery"], "oversized", "{row}");
    assert!(
        row["note"].as_str().unwrap().contains("40-byte bound"),
        "{row}"
    );
    assert!(slack.requests().is_empty());

    let check = p.check().env("CRUCIBLE_REPORT_BODY_MAX_BYTES", "1K").run();
    assert!(
        check
            .stdout
            .contains("reports: result at most 16384 bytes, body at most 1024 bytes, Slack webhook not configured"),
        "{}",
        check.stdout
    );
    let r = run(
        &p,
        Some(&slack),
        &[("CRUCIBLE_REPORT_RESULT_MAX_BYTES", "0")],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("CRUCIBLE_REPORT_RESULT_MAX_BYTES must be from 1"),
        "{}",
        r.stderr
    );
}

// RFC-0002:C-REPORTS: the card carries the verdict and cost, and a bounded task status context:
// a graph of more tasks than the bound lists 20 statuses, while the header counts every task.
#[test]
fn the_cards_task_status_context_is_bounded() {
    let names: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
    let tasks: String = names
        .iter()
        .map(|n| format!("{n} = command(name = \"{n}\", run = \"echo '{{}}'\")\n"))
        .collect();
    let p = star(&format!(
        "{tasks}notify = report(name = \"notify\", destination = {{\"kind\": \"slack\"}})\nworkflow([{}, notify])\n",
        names.join(", ")
    ));
    let slack = HttpDouble::start(vec![(200, "ok".into())]);
    let r = run(&p, Some(&slack), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let b = blocks(&slack.requests()[0].body);
    assert_eq!(
        b[1]["text"]["text"],
        "*Verdict:* valid   *Cost:* $0.00   *Tasks:* 25 passed, 0 failed"
    );
    let context = b
        .iter()
        .find(|b| b["type"] == "context")
        .expect("a status context");
    let statuses = context["elements"][0]["text"].as_str().unwrap();
    assert_eq!(statuses.split(" · ").count(), 20, "{statuses}");
    assert!(
        statuses.starts_with("t") && statuses.contains(": pass"),
        "{statuses}"
    );
}
