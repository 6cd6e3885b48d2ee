//! What only Claude Code does (issue 10; RFC-0002:C-REVISE-LOOP sessions across revise rounds),
//! and the refusal of a missing or wrong-version CLI; the cases every harness shares are in
//! `agents.rs`.

use crate::agents::{agent, scripted, CLAUDE};
use crate::model_double::ModelDouble;
use crate::support::Pack;
use serde_json::json;

// A harness CLI that is missing or not at its pinned version is refused before dispatch, and
// `check` says the same (no CLI needed: a stand-in reports a wrong version).
#[test]
fn a_missing_or_wrong_version_cli_is_refused_before_dispatch() {
    let agent = "a = agent(name = \"a\", prompt = \"x\")\nworkflow([a])\n";
    for (cli, why) in [
        ("missing/claude", "cannot run"),
        (
            "old-claude.sh",
            "is claude 1.0.0, and this engine is tested with 2.1.197 only",
        ),
    ] {
        let p = Pack::with_manifest(&format!(
            "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
             [agent]\nharness = \"claude\"\n[agent.cli]\nclaude = \"{cli}\"\n"
        ));
        p.file("workflow.star", agent);
        p.file("old-claude.sh", "#!/bin/sh\necho '1.0.0 (Claude Code)'\n");
        let script = p.path().join("old-claude.sh");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let r = p.run(&[]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains(why), "{}", r.stderr);
        assert!(
            !r.stdout.contains("started a"),
            "refused before dispatch: {r:?}"
        );
        let c = p.check().run();
        assert_eq!(c.code, 1, "{c:?}");
        assert!(c.stderr.contains(why), "{}", c.stderr);
    }
}

// RFC-0002:C-REVISE-LOOP: a body agent in a session resumes its conversation every round: the
// second round's model call carries the first round's exchange.
#[test]
fn claude_session_resumes_across_revise_rounds() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Draft it.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"draft\": 1}"}}),
    );
    // The reviewer never accepts: the draft gets its second round.
    let review = "echo '{}'; exit 1";
    let wf = format!(
        "s = session(name = \"writer\")\n{}review = command(name = \"review\", run = {review:?}, depends_on = [draft], revise = [draft], max_rounds = 2, required = False)\nworkflow([draft, review])\n",
        agent("draft", &prompt, ", session = s"),
    );
    let Some(p) = CLAUDE.pack(&wf) else { return };
    let r = CLAUDE.run(&p, &model, &[]);
    let calls = model.scripted_calls();
    let rounds: Vec<String> = calls
        .iter()
        .map(|c| c.body["messages"].to_string())
        .filter(|m| m.contains("Draft it."))
        .collect();
    let second = rounds
        .iter()
        .find(|m| m.matches("Draft it.").count() >= 2)
        .unwrap_or_else(|| {
            panic!(
                "no round-2 call resumed round 1 ({} calls): {r:?}",
                rounds.len()
            )
        });
    assert!(
        second.contains("revision"),
        "round 2 sees its revision input"
    );
}
