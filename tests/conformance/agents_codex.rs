//! What only the Codex CLI does (issue 10; RFC-0002:C-PLAYBOOK-BUDGET spend): it reports
//! tokens, not money, so crucible prices them by the model the turn ran on. The cases every
//! harness shares are in `agents.rs`.

use crate::agents::{agent, scripted, Cli, CODEX};
use crate::model_double::ModelDouble;
use serde_json::json;

// RFC-0002:C-PLAYBOOK-BUDGET: a turn is priced by the model it ran on: a task naming its own
// model is charged that model's price, not the binding's default model's.
#[test]
fn codex_spend_is_priced_by_the_tasks_model() {
    let cheap = Cli {
        model: "scripted-cheap",
        price: (0.5, 1.0),
        ..CODEX
    };
    let model = ModelDouble::start();
    let script = json!({"write": {"PLAN_TASK_RESULT.json": "{}"}});
    let wf = format!(
        "{}{}workflow([dear, cheap])\n",
        agent("dear", &scripted("Dear.", script.clone()), ""),
        agent(
            "cheap",
            &scripted("Cheap.", script),
            &format!(", model = {:?}", cheap.model)
        ),
    );
    let prices = format!(
        "[agent.prices.{:?}]\ninput = {}\noutput = {}\n",
        cheap.model, cheap.price.0, cheap.price.1
    );
    let Some(p) = CODEX.pack_with(&wf, "", &prices) else {
        return;
    };
    let r = CODEX.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let calls = model.scripted_calls();
    let on = |m: &str| calls.iter().filter(|c| c.body["model"] == m).count() as f64;
    let (dear_calls, cheap_calls) = (on(CODEX.model), on(cheap.model));
    assert!(
        dear_calls > 0.0 && cheap_calls > 0.0,
        "both models called: {calls:?}"
    );
    let cost = |t: &str| p.row(t)["cost_usd"].as_f64().unwrap();
    assert!(
        (cost("dear") - dear_calls * CODEX.call_cost()).abs() < 1e-9,
        "{}",
        cost("dear")
    );
    assert!(
        (cost("cheap") - cheap_calls * cheap.call_cost()).abs() < 1e-9,
        "{}",
        cost("cheap")
    );
}
