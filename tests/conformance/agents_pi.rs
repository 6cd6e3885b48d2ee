//! What only the pi coding agent does (issue 10; RFC-0002:C-PLAYBOOK-BUDGET spend in flight):
//! it reports each model call's cost as the call ends, so a turn's spend reaches the cost
//! ceiling while the turn still runs. The cases every harness shares are in `agents.rs`.

use crate::agents::{agent, scripted, spend_is_priced_by_the_tasks_model, PI};
use crate::model_double::ModelDouble;
use serde_json::json;

// RFC-0002:C-PLAYBOOK-BUDGET: spend streamed by a turn still running counts against the cost
// ceiling at once: a spending task that becomes ready meanwhile is blocked by it, while a
// command still runs.
#[test]
fn pi_streamed_spend_stops_later_spending_dispatches_mid_run() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Spend, then think a while.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{}"}, "bash": "touch \"$PACK/spent\"",
               "final_delay_ms": 10000}),
    );
    // The ticker runs until the spender's first call has ended (its tool ran, so pi streamed
    // that call's cost a moment before), whatever the machine's load.
    let ticker = r#"until [ -e "$PACK/spent" ]; do sleep 0.05; done; sleep 1; echo {}"#;
    let wf = format!(
        "{}ticker = command(name = \"ticker\", run = {ticker:?}, isolated = True)\n\
         {}after = command(name = \"after\", run = \"echo {{}}\", depends_on = [ticker])\n\
         workflow([spender, ticker, later, after])\n",
        agent("spender", &prompt, ""),
        agent(
            "later",
            "Never runs.",
            ", depends_on = [ticker], isolated = True, required = False"
        ),
    );
    let Some(p) = PI.pack(&wf) else { return };
    // Below one call's cost: the first streamed call crosses it.
    let r = PI.run(
        &p,
        &model,
        &["--max-cost", &format!("{}", PI.call_cost() / 2.0)],
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

// RFC-0002:C-PLAYBOOK-BUDGET, C-PLAYBOOK-PARAMS: a task's own model reaches the endpoint (pi's
// provider lists it) and prices the task's spend.
#[test]
fn pi_spend_is_priced_by_the_tasks_model() {
    spend_is_priced_by_the_tasks_model(&PI);
}
