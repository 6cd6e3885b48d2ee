//! Agent tasks on the pi coding agent (issue 10; RFC-0002:C-PLAYBOOK-BUDGET spend in flight,
//! C-REVISE-LOOP sessions), the real CLI against a scripted Chat Completions endpoint on
//! loopback (`model_double`), its spend priced from tokens by the run's price table.

use crate::model_double::{ModelDouble, USAGE};
use crate::support::{agent_cli, Pack, Ran};
use serde_json::{json, Value};

/// The price the packs set for the scripted model: USD per 1M tokens.
const PRICE: (f64, f64) = (3.0, 15.0);

/// What one model call costs at [`PRICE`].
fn call_cost() -> f64 {
    (USAGE.0 as f64 * PRICE.0 + USAGE.1 as f64 * PRICE.1) / 1e6
}

fn pack(workflow: &str) -> Option<Pack> {
    let cli = agent_cli("pi")?;
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent]\nharness = \"pi\"\n[agent.cli]\npi = {:?}\n\
         [agent.prices.scripted-1]\ninput = {}\noutput = {}\n",
        cli.to_string_lossy(),
        PRICE.0,
        PRICE.1
    ));
    p.file("workflow.star", workflow);
    Some(p)
}

fn run(p: &Pack, model: &ModelDouble, args: &[&str]) -> Ran {
    let binding = json!({"version": 1, "bindings": [{"role": "agent", "protocol": "chat_completions",
        "url": model.url(), "model": "scripted-1", "key_env": "SCRIPTED_KEY"}]});
    p.command(&p.run_args(args))
        .env("CRUCIBLE_INFERENCE", &binding.to_string())
        .env("SCRIPTED_KEY", "sk-scripted")
        .env("AWS_SECRET_ACCESS_KEY", "ambient-secret")
        .run()
}

fn scripted(text: &str, script: Value) -> String {
    format!("{text}\nSCRIPT:{script}\n")
}

fn agent(name: &str, prompt: &str, extra: &str) -> String {
    format!("{name} = agent(name = {name:?}, prompt = {prompt:?}{extra})\n")
}

// A turn writes a file and its result; its spend is its token usage at the run's price; the key
// comes from the binding and nothing ambient reaches the turn.
#[test]
fn pi_turn_writes_a_file_and_its_result() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Write hello.txt.",
        json!({"write": {"hello.txt": "hi from pi", "PLAN_TASK_RESULT.json": "{\"greeting\": \"hi\"}"},
               "bash": "env > env.txt"}),
    );
    let Some(p) = pack(&format!(
        "{}workflow([hello])\n",
        agent("hello", &prompt, "")
    )) else {
        return;
    };
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("hello");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["output"], json!({"greeting": "hi"}));
    let calls = model.scripted_calls();
    let cost = row["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - calls.len() as f64 * call_cost()).abs() < 1e-9,
        "{cost} for {} calls",
        calls.len()
    );
    let ws = p.workspace();
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hi from pi"
    );
    let env = std::fs::read_to_string(ws.join("env.txt")).unwrap();
    assert!(!env.contains("ambient-secret"), "{env}");
    assert!(
        calls
            .iter()
            .all(|c| c.key.as_deref() == Some("sk-scripted")),
        "{calls:?}"
    );
}

// An API error (HTTP 500; pi itself exits 0) is a transport failure: retried, then settled.
#[test]
fn pi_api_error_is_transport_retried_then_failed() {
    let model = ModelDouble::start();
    let prompt = scripted("Try.", json!({"fail": 500}));
    let Some(p) = pack(&format!(
        "{}workflow([try_it])\n",
        agent("try_it", &prompt, "")
    )) else {
        return;
    };
    let r = run(&p, &model, &[]);
    assert_ne!(r.code, 0, "{r:?}");
    let row = p.row("try_it");
    assert_eq!(row["status"], "transport", "{row}");
    assert_eq!(row["attempts"], 3, "{row}");
    assert_eq!(
        model.scripted_calls().len(),
        3,
        "one model call per attempt, no CLI retries"
    );
}

// RFC-0002:C-REVISE-LOOP (sessions): the second task of a session resumes the first's
// conversation with pi's own resume.
#[test]
fn pi_session_resumes_across_tasks() {
    let model = ModelDouble::start();
    let first = scripted(
        "First: plan.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"step\": 1}"}}),
    );
    let second = scripted(
        "Second: build.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"step\": 2}"}}),
    );
    let wf = format!(
        "s = session(name = \"work\")\n{}{}workflow([plan, build])\n",
        agent("plan", &first, ", session = s"),
        agent("build", &second, ", session = s, depends_on = [plan]"),
    );
    let Some(p) = pack(&wf) else { return };
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("build")["output"], json!({"step": 2}));
    let calls = model.scripted_calls();
    let build = calls
        .iter()
        .find(|c| c.body["messages"].to_string().contains("Second: build."))
        .expect("a call for the second task");
    assert!(
        build.body["messages"].to_string().contains("First: plan."),
        "resumed"
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: spend streamed by a turn still running counts against the cost
// ceiling at once: a spending task that becomes ready meanwhile is blocked by it, while a
// command still runs.
#[test]
fn pi_streamed_spend_stops_later_spending_dispatches_mid_run() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Spend, then think a while.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{}"}, "final_delay_ms": 10000}),
    );
    let wf =
        format!(
        "{}ticker = command(name = \"ticker\", run = \"sleep 6; echo {{}}\", isolated = True)\n\
         {}after = command(name = \"after\", run = \"echo {{}}\", depends_on = [ticker])\n\
         workflow([spender, ticker, later, after])\n",
        agent("spender", &prompt, ""),
        agent("later", "Never runs.", ", depends_on = [ticker], isolated = True, required = False"),
    );
    let Some(p) = pack(&wf) else { return };
    // Below one call's cost: the first streamed call crosses it.
    let r = run(
        &p,
        &model,
        &["--max-cost", &format!("{}", call_cost() / 2.0)],
    );
    assert_eq!(p.row("after")["status"], "pass", "{r:?}");
    assert_eq!(
        p.row("later")["blocked"],
        json!({"reason": "budget_ceiling"}),
        "{r:?}"
    );
    let order: Vec<String> = (p.log().iter())
        .filter(|l| l["kind"] == "task_result")
        .map(|l| l["task"].as_str().unwrap().to_string())
        .collect();
    let at = |t: &str| order.iter().position(|o| o == t).unwrap();
    assert!(
        at("later") < at("spender"),
        "blocked while the spender still ran: {order:?}"
    );
    assert!(p.row("spender")["cost_usd"].as_f64().unwrap() > 0.0);
}
