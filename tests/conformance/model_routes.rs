//! Routes a decision model decides (RFC-0001 notes §5, C-INFERENCE; RFC-0002:C-PLAYBOOK-CAPS and
//! C-PLAYBOOK-BUDGET for their capability and spend), against a System One model on loopback.

use crate::fanout::star;
use crate::http_double::HttpDouble;
use crate::support::{Pack, Ran, CLOSED_PORT};
use serde_json::{json, Value};

const WORKFLOW: &str = r#"judge = command(name = "judge",
    run = "echo '{\"n\": 1}' > verdict.json; echo '{\"kinds\": [\"bug\", \"chore\"]}'",
    emits = ["kinds"], emits_files = {"verdict.json": schema_file("schemas/verdict.json")})
model = route(name = "model", depends_on = [judge], min_confidence = 0.7, files = ["verdict.json"],
    questions = {"ok": noul(ask = "Is the change fine?"),
                 "size": choice(options = ["small", "large"]),
                 "kind": choice(options = judge.kinds)})
go = command(name = "go", run = "echo {}", depends_on = [model], when = model.ok, answers = "yes")
stay = command(name = "stay", run = "echo {}", depends_on = [model], when = model.ok, otherwise = True)
after = command(name = "after", run = "echo {}", depends_on = [go, stay], join = "passed")
workflow([judge, model, go, stay, after])
"#;

fn pack() -> Pack {
    let p = star(WORKFLOW);
    p.file(
        "schemas/verdict.json",
        r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}"#,
    );
    p
}

fn answers(ok: f64) -> String {
    json!({"answers": {
        "ok": {"type": "noul", "noul": ok},
        "size": {"type": "choice", "probabilities": {"small": 0.2, "large": 0.8}},
        "kind": {"type": "choice", "probabilities": {"bug": 0.1, "chore": 0.9}},
    }})
    .to_string()
}

/// `CRUCIBLE_INFERENCE` naming `model` as the run's decision binding.
fn binding(model: &HttpDouble, key_env: Option<&str>) -> String {
    let key = key_env.map_or(String::new(), |k| format!(r#", "key_env": "{k}""#));
    format!(
        r#"{{"version": 1, "bindings": [{{"role": "decision", "protocol": "system_one", "url": "{}", "model": "s1-test"{key}}}]}}"#,
        model.url("/v1/systemone")
    )
}

fn run(p: &Pack, model: &HttpDouble, extra: &[&str]) -> Ran {
    p.command(&p.run_args(extra))
        .env("CRUCIBLE_INFERENCE", &binding(model, Some("S1_TEST_KEY")))
        .env("S1_TEST_KEY", "sekrit")
        .run()
}

// The decision binding makes `decision` available; the model is asked over System One with the
// route's state (its join's inputs and the declared files it names, never `params`) and its
// questions, and `when` follows the labels it gives.
#[test]
fn a_decision_model_answers_the_route_and_when_follows_it() {
    let p = pack();
    let model = HttpDouble::start(vec![(200, answers(0.9))]);
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("model");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["attempts"], 1);
    let out = &row["output"];
    assert_eq!(out["ok"]["label"], "yes");
    assert_eq!(out["ok"]["confidence"], 0.9);
    assert_eq!(out["size"]["label"], "large");
    assert_eq!(out["kind"]["label"], "chore");
    assert_eq!(out["kind"]["options"], json!(["bug", "chore"]));
    assert_eq!(p.row("go")["status"], "pass");
    assert_eq!(p.row("stay")["status"], "not_taken");
    assert_eq!(p.row("after")["status"], "pass");

    let seen = model.requests();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.path, "/v1/systemone");
    assert_eq!(req.authorization.as_deref(), Some("Bearer sekrit"));
    assert_eq!(req.body["model"], "s1-test");
    assert_eq!(
        req.body["state"]["judge"],
        json!({"kinds": ["bug", "chore"]})
    );
    assert_eq!(
        req.body["state"]["files"],
        json!({"judge": {"verdict.json": {"n": 1}}})
    );
    assert!(req.body["state"].get("params").is_none(), "{}", req.body);
    assert_eq!(
        req.body["questions"]["ok"],
        json!({"instructions": "Is the change fine?", "type": "noul"})
    );
    assert_eq!(req.body["questions"]["size"]["type"], "choice");
    assert_eq!(
        req.body["questions"]["kind"]["criteria"],
        json!({"bug": null, "chore": null})
    );
}

// Below min_confidence the label is `uncertain`, with the confidence and distribution kept.
#[test]
fn an_answer_below_min_confidence_is_uncertain() {
    let p = pack();
    let model = HttpDouble::start(vec![(200, answers(0.6))]);
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let ok = &p.row("model")["output"]["ok"];
    assert_eq!(ok["label"], "uncertain", "{ok}");
    assert_eq!(ok["confidence"], 0.6);
    assert_eq!(ok["probabilities"]["yes"], 0.6);
    assert_eq!(p.row("go")["status"], "not_taken");
    assert_eq!(p.row("stay")["status"], "pass");
}

// An answer that breaks the protocol, or a refusal other than 5xx/429, fails the route as a
// measured failure; 5xx and 429 are transport failures, retried twice.
#[test]
fn bad_answers_fail_and_server_errors_are_transport() {
    let undeclared = json!({"answers": {
        "ok": {"type": "noul", "noul": 0.9},
        "size": {"type": "choice", "probabilities": {"small": 0.2, "huge": 0.8}},
        "kind": {"type": "choice", "probabilities": {"bug": 0.1, "chore": 0.9}},
    }})
    .to_string();
    for (reply, status, note, calls) in [
        ((200, undeclared), "fail", "undeclared label", 1),
        ((400, "{}".to_string()), "fail", "HTTP 400", 1),
        ((200, "not json".to_string()), "fail", "not JSON", 1),
        ((503, "{}".to_string()), "transport", "HTTP 503", 3),
        ((429, "{}".to_string()), "transport", "HTTP 429", 3),
    ] {
        let p = pack();
        let model = HttpDouble::start(vec![reply]);
        let r = run(&p, &model, &[]);
        assert_eq!(r.code, 3, "{r:?}");
        let row = p.row("model");
        assert_eq!(row["status"], status, "{row}");
        let shown = row["note"].as_str().unwrap_or_default();
        assert!(shown.contains(note), "{note}: {row}");
        assert_eq!(model.requests().len(), calls, "{row}");
        assert_eq!(p.row("go")["status"], "blocked");
    }
}

// A decision model that cannot be reached is a transport failure like a 5xx: retried twice,
// then settled `transport` naming it, its dependents blocked.
#[test]
fn an_unreachable_decision_model_is_transport() {
    let binding = format!(
        r#"{{"version": 1, "bindings": [{{"role": "decision", "protocol": "system_one", "url": "http://127.0.0.1:{CLOSED_PORT}/v1/systemone", "model": "s1-test"}}]}}"#
    );
    let p = pack();
    let r = p
        .command(&p.run_args(&[]))
        .env("CRUCIBLE_INFERENCE", &binding)
        .run();
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("model");
    assert_eq!(
        (row["status"].as_str(), row["attempts"].as_u64()),
        (Some("transport"), Some(3)),
        "{row}"
    );
    assert!(
        row["note"].as_str().unwrap().contains("unreachable"),
        "{row}"
    );
    assert_eq!(p.row("go")["status"], "blocked");
}

// C-INFERENCE: a malformed binding is refused before any work; a binding whose key variable is
// unset, or the `decision` capability without a binding, is refused before any dispatch.
#[test]
fn bindings_are_checked_before_any_work() {
    let p = pack();
    let r = p
        .command(&p.run_args(&[]))
        .env("CRUCIBLE_INFERENCE", r#"{"version": 2, "bindings": []}"#)
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("CRUCIBLE_INFERENCE: version 2"),
        "{}",
        r.stderr
    );
    assert!(!p.path().join("state").exists(), "nothing ran");

    let model = HttpDouble::start(vec![(200, answers(0.9))]);
    let r = p
        .command(&p.run_args(&[]))
        .env("CRUCIBLE_INFERENCE", &binding(&model, Some("S1_UNSET_KEY")))
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("`S1_UNSET_KEY` is not set"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("refused:"), "{}", r.stderr);
    assert!(model.requests().is_empty());
}

// RFC-0002:C-PLAYBOOK-BUDGET: a model-decided route can spend, so it is a dispatch the cost
// ceiling admits; once the ceiling is reached it settles blocked without asking.
#[test]
fn the_cost_ceiling_blocks_the_route_before_it_asks() {
    let p = star(
        r#"spend = agent(name = "spend", prompt = "Spend.")
model = route(name = "model", depends_on = [spend], min_confidence = 0.5,
    questions = {"ok": noul()}, required = False)
workflow([spend, model])
"#,
    );
    let model = HttpDouble::start(vec![(200, answers(0.9))]);
    let r = run(
        &p,
        &model,
        &[
            "--agent-cmd",
            r#"echo '{"cost_usd": 2}' > PLAN_TASK_RESULT.json"#,
            "--max-cost",
            "1",
        ],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("model");
    assert_eq!(row["status"], "blocked", "{row}");
    assert_eq!(row["blocked"]["reason"], "budget_ceiling");
    assert!(model.requests().is_empty());
}

// RFC-0002:C-PLAYBOOK-RESUME: a model-decided route that settled before a crash is folded, never
// asked again, and its dependents follow the folded answer.
#[test]
fn a_folded_model_route_is_not_asked_again() {
    let p = pack();
    let model = HttpDouble::start(vec![(200, answers(0.9))]);
    assert_eq!(run(&p, &model, &[]).code, 0);
    crate::resume::cut_log(&p, |l| l["kind"] != "shutdown");
    crate::resume_branches::cut_after(&p, "model");
    let again = HttpDouble::start(vec![(200, answers(0.1))]);
    let r = run(&p, &again, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        again.requests().is_empty(),
        "the folded route was asked again"
    );
    assert_eq!(p.row("go")["status"], "pass");
    assert_eq!(p.row("stay")["status"], "not_taken");
}

// RFC-0001 notes §5 (C-ROUTE-EACH): a mapped model-decided route asks once per item, with the
// item in its state, each a dispatch of its own; a mapped task follows each item's answer.
#[test]
fn a_mapped_model_route_asks_once_per_item() {
    let p = star(
        r#"src = command(name = "src", run = "echo '{\"items\": [\"a\", \"b\", \"c\"]}'", emits = {"items": "list"})
gate = route(name = "gate", depends_on = [src], over = src.items, max_fanout = 8, min_confidence = 0.5,
    questions = {"ok": noul(drop = ["no", "uncertain"])})
fix = command(name = "fix", run = "echo '{}'", depends_on = [src, gate], over = src.items,
    max_fanout = 8, when = gate.ok, answers = "yes")
workflow([src, gate, fix])
"#,
    );
    let noul = |p: f64| json!({"answers": {"ok": {"type": "noul", "noul": p}}}).to_string();
    let model = HttpDouble::start(vec![(200, noul(0.9)), (200, noul(0.1)), (200, noul(0.8))]);
    // One lane at a time, so the replies meet the items in order.
    let r = run(&p, &model, &["--jobs", "1"]);
    assert_eq!(r.code, 0, "{r:?}");
    let items: Vec<Value> = model
        .requests()
        .iter()
        .map(|r| r.body["state"]["item"].clone())
        .collect();
    assert_eq!(items, [json!("a"), json!("b"), json!("c")]);
    assert_eq!(p.row("gate[b]")["output"]["ok"]["label"], "no");
    assert_eq!(p.row("gate")["status"], "pass");
    assert_eq!(p.row("fix[a]")["status"], "pass");
    assert_eq!(p.row("fix[b]")["status"], "not_taken");
    assert_eq!(p.row("fix[c]")["status"], "pass");
}

// RFC-0002:C-PLAYBOOK-CAPS: `plan show` and `check` give the verdict the run would meet: a
// decision binding is the `decision` capability there too.
#[test]
fn inspectors_count_the_decision_binding_as_the_capability() {
    let p = pack();
    let model = HttpDouble::start(vec![(200, answers(0.9))]);
    let manifest = p
        .path()
        .join("crucible.toml")
        .to_string_lossy()
        .into_owned();
    let show = |with_binding: bool| {
        let mut cmd = p.command(&[
            "plan".into(),
            "show".into(),
            "--manifest".into(),
            manifest.clone(),
        ]);
        if with_binding {
            cmd = cmd.env("CRUCIBLE_INFERENCE", &binding(&model, None));
        }
        cmd.run()
    };
    let without = show(false);
    assert!(without.stdout.contains("TRUNCATED"), "{}", without.stdout);
    let with = show(true);
    assert_eq!(with.code, 0, "{with:?}");
    assert!(with.stdout.contains("verdict: runnable"), "{}", with.stdout);
    let check = p
        .check()
        .env("CRUCIBLE_INFERENCE", &binding(&model, None))
        .run();
    assert!(
        check.stdout.contains("verdict: runnable"),
        "{}",
        check.stdout
    );
    assert!(model.requests().is_empty(), "inspecting asks nothing");
}

// RFC-0002:C-PLAYBOOK-BUDGET: a decision model's call records what it cost (the tokens its
// answer's `usage` reports, priced by the run's price table for the binding's model; without a
// `usage`, an estimate from the call's size) on the route's row and in the run's spend, and that
// spend counts against the cost ceiling: a spending task after the route is blocked by it.
#[test]
fn a_decision_call_records_its_cost_and_counts_against_the_ceiling() {
    let p = Pack::with_manifest(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent.prices.s1-test]\ninput = 4.0\noutput = 20.0\n",
    );
    p.file(
        "workflow.star",
        r#"model = route(name = "model", min_confidence = 0.5, questions = {"ok": noul()})
later = agent(name = "later", prompt = "Spend.", depends_on = [model], required = False)
workflow([model, later])
"#,
    );
    let ok = json!({"ok": {"type": "noul", "noul": 0.9}});
    let answer = json!({"answers": ok, "usage": {"input_tokens": 1000, "output_tokens": 100}});
    let model = HttpDouble::start(vec![(200, answer.to_string())]);
    let cost = (1000.0 * 4.0 + 100.0 * 20.0) / 1e6;
    let agent_cmd = ["--agent-cmd", "echo '{}' > PLAN_TASK_RESULT.json"];
    let r = run(
        &p,
        &model,
        &[&agent_cmd[..], &["--max-cost", "0.001"]].concat(),
    );
    let row = p.row("model");
    assert_eq!(row["status"], "pass", "{r:?}");
    assert!(
        (row["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12,
        "{row}"
    );
    assert!((p.shutdown()["spent_usd"].as_f64().unwrap() - cost).abs() < 1e-12);
    assert_eq!(
        p.row("later")["blocked"],
        json!({"reason": "budget_ceiling"}),
        "{r:?}"
    );
    // Without `usage`, the call is still charged: an estimate from its size.
    let p2 = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n");
    p2.file(
        "workflow.star",
        "model = route(name = \"model\", min_confidence = 0.5, questions = {\"ok\": noul()})\nworkflow([model])\n",
    );
    let model = HttpDouble::start(vec![(200, json!({"answers": ok}).to_string())]);
    let r = run(&p2, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(p2.row("model")["cost_usd"].as_f64().unwrap() > 0.0, "{r:?}");
}
