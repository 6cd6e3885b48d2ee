//! Agent tasks on the Codex CLI (issue 10; RFC-0002:C-PLAYBOOK-BUDGET spend, C-REVISE-LOOP
//! sessions), the real CLI against a scripted OpenAI Responses endpoint on loopback
//! (`model_double`); its spend is its token usage, cumulative per thread, priced by the run.

use crate::model_double::{ModelDouble, USAGE};
use crate::support::{agent_cli, Pack, Ran};
use serde_json::{json, Value};

const PRICE: (f64, f64) = (2.0, 10.0);

/// The price of `scripted-cheap`, a model a task may name instead of the binding's.
const CHEAP: (f64, f64) = (0.5, 1.0);

fn cost_at(price: (f64, f64)) -> f64 {
    (USAGE.0 as f64 * price.0 + USAGE.1 as f64 * price.1) / 1e6
}

fn call_cost() -> f64 {
    cost_at(PRICE)
}

fn pack(workflow: &str) -> Option<Pack> {
    let cli = agent_cli("codex")?;
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent]\nharness = \"codex\"\n[agent.cli]\ncodex = {:?}\n\
         [agent.prices.\"gpt-5.5\"]\ninput = {}\noutput = {}\n\
         [agent.prices.scripted-cheap]\ninput = {}\noutput = {}\n",
        cli.to_string_lossy(),
        PRICE.0,
        PRICE.1,
        CHEAP.0,
        CHEAP.1
    ));
    p.file("workflow.star", workflow);
    Some(p)
}

fn run(p: &Pack, model: &ModelDouble) -> Ran {
    let binding = json!({"version": 1, "bindings": [{"role": "agent", "protocol": "responses",
        "url": model.url(), "model": "gpt-5.5", "key_env": "SCRIPTED_KEY"}]});
    p.command(&p.run_args(&[]))
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

// A turn writes a file and its result; the key comes from the binding and nothing ambient
// reaches the turn.
#[test]
fn codex_turn_writes_a_file_and_its_result() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Write hello.txt.",
        json!({"write": {"hello.txt": "hi from codex", "PLAN_TASK_RESULT.json": "{\"greeting\": \"hi\"}"},
               "bash": "env > env.txt"}),
    );
    let Some(p) = pack(&format!(
        "{}workflow([hello])\n",
        agent("hello", &prompt, "")
    )) else {
        return;
    };
    let r = run(&p, &model);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("hello");
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
        "hi from codex"
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

// An API error (HTTP 500) is transport: retried, then settled.
#[test]
fn codex_api_error_is_transport_retried_then_failed() {
    let model = ModelDouble::start();
    let prompt = scripted("Try.", json!({"fail": 500}));
    let Some(p) = pack(&format!(
        "{}workflow([try_it])\n",
        agent("try_it", &prompt, "")
    )) else {
        return;
    };
    let r = run(&p, &model);
    assert_ne!(r.code, 0, "{r:?}");
    let row = p.row("try_it");
    assert_eq!(row["status"], "transport", "{row}");
    assert_eq!(row["attempts"], 3, "{row}");
}

// RFC-0002:C-REVISE-LOOP (sessions): the second task resumes the thread, and its spend is only
// its own calls although codex reports usage cumulative per thread.
#[test]
fn codex_session_resumes_and_counts_only_its_own_usage() {
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
    let r = run(&p, &model);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("build")["output"], json!({"step": 2}));
    let calls = model.scripted_calls();
    let build: Vec<_> = calls
        .iter()
        .filter(|c| c.body["input"].to_string().contains("Second: build."))
        .collect();
    assert!(!build.is_empty());
    assert!(
        build[0].body["input"].to_string().contains("First: plan."),
        "resumed"
    );
    let cost = p.row("build")["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - build.len() as f64 * call_cost()).abs() < 1e-9,
        "{cost} for {} calls",
        build.len()
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: a turn is priced by the model it ran on: a task naming its own
// model is charged that model's price, not the binding's default model's.
#[test]
fn codex_spend_is_priced_by_the_tasks_model() {
    let model = ModelDouble::start();
    let script = json!({"write": {"PLAN_TASK_RESULT.json": "{}"}});
    let wf = format!(
        "{}{}workflow([dear, cheap])\n",
        agent("dear", &scripted("Dear.", script.clone()), ""),
        agent(
            "cheap",
            &scripted("Cheap.", script),
            ", model = \"scripted-cheap\""
        ),
    );
    let Some(p) = pack(&wf) else { return };
    let r = run(&p, &model);
    assert_eq!(r.code, 0, "{r:?}");
    let calls = model.scripted_calls();
    let on = |m: &str| calls.iter().filter(|c| c.body["model"] == m).count() as f64;
    let (dear, cheap) = (on("gpt-5.5"), on("scripted-cheap"));
    assert!(dear > 0.0 && cheap > 0.0, "both models called: {calls:?}");
    let cost = |t: &str| p.row(t)["cost_usd"].as_f64().unwrap();
    assert!(
        (cost("dear") - dear * cost_at(PRICE)).abs() < 1e-9,
        "{}",
        cost("dear")
    );
    assert!(
        (cost("cheap") - cheap * cost_at(CHEAP)).abs() < 1e-9,
        "{}",
        cost("cheap")
    );
}
