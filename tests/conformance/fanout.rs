//! Fan-out (`over`, `max_fanout`, `keyed`) through the real binary: instances as lanes, one row
//! per instance, the folded node row and the entry consumers receive (RFC-0002:C-SETTLED-JOIN
//! mapping parts, C-PLAYBOOK-BUDGET lanes; RFC-0001-NOTES §5).

use crate::support::Pack;
use serde_json::{json, Value};

/// A pack whose graph is `workflow.star` with `src`, plus `$PACK/save.py`, which saves the
/// inputs under the task's name and prints `{"item": ...}` (failing when the inputs' `item` is
/// listed in its arguments).
pub fn star(src: &str) -> Pack {
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n");
    p.file("workflow.star", src);
    p.file(
        "save.py",
        r#"import json, os, sys
inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
out = os.path.join(os.environ["PACK"], "out")
os.makedirs(out, exist_ok=True)
json.dump(inputs, open(os.path.join(out, os.environ["CRUCIBLE_TASK"] + ".json"), "w"))
print(json.dumps({"item": inputs.get("item")}))
sys.exit(1 if inputs.get("item") in sys.argv[1:] else 0)
"#,
    );
    p
}

/// The names of every task_result row in log order.
pub fn row_names(p: &Pack) -> Vec<String> {
    p.log()
        .into_iter()
        .filter(|l| l["kind"] == "task_result")
        .map(|l| l["task"].as_str().unwrap().to_string())
        .collect()
}

/// A source emitting `items` and a mapped `each` over them, with a settled consumer `after`.
fn mapped(items: &Value, each_run: &str, extra: &str) -> Pack {
    let p = star(&format!(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {{"items": "list"}})
each = command(name = "each", run = "{each_run}", depends_on = [src], over = src.items, max_fanout = 256{extra})
after = command(name = "after", run = "python3 $PACK/save.py", depends_on = [each], join = "settled")
workflow([src, each, after])
"#
    ));
    p.file("src.json", &json!({"items": items}).to_string());
    p
}

// RFC-0002:C-SETTLED-JOIN: an empty fan-out passes with no instance rows and gives its consumer
// an entry whose per_instance is present and empty.
#[test]
fn empty_fanout_passes_with_empty_per_instance() {
    let p = mapped(&json!([]), "echo {}", "");
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(row_names(&p), ["src", "each", "after"]);
    let each = p.row("each");
    assert_eq!(each["status"], "pass");
    assert_eq!(each["output"], json!({}));
    assert_eq!(each["attempts"], 0);
    assert_eq!(
        p.saved("after")["each"],
        json!({"status": "pass", "note": null, "output": {}, "files": false, "per_instance": {}})
    );
}

// RFC-0002:C-SETTLED-JOIN: one instance named `node[key]` with the raw key, its row, and the
// node row folding it.
#[test]
fn one_item_fanout_names_its_instance_with_the_raw_key() {
    let p = mapped(&json!(["a.b c"]), "python3 $PACK/save.py", "");
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(row_names(&p), ["src", "each[a.b c]", "each", "after"]);
    assert_eq!(p.row("each[a.b c]")["status"], "pass");
    let each = p.row("each");
    assert_eq!(each["status"], "pass");
    assert_eq!(each["output"], json!({"a.b c": {"item": "a.b c"}}));
    let entry = &p.saved("after")["each"];
    assert_eq!(
        entry["per_instance"],
        json!({"a.b c": {"status": "pass", "note": null, "output": {"item": "a.b c"}, "files": false}})
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: 200 instances, each a lane of its own, each with a row; the node
// folds all of them.
#[test]
fn two_hundred_item_fanout() {
    let items: Vec<String> = (0..200).map(|i| format!("i{i:03}")).collect();
    let p = mapped(&json!(items), "echo {}", "");
    let r = p.run(&["--max-time", "5m"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let names = row_names(&p);
    assert_eq!(names.len(), 203);
    for (k, item) in items.iter().enumerate() {
        assert_eq!(names[k + 1], format!("each[{item}]"));
    }
    let each = p.row("each");
    assert_eq!(each["status"], "pass");
    assert_eq!(each["attempts"], 200);
    assert_eq!(each["output"].as_object().unwrap().len(), 200);
    let per = p.saved("after")["each"]["per_instance"].clone();
    assert_eq!(per.as_object().unwrap().len(), 200);
    assert!(per
        .as_object()
        .unwrap()
        .values()
        .all(|e| e["status"] == "pass"));
}

// RFC-0002:C-SETTLED-JOIN: more items than max_fanout fails the node naming both numbers, and
// no instance is dispatched.
#[test]
fn over_the_cap_fails_naming_both_numbers() {
    let p = mapped(&json!(["a", "b", "c", "d", "e"]), "echo {}", "");
    let star_src = std::fs::read_to_string(p.path().join("workflow.star")).unwrap();
    p.file(
        "workflow.star",
        &star_src.replace("max_fanout = 256", "max_fanout = 3"),
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "a required node failed: the verdict is invalid");
    assert_eq!(row_names(&p), ["src", "each", "after"]);
    let each = p.row("each");
    assert_eq!(each["status"], "fail");
    assert_eq!(
        each["note"],
        "source `src.items` holds 5 items, more than max_fanout 3"
    );
}

// RFC-0002:C-SETTLED-JOIN: a retained failure output is never a source list: mapping over a
// field of a task that did not pass fails naming the absent source.
#[test]
fn a_failed_source_is_absent() {
    let p = star(
        r#"src = command(name = "src", run = "echo '{\"items\": [\"a\"]}'; exit 4", emits = {"items": "list"}, required = False)
each = command(name = "each", run = "echo {}", depends_on = [src], over = src.items, max_fanout = 4, join = "settled", required = False)
workflow([src, each])
"#,
    );
    assert_eq!(p.run(&[]).code, 0);
    assert!(!p.has_row("each[a]"));
    let each = p.row("each");
    assert_eq!(each["status"], "fail");
    assert_eq!(
        each["note"],
        "source `src.items` is absent: `src` settled fail, not pass"
    );
}

// RFC-0002:C-SETTLED-JOIN: each instance receives `item` and only its own entry of a `keyed`
// field (null where the producer has none).
#[test]
fn keyed_inputs_give_each_instance_its_own_entry() {
    let p = star(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list", "notes": "object", "other": "integer"})
each = command(name = "each", run = "python3 $PACK/save.py", depends_on = [src], over = src.items, max_fanout = 2, keyed = [src.notes])
workflow([src, each])
"#,
    );
    let emitted = json!({"items": ["x", "y"], "notes": {"x": {"n": 1}, "z": 9}, "other": 5});
    p.file("src.json", &emitted.to_string());
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.saved("each[x]"),
        json!({"src": {"items": ["x", "y"], "notes": {"n": 1}, "other": 5}, "item": "x", "params": {}})
    );
    assert_eq!(
        p.saved("each[y]"),
        json!({"src": {"items": ["x", "y"], "notes": null, "other": 5}, "item": "y", "params": {}})
    );
}

// RFC-0002:C-SETTLED-JOIN: a failing instance fails the node; a `join = "passed"` consumer still
// runs on the fold and receives only the passing instances' outputs, by item.
#[test]
fn failing_instance_under_passed_join() {
    let p = star(
        r#"src = command(name = "src", run = "echo '{\"items\": [\"a\", \"b\", \"c\"]}'", emits = {"items": "list"})
each = command(name = "each", run = "python3 $PACK/save.py b", depends_on = [src], over = src.items, max_fanout = 3, required = False)
sum = command(name = "sum", run = "python3 $PACK/save.py", depends_on = [each], join = "passed")
workflow([src, each, sum])
"#,
    );
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        row_names(&p),
        ["src", "each[a]", "each[b]", "each[c]", "each", "sum"]
    );
    assert_eq!(p.row("each[b]")["status"], "fail");
    let each = p.row("each");
    assert_eq!(each["status"], "fail");
    assert_eq!(each["note"], "1 of 3 instances did not pass: \"b\" (fail)");
    assert_eq!(p.row("sum")["status"], "pass");
    assert_eq!(
        p.saved("sum"),
        json!({"each": {"a": {"item": "a"}, "c": {"item": "c"}}, "params": {}})
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: each lane is a dispatch of its own for the cost ceiling: once the
// spend reaches it, the remaining instances settle blocked on it without dispatch.
#[test]
fn lanes_are_admitted_one_at_a_time_under_the_cost_ceiling() {
    let p = star(
        r#"src = command(name = "src", run = "echo '{\"items\": [\"a\", \"b\", \"c\", \"d\"]}'", emits = {"items": "list"})
each = agent(name = "each", prompt = "look", depends_on = [src], over = src.items, max_fanout = 4)
workflow([src, each])
"#,
    );
    p.file(
        "agent.sh",
        "echo '{\"cost_usd\": 0.5}' > PLAN_TASK_RESULT.json\n",
    );
    std::fs::write(
        p.path().join("crucible.toml"),
        format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nbackend = \"command\"\nagent_cmd = \"sh $PACK/agent.sh\"\n{}",
            crate::support::observed_tables()
        ),
    )
    .unwrap();
    assert_eq!(p.run(&["--max-cost", "1"]).code, 3);
    assert_eq!(p.row("each[a]")["status"], "pass");
    assert_eq!(p.row("each[b]")["status"], "pass");
    for blocked in ["each[c]", "each[d]"] {
        let r = p.row(blocked);
        assert_eq!(r["status"], "blocked");
        assert_eq!(r["blocked"]["reason"], "budget_ceiling");
        assert_eq!(r["attempts"], 0);
    }
    let each = p.row("each");
    assert_eq!(each["status"], "fail");
    assert_eq!(each["cost_usd"], 1.0);
    let shutdown = p.shutdown();
    assert_eq!(shutdown["ceiling"], "cost");
    assert_eq!(shutdown["spent_usd"], 1.0);
}

// RFC-0002:C-SETTLED-JOIN: an epilogue's `outcome` entry for a mapped node carries
// `per_instance`.
#[test]
fn epilogue_outcome_carries_per_instance() {
    let p = mapped(&json!(["x"]), r#"echo '{\"ok\": 1}'"#, "");
    let src = std::fs::read_to_string(p.path().join("workflow.star")).unwrap();
    p.file(
        "workflow.star",
        &src.replace(
            "workflow([src, each, after])",
            "epi = command(name = \"epi\", run = \"python3 $PACK/save.py\", stage = \"epilogue\", required = False)\nworkflow([src, each, after, epi])",
        ),
    );
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.saved("epi")["outcome"]["tasks"]["each"],
        json!({
            "status": "pass", "note": null, "output": {"x": {"ok": 1}}, "files": false,
            "per_instance": {"x": {"status": "pass", "note": null, "output": {"ok": 1}, "files": false}}
        })
    );
}

// The DSL reference asks `over` only for a list: a field declared in list-form `emits` is
// untyped, so the snippet compiles and runs, and a value that is not a list of strings fails
// the consumer naming the field and what it held (issue 16).
#[test]
fn over_a_list_form_emits_field_is_checked_when_the_consumer_runs() {
    let src = |xs: &str| {
        format!(
            r#"scan = command(name = "scan", run = "echo '{{\"xs\": {xs}}}'", emits = ["xs"])
each = command(name = "each", run = "echo '{{}}'", depends_on = [scan], over = scan.xs, max_fanout = 4)
workflow(type = "playbook", tasks = [scan, each])
"#
        )
    };
    let p = star(&src(r#"[\"a\", \"b\"]"#));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("each")["status"], "pass");
    assert_eq!(p.row("each[b]")["status"], "pass");
    for (xs, note) in [
        (
            r#"\"a\""#,
            "source `scan.xs` is a string, not a list of strings",
        ),
        (
            r#"[\"a\", 3]"#,
            "source `scan.xs` item 1 is a number, not a string",
        ),
    ] {
        let p = star(&src(xs));
        let r = p.run(&[]);
        assert_eq!(r.code, 3, "{r:?}");
        assert_eq!(p.row("scan")["status"], "pass");
        assert_eq!(p.row("each")["status"], "fail");
        assert_eq!(p.row("each")["note"], note);
    }
}
