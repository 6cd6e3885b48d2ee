//! Revise loops through the real binary (RFC-0002:C-REVISE-LOOP): rounds in dependency order,
//! `revision` from round 2, round rows then rows under each body task's own name, commit of
//! passing rounds, and the ceilings between rounds.

use crate::fanout::{row_names, star};
use crate::support::Pack;
use serde_json::json;
use std::process::Command;

/// `draft` appends its round to `draft.txt` (committed when it passes) and saves its inputs;
/// `review` passes once the draft's round reaches `$PACK/pass_at` (fails forever without it).
pub fn looped(draft_extra: &str, max_rounds: u32) -> Pack {
    let p = star(&format!(
        r#"plan = command(name = "plan", run = "echo '{{\"topic\": \"t\"}}'")
draft = command(name = "draft", run = "python3 $PACK/draft.py", depends_on = [plan]{draft_extra})
review = command(name = "review", run = "python3 $PACK/review.py", depends_on = [draft], revise = [draft], max_rounds = {max_rounds})
after = command(name = "after", run = "python3 $PACK/save.py", depends_on = [draft, review], join = "settled")
workflow([plan, draft, review, after])
"#
    ));
    p.file(
        "draft.py",
        r#"import json, os, sys
inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
rnd = inputs.get("revision", {}).get("round", 1)
out = os.path.join(os.environ["PACK"], "out")
os.makedirs(out, exist_ok=True)
json.dump(inputs, open(os.path.join(out, "draft-%d.json" % rnd), "w"))
open("draft.txt", "a").write("round %d\n" % rnd)
print(json.dumps({"round": rnd}))
sys.exit(1 if os.path.exists(os.path.join(os.environ["PACK"], "draft_fails")) else 0)
"#,
    );
    p.file(
        "review.py",
        r#"import json, os, sys
inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
try:
    need = int(open(os.path.join(os.environ["PACK"], "pass_at")).read())
except OSError:
    need = 99
rnd = inputs["draft"]["round"]
print(json.dumps({"seen": rnd, "draft_txt": open("draft.txt").read(), "revision": "revision" in inputs}))
sys.exit(0 if rnd >= need else 1)
"#,
    );
    p
}

// RFC-0002:C-REVISE-LOOP: a reviewer failing round 1 sends the draft back; round 2 passes. Round
// rows as each round settles, then one row per body task under its own name with the sum of
// spend and attempts; the target gets `revision` from round 2 only, the reviewer never; a
// passing round's changes are committed, so round 2 runs on top of round 1.
#[test]
fn loop_passing_in_round_two() {
    let p = looped("", 3);
    p.file("pass_at", "2");
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        row_names(&p),
        [
            "plan",
            "draft[round-1]",
            "review[round-1]",
            "draft[round-2]",
            "review[round-2]",
            "draft",
            "review",
            "after"
        ]
    );
    assert_eq!(p.row("review[round-1]")["status"], "fail");
    assert_eq!(p.row("review[round-1]")["note"], "exit 1");
    let draft = p.row("draft");
    assert_eq!(draft["status"], "pass");
    assert_eq!(draft["output"], json!({"round": 2}));
    assert_eq!(draft["attempts"], 2);
    let review = p.row("review");
    assert_eq!(review["status"], "pass");
    assert_eq!(review["attempts"], 2);
    assert_eq!(
        review["output"],
        json!({"seen": 2, "draft_txt": "round 1\nround 2\n", "revision": false})
    );
    assert!(p.saved("draft-1").get("revision").is_none());
    assert_eq!(
        p.saved("draft-2")["revision"],
        json!({
            "round": 2,
            "max_rounds": 3,
            "reviewer": "review",
            "review": {
                "status": "fail",
                "note": "exit 1",
                "output": {"seen": 1, "draft_txt": "round 1\n", "revision": false},
                "files": false
            }
        })
    );
    // Dependents read the last round.
    assert_eq!(p.saved("after")["draft"]["output"], json!({"round": 2}));
    assert_eq!(p.shutdown()["verdict"], "valid");
}

// RFC-0002:C-REVISE-LOOP: a reviewer failing every round ends the loop after max_rounds; its own
// row fails and gates the verdict, the round rows do not halt the run.
#[test]
fn loop_exhausting_its_rounds() {
    let p = looped("", 2);
    assert_eq!(p.run(&[]).code, 3);
    assert_eq!(
        row_names(&p),
        [
            "plan",
            "draft[round-1]",
            "review[round-1]",
            "draft[round-2]",
            "review[round-2]",
            "draft",
            "review",
            "after"
        ]
    );
    assert_eq!(p.row("review")["status"], "fail");
    assert_eq!(p.row("review")["attempts"], 2);
    assert_eq!(p.row("draft")["status"], "pass");
    // The required reviewer failed: its dependents are blocked naming it.
    assert_eq!(p.row("after")["status"], "blocked");
    assert_eq!(p.row("after")["blocked"]["task"], "review");
    let shutdown = p.shutdown();
    assert_eq!(shutdown["verdict"], "invalid");
    assert_eq!(shutdown["reason"], "required task review did not pass");
}

// RFC-0002:C-REVISE-LOOP: a target failing blocks the reviewer for that round; a blocked reviewer
// round ends the loop, and the rows under the tasks' own names carry the last round.
#[test]
fn loop_blocked_by_a_failed_target() {
    let p = looped("", 3);
    p.file("draft_fails", "");
    assert_eq!(p.run(&[]).code, 3);
    // The draft's own row fails a required task: `after` is blocked as that row settles, while
    // the reviewer's row is still to be written.
    assert_eq!(
        row_names(&p),
        [
            "plan",
            "draft[round-1]",
            "review[round-1]",
            "draft",
            "after",
            "review"
        ]
    );
    assert_eq!(p.row("after")["blocked"]["task"], "draft");
    let reviewed = p.row("review[round-1]");
    assert_eq!(reviewed["status"], "blocked");
    assert_eq!(
        reviewed["blocked"],
        json!({"reason": "dependency_did_not_pass", "task": "draft"})
    );
    assert_eq!(reviewed["attempts"], 0);
    assert_eq!(p.row("draft")["status"], "fail");
    let review = p.row("review");
    assert_eq!(review["status"], "blocked");
    assert_eq!(review["blocked"]["task"], "draft");
    // A failing round is discarded: nothing of the draft reached the workspace.
    let ws = p.workspace();
    assert!(!ws.join("draft.txt").exists());
}

// RFC-0002:C-REVISE-LOOP, C-PLAYBOOK-BUDGET: the cost ceiling is checked before every round: a
// draft that spends the whole ceiling in round 1 ends the loop there, each body task keeps its
// last round, and the run ends on the cost ceiling.
#[test]
fn loop_stopped_by_the_cost_ceiling_between_rounds() {
    let p = star(
        r#"draft = agent(name = "draft", prompt = "write the draft")
review = command(name = "review", run = "echo '{\"ok\": false}'; exit 1", depends_on = [draft], revise = [draft], max_rounds = 3)
workflow([draft, review])
"#,
    );
    p.file(
        "agent.sh",
        "echo '{\"words\": 3, \"cost_usd\": 1.0}' > PLAN_TASK_RESULT.json\n",
    );
    std::fs::write(
        p.path().join("crucible.toml"),
        format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nbackend = \"command\"\nagent_cmd = \"sh $PACK/agent.sh\"\n{}",
            crate::support::observed_tables()
        ),
    )
    .unwrap();
    let r = p.run(&["--max-cost", "1"]);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        row_names(&p),
        ["draft[round-1]", "review[round-1]", "draft", "review"]
    );
    assert_eq!(p.row("draft[round-1]")["cost_usd"], 1.0);
    assert_eq!(p.row("draft")["status"], "pass");
    assert_eq!(p.row("draft")["cost_usd"], 1.0);
    assert_eq!(p.row("review")["status"], "fail");
    let shutdown = p.shutdown();
    assert_eq!(shutdown["outcome"], "budget");
    assert_eq!(shutdown["ceiling"], "cost");
    assert_eq!(shutdown["spent_usd"], 1.0, "a loop's spend is counted once");
}

// RFC-0002:C-REVISE-LOOP: a passing round commits to the run's git memory, one commit per passing
// round of a shared task.
#[test]
fn passing_rounds_commit() {
    let p = looped("", 3);
    p.file("pass_at", "2");
    assert_eq!(p.run(&[]).code, 0);
    let out = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(p.workspace())
        .output()
        .unwrap();
    let log = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.contains("draft")).count(),
        2,
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(p.workspace().join("draft.txt")).unwrap(),
        "round 1\nround 2\n"
    );
}

/// `star` with the command agent backend running `$PACK/agent.py`, which records each turn's
/// session id and prompt under `out/turn-N.txt` and answers `{"turn": N}` at $0.25 a turn.
fn with_agent(src: &str) -> Pack {
    let p = star(src);
    p.file(
        "agent.py",
        r#"import json, os
out = os.path.join(os.environ["PACK"], "out")
os.makedirs(out, exist_ok=True)
n = len([f for f in os.listdir(out) if f.startswith("turn-")]) + 1
with open(os.path.join(out, "turn-%d.txt" % n), "w") as f:
    f.write(os.environ.get("CRUCIBLE_AGENT_SESSION_ID", "") + "\n" + os.environ["CRUCIBLE_PROMPT"])
json.dump({"turn": n, "cost_usd": 0.25}, open("PLAN_TASK_RESULT.json", "w"))
"#,
    );
    std::fs::write(
        p.path().join("crucible.toml"),
        format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nbackend = \"command\"\nagent_cmd = \"python3 $PACK/agent.py\"\n{}",
            crate::support::observed_tables()
        ),
    )
    .unwrap();
    p
}

// RFC-0002:C-REVISE-LOOP: an agent target sees `revision` in its prompt as JSON under the key
// "revision" from round 2 on, and a body task in a session resumes that session every round.
// Each round's row carries that round's spend; the row under the task's own name sums them.
#[test]
fn agent_target_sees_revision_and_resumes_its_session() {
    let p = with_agent(
        r#"s = session(name = "writer")
draft = agent(name = "draft", prompt = "write it", session = s)
review = command(name = "review", run = "python3 -c 'import json,os,sys; i=json.load(open(os.environ[\"CRUCIBLE_INPUTS_FILE\"])); print(\"{}\"); sys.exit(0 if i[\"draft\"][\"turn\"] >= 2 else 1)'", depends_on = [draft], revise = [draft], max_rounds = 2)
workflow([draft, review])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let read =
        |n: u32| std::fs::read_to_string(p.probe().join(format!("out/turn-{n}.txt"))).unwrap();
    let (one, two) = (read(1), read(2));
    let session = |t: &str| t.lines().next().unwrap().to_string();
    assert!(!session(&one).is_empty());
    assert_eq!(session(&one), session(&two), "the same session both rounds");
    assert!(!one.contains("\"revision\""));
    assert!(two.contains("\"revision\": {"), "{two}");
    assert!(two.contains("\"reviewer\": \"review\""), "{two}");
    assert_eq!(
        p.row("draft")["output"],
        json!({"turn": 2, "cost_usd": 0.25})
    );
    for round in ["draft[round-1]", "draft[round-2]"] {
        assert_eq!(p.row(round)["cost_usd"], 0.25, "{round}");
    }
    let draft = p.row("draft");
    assert_eq!(
        (draft["cost_usd"].as_f64(), draft["attempts"].as_u64()),
        (Some(0.5), Some(2))
    );
    assert_eq!(p.shutdown()["spent_usd"], 0.5);
}

// RFC-0002:C-REVISE-LOOP, C-PLAYBOOK-CAPS: a body task that cannot run on the substrate makes the
// body run as ordinary tasks: the reviewer is skipped, the draft runs once under its own name and
// no round rows are written.
#[test]
fn a_body_that_cannot_run_runs_as_ordinary_tasks() {
    let p = star(
        r#"draft = command(name = "draft", run = "echo {}")
review = command(name = "review", run = "echo {}", depends_on = [draft], revise = [draft], max_rounds = 2, needs = "gpu", required = False)
workflow([draft, review])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // The capability skip settles at admission, before anything is dispatched.
    assert_eq!(row_names(&p), ["review", "draft"]);
    assert_eq!(p.row("draft")["status"], "pass");
    assert_eq!(p.row("review")["status"], "skipped");
}

// RFC-0002:C-REVISE-LOOP, C-PLAYBOOK-BUDGET: the wall-clock ceiling falling during a round kills
// the attempt in flight; every body task not dispatched for that round settles blocked on the
// ceiling and the loop ends. (The ceiling has to pass in real time: the draft outlives it.)
#[test]
fn wall_clock_ceiling_within_a_round() {
    let p = star(
        r#"draft = command(name = "draft", run = "sleep 30")
review = command(name = "review", run = "echo {}", depends_on = [draft], revise = [draft], max_rounds = 3)
workflow([draft, review])
"#,
    );
    assert_eq!(p.run(&["--max-time", "1s"]).code, 3);
    assert_eq!(
        row_names(&p),
        ["draft[round-1]", "review[round-1]", "draft", "review"]
    );
    assert_eq!(p.row("draft[round-1]")["status"], "fail");
    assert_eq!(
        p.row("review[round-1]")["blocked"],
        json!({"reason": "wall_clock_ceiling"})
    );
    assert_eq!(p.row("review")["blocked"]["reason"], "wall_clock_ceiling");
    let shutdown = p.shutdown();
    assert_eq!(shutdown["outcome"], "budget");
    assert_eq!(shutdown["ceiling"], "wall_clock");
}

// RFC-0002:C-REVISE-LOOP: the admitted-plan event carries a reviewer's targets under "revise",
// a string for one and a list in order for several, and its bound under "max_rounds"; every
// other task carries "" and 0.
#[test]
fn the_admitted_plan_carries_revise_and_max_rounds() {
    let p = star(
        r#"a = command(name = "a", run = "echo '{}'")
one = command(name = "one", run = "echo '{}'", depends_on = [a], revise = [a], max_rounds = 3)
b = command(name = "b", run = "echo '{}'")
c = command(name = "c", run = "echo '{}'")
two = command(name = "two", run = "echo '{}'", depends_on = [c, b], revise = [c, b], max_rounds = 2)
workflow([a, one, b, c, two])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let admitted = p
        .log()
        .into_iter()
        .find(|l| l["kind"] == "plan_admitted")
        .expect("a plan_admitted line");
    let carried: Vec<(String, serde_json::Value, u64)> = admitted["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["revise"].clone(),
                t["max_rounds"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        carried,
        vec![
            ("a".into(), json!(""), 0),
            ("one".into(), json!("a"), 3),
            ("b".into(), json!(""), 0),
            ("c".into(), json!(""), 0),
            ("two".into(), json!(["c", "b"]), 2),
        ]
    );
}
