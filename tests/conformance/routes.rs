//! Routes and `when` through the real binary (RFC-0001-NOTES §5; RFC-0002:C-SETTLED-JOIN route
//! and `when` parts, C-PLAYBOOK-CAPS for model-decided routes).

use crate::fanout::{row_names, star};
use crate::support::Pack;
use serde_json::json;

/// `judge` emits `answers.json` from the pack; `gate` routes on it.
fn routed(answers: serde_json::Value, rest: &str) -> Pack {
    let p = star(&format!(
        r#"judge = command(name = "judge", run = "cat $PACK/answers.json", emits = ["ok", "size", "grade", "kinds"])
{rest}
"#
    ));
    p.file("answers.json", &answers.to_string());
    p
}

fn not_taken(p: &Pack, task: &str) {
    let r = p.row(task);
    assert_eq!(r["status"], "not_taken", "{task}: {r}");
    assert_eq!(r["attempts"], 0, "{task}: no dispatch");
    assert_eq!(r["cost_usd"], 0.0, "{task}: no spend");
    assert!(!p.has_row(&format!("{task}[round-1]")));
}

const GATE: &str = r#"gate = route(name = "gate", depends_on = [judge], source = judge, questions = {
    "ok": noul(ask = "fine?"),
    "size": choice(options = ["small", "large"]),
    "grade": score(levels = {"poor": None, "fair": None, "good": "ready"}),
})"#;

// RFC-0001-NOTES §5: a source answers each question kind with probability 1, in the exact
// {label, confidence, probabilities} shape, a score question adding its score in [0, 1].
#[test]
fn each_question_kind_from_a_source() {
    let p = routed(
        json!({"ok": false, "size": "large", "grade": "fair", "kinds": []}),
        &format!(
            r#"{GATE}
yes = command(name = "yes", run = "echo {{}}", depends_on = [gate], when = gate.ok, answers = "yes")
no = command(name = "no", run = "echo {{}}", depends_on = [gate], when = gate.ok, answers = ["no", "uncertain"])
big = command(name = "big", run = "echo {{}}", depends_on = [gate], when = gate.size, answers = ["large"])
small = command(name = "small", run = "echo {{}}", depends_on = [gate], when = gate.size, otherwise = True)
good = command(name = "good", run = "echo {{}}", depends_on = [gate], when = gate.grade, answers = ["good"])
meh = command(name = "meh", run = "echo {{}}", depends_on = [gate], when = gate.grade, otherwise = True)
workflow([judge, gate, yes, no, big, small, good, meh])"#
        ),
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let gate = p.row("gate");
    assert_eq!(gate["status"], "pass");
    assert_eq!(
        gate["output"],
        json!({
            "ok": {"label": "no", "confidence": 1.0, "probabilities": {"no": 1.0}},
            "size": {"label": "large", "confidence": 1.0, "probabilities": {"large": 1.0}},
            "grade": {"label": "fair", "confidence": 1.0, "probabilities": {"fair": 1.0}, "score": 0.5, "asked_as": "score"},
        })
    );
    for ran in ["no", "big", "meh"] {
        assert_eq!(p.row(ran)["status"], "pass", "{ran}");
    }
    for skipped in ["yes", "small", "good"] {
        not_taken(&p, skipped);
    }
    assert_eq!(p.shutdown()["verdict"], "valid");
}

// RFC-0001-NOTES §5: any value other than a declared label (or a boolean for a noul) fails the
// route naming the question.
#[test]
fn a_source_value_that_is_no_label_fails_the_route() {
    let p = routed(
        json!({"ok": "maybe", "size": "large", "grade": "fair", "kinds": []}),
        &format!(
            r#"{GATE}
yes = command(name = "yes", run = "echo {{}}", depends_on = [gate], when = gate.ok, otherwise = True)
workflow([judge, gate, yes])"#
        ),
    );
    assert_eq!(p.run(&[]).code, 3);
    let gate = p.row("gate");
    assert_eq!(gate["status"], "fail");
    assert_eq!(
        gate["note"],
        "question `ok`: \"maybe\" is not one of its labels"
    );
}

// DSL `otherwise`, `drop`: an answer a question drops leads nowhere: every branch is not taken,
// and `otherwise` stands for the answers no other task lists.
#[test]
fn otherwise_and_drop() {
    let rest = r#"gate = route(name = "gate", depends_on = [judge], source = judge, questions = {
    "ok": noul(drop = "no"),
    "size": choice(options = ["small", "large"]),
})
fine = command(name = "fine", run = "echo {}", depends_on = [gate], when = gate.ok, answers = "yes")
unsure = command(name = "unsure", run = "echo {}", depends_on = [gate], when = gate.ok, answers = "uncertain")
small = command(name = "small", run = "echo {}", depends_on = [gate], when = gate.size, answers = "small")
rest = command(name = "rest", run = "echo {}", depends_on = [gate], when = gate.size, otherwise = True)
workflow([judge, gate, fine, unsure, small, rest])"#;
    let p = routed(
        json!({"ok": false, "size": "uncertain", "grade": "poor", "kinds": []}),
        rest,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    not_taken(&p, "fine");
    not_taken(&p, "unsure");
    not_taken(&p, "small");
    assert_eq!(
        p.row("rest")["status"],
        "pass",
        "otherwise covers uncertain"
    );
    assert_eq!(
        p.row("gate")["output"]["size"],
        json!({"label": "uncertain", "confidence": 0.0, "probabilities": {}})
    );
}

// RFC-0002:C-SETTLED-JOIN: an all-join chain below a branch not taken goes not_taken with it,
// with no dispatch and no spend; `optional(...)` lets a dependent run without it; `passed` and
// `settled` joins rejoin the branches; not_taken never affects the verdict.
#[test]
fn not_taken_chain_optional_and_rejoin() {
    let rest = format!(
        r#"{GATE}
left = command(name = "left", run = "echo '{{\"side\": \"left\"}}'", depends_on = [gate], when = gate.size, answers = "small")
left2 = command(name = "left2", run = "echo {{}}", depends_on = [left])
left3 = agent(name = "left3", prompt = "go", depends_on = [left2])
right = command(name = "right", run = "echo '{{\"side\": \"right\"}}'", depends_on = [gate], when = gate.size, otherwise = True)
opt = command(name = "opt", run = "python3 $PACK/save.py", depends_on = [right, optional(left)])
passed = command(name = "passed", run = "python3 $PACK/save.py", depends_on = [left, right], join = "passed")
settled = command(name = "settled", run = "python3 $PACK/save.py", depends_on = [left2, right], join = "settled")
workflow([judge, gate, left, left2, left3, right, opt, passed, settled])"#
    );
    let p = routed(
        json!({"ok": true, "size": "large", "grade": "good", "kinds": []}),
        &rest,
    );
    // left3 is an agent: the chain going not_taken must not need a backend run or any spend.
    std::fs::write(
        p.path().join("crucible.toml"),
        format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nbackend = \"command\"\nagent_cmd = \"false\"\n{}",
            crate::support::observed_tables()
        ),
    )
    .unwrap();
    let r = p.run(&["--max-cost", "0"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for t in ["left", "left2", "left3"] {
        not_taken(&p, t);
    }
    assert_eq!(p.row("right")["status"], "pass");
    assert_eq!(
        p.saved("opt"),
        json!({"right": {"side": "right"}, "params": {}})
    );
    assert_eq!(
        p.saved("passed"),
        json!({"right": {"side": "right"}, "params": {}})
    );
    assert_eq!(
        p.saved("settled"),
        json!({
            "left2": {"status": "not_taken", "note": null, "output": null, "files": false},
            "right": {"status": "pass", "note": null, "output": {"side": "right"}, "files": false},
            "params": {}
        })
    );
    let shutdown = p.shutdown();
    assert_eq!(shutdown["verdict"], "valid");
    assert_eq!(shutdown["outcome"], "finished");
    // Independent branches settle in whichever order their rows become durable.
    let mut names = row_names(&p);
    names.sort();
    assert_eq!(
        names,
        ["gate", "judge", "left", "left2", "left3", "opt", "passed", "right", "settled"]
    );
}

const MODEL: &str = r#"judge = command(name = "judge", run = "echo {}")
model = route(name = "model", depends_on = [judge], min_confidence = 0.7, questions = {"ok": noul()}, required = False)
go = command(name = "go", run = "echo {}", depends_on = [model], when = model.ok, answers = "yes", required = False)
stay = command(name = "stay", run = "echo {}", depends_on = [model], when = model.ok, otherwise = True, required = False)
workflow([judge, model, go, stay])
"#;

// RFC-0002:C-PLAYBOOK-CAPS: a model-decided route needs the `decision` capability; without it
// an advisory route is skipped with its dependents and the verdict stands.
#[test]
fn model_route_without_decision_is_skipped() {
    let p = star(MODEL);
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for t in ["model", "go", "stay"] {
        assert_eq!(p.row(t)["status"], "skipped", "{t}");
    }
    assert_eq!(p.shutdown()["verdict"], "valid");
}

// A required model-decided route without `decision` truncates the plan (RFC-0002:C-PLAYBOOK-CAPS);
// with `decision` but no decision binding to ask, it is refused before dispatch.
#[test]
fn model_route_truncates_or_is_refused() {
    let p = star(&MODEL.replace(", required = False", ""));
    assert_eq!(p.run(&[]).code, 3);
    assert_eq!(p.row("model")["status"], "truncated");
    let r = p.run(&["--cap", "decision"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("no decision binding"), "{}", r.stderr);
}

// RFC-0001 notes §5 (C-ROUTE-EACH): a route mapped over a list decides each item on its own,
// here from its source's keyed field narrowed to the item; a task mapped over the same list
// reads each item's answer with `when`, and the route node passes when every item was decided.
#[test]
fn a_mapped_route_decides_each_item_and_when_follows_per_item() {
    let p = star(
        r#"src = command(name = "src", run = "echo '{\"items\": [\"a\", \"b/x\", \"c\"]}'", emits = {"items": "list"})
judge = command(name = "judge", run = "echo '{\"ok\": {\"a\": true, \"b/x\": false, \"c\": true}}'", emits = ["ok"])
gate = route(name = "gate", depends_on = [src, judge], over = src.items, max_fanout = 8,
    keyed = [judge.ok], source = judge, questions = {"ok": noul(drop = ["no", "uncertain"])})
fix = command(name = "fix", run = "python3 $PACK/save.py", depends_on = [src, gate],
    over = src.items, max_fanout = 8, when = gate.ok, answers = "yes")
workflow([src, judge, gate, fix])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for (key, label) in [("a", "yes"), ("b/x", "no"), ("c", "yes")] {
        let row = p.row(&format!("gate[{key}]"));
        assert_eq!(row["status"], "pass", "{row}");
        assert_eq!(row["output"]["ok"]["label"], label, "{row}");
    }
    let gate = p.row("gate");
    assert_eq!(gate["status"], "pass");
    assert_eq!(gate["output"]["b/x"]["ok"]["label"], "no");
    assert_eq!(p.row("fix[a]")["status"], "pass");
    not_taken(&p, "fix[b/x]");
    assert_eq!(p.row("fix[c]")["status"], "pass");
    assert_eq!(p.row("fix")["status"], "pass");
}
