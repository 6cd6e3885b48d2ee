//! What only the Codex CLI does (issue 10; RFC-0002:C-PLAYBOOK-BUDGET spend): it reports
//! tokens, not money, so crucible prices them by the model the turn ran on. The cases every
//! harness shares are in `agents.rs`.

use crate::agents::{spend_is_priced_by_the_tasks_model, CODEX};

// RFC-0002:C-PLAYBOOK-BUDGET: a turn is priced by the model it ran on: a task naming its own
// model is charged that model's price, not the binding's default model's.
#[test]
fn codex_spend_is_priced_by_the_tasks_model() {
    spend_is_priced_by_the_tasks_model(&CODEX);
}
