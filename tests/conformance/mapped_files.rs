//! RFC-0002:C-TASK-FILES and C-SETTLED-JOIN for a mapped producer, through the real binary:
//! each instance's declared files are captured under its node's name with the key escaped,
//! staged under that directory, and flagged per instance; the key stays raw everywhere else.

use crate::fanout::star;
use crate::support::Pack;
use serde_json::json;
use std::path::PathBuf;

fn run_dir(p: &Pack) -> PathBuf {
    let current = std::fs::read_to_string(p.state().join("current")).expect("a run");
    p.state().join("runs").join(current.trim())
}

/// `$PACK/each.py`: writes its raw `item` into `out.txt` (declared) and prints it; an item
/// starting with `bad` exits 1 after writing, so its set is a failing attempt's.
/// `$PACK/look.py`: saves its inputs and what `inputs/` holds (`dir/file: content`) under
/// `$PACK/out/<task>.{json,ls}`.
fn mapped_pack(graph: &str, items: serde_json::Value) -> Pack {
    let p = star(graph);
    p.file("src.json", &json!({ "items": items }).to_string());
    p.file(
        "each.py",
        r#"import json, os, sys
item = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))["item"]
open("out.txt", "w").write(item)
print(json.dumps({"wrote": item}))
sys.exit(1 if item.startswith("bad") else 0)
"#,
    );
    p.file(
        "look.py",
        r#"import json, os
task = os.environ["CRUCIBLE_TASK"]
out = os.path.join(os.environ["PACK"], "out")
os.makedirs(out, exist_ok=True)
json.dump(json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"])), open(os.path.join(out, task + ".json"), "w"))
lines = []
if os.path.isdir("inputs"):
    for d in sorted(os.listdir("inputs")):
        for f in sorted(os.listdir(os.path.join("inputs", d))):
            lines.append("%s/%s: %s" % (d, f, open(os.path.join("inputs", d, f)).read()))
open(os.path.join(out, task + ".ls"), "w").write("\n".join(lines))
print("{}")
"#,
    );
    p
}

fn listed(p: &Pack, task: &str) -> Vec<String> {
    std::fs::read_to_string(p.probe().join("out").join(format!("{task}.ls")))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn saved(p: &Pack, task: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(p.probe().join("out").join(format!("{task}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

// RFC-0002:C-TASK-FILES: keys holding `/`, `\`, `%` and a leading `.` each get one directory,
// escaped as %2F, %5C, %25 and %2E, and `a/b` and `a%2Fb`, which would collide without escaping,
// land apart; the key stays raw in row names, in the instance's `item` and in per_instance.
// RFC-0002:C-SETTLED-JOIN: each instance is staged under its own name into every descendant,
// transitively, and the node's row `files` flag says some instance's set was published.
#[test]
fn instance_sets_land_in_escaped_directories_and_reach_descendants() {
    let p = mapped_pack(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
each = command(name = "each", run = "python3 $PACK/each.py", depends_on = [src], over = src.items, max_fanout = 8, emits_files = ["out.txt"])
use = command(name = "use", run = "python3 $PACK/look.py", depends_on = [each])
late = command(name = "late", run = "python3 $PACK/look.py", depends_on = [use])
judge = command(name = "judge", run = "python3 $PACK/look.py", depends_on = [each], join = "settled")
workflow([src, each, use, late, judge])
"#,
        json!(["a/b", "a%2Fb", "back\\slash", ".hidden", "plain"]),
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    let dirs = [
        ("a/b", "each[a%2Fb]"),
        ("a%2Fb", "each[a%252Fb]"),
        ("back\\slash", "each[back%5Cslash]"),
        (".hidden", "each[%2Ehidden]"),
        ("plain", "each[plain]"),
    ];
    let files = run_dir(&p).join("files");
    for (key, dir) in dirs {
        let row = p.row(&format!("each[{key}]"));
        assert_eq!(row["status"], "pass", "{row}");
        assert_eq!(row["files"], true, "{row}");
        assert_eq!(row["output"], json!({ "wrote": key }), "the item is raw");
        let captured = std::fs::read_to_string(files.join(dir).join("out.txt")).unwrap();
        assert_eq!(captured, key, "{dir} holds its own instance's file");
    }
    assert!(
        !files.join("each").exists(),
        "no set under the node's bare name"
    );
    assert!(
        !files.join("each[a").exists(),
        "a separator never nests a directory"
    );
    assert_eq!(p.row("each")["files"], true);

    let mut want: Vec<String> = dirs
        .iter()
        .map(|(key, dir)| format!("{dir}/out.txt: {key}"))
        .collect();
    want.sort();
    assert_eq!(listed(&p, "use"), want, "a direct dependent");
    assert_eq!(listed(&p, "late"), want, "a descendant two hops down");
    assert_eq!(listed(&p, "judge"), want);

    let entry = &saved(&p, "judge")["each"];
    assert_eq!(entry["files"], true);
    for (key, _) in dirs {
        assert_eq!(entry["per_instance"][key]["files"], true, "{entry}");
        assert_eq!(entry["per_instance"][key]["status"], "pass");
    }
}

// RFC-0002:C-SETTLED-JOIN: a failed instance's set is captured but staged only into a settled
// join on the node and into the epilogue, never into a `passed` dependent or a descendant; the
// per-instance flags say which instance's set each consumer received.
#[test]
fn failed_instance_sets_reach_only_settled_joins_and_the_epilogue() {
    let p = mapped_pack(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
each = command(name = "each", run = "python3 $PACK/each.py", depends_on = [src], over = src.items, max_fanout = 8, emits_files = ["out.txt"], required = False)
use = command(name = "use", run = "python3 $PACK/look.py", depends_on = [each], join = "passed", required = False)
late = command(name = "late", run = "python3 $PACK/look.py", depends_on = [use], required = False)
judge = command(name = "judge", run = "python3 $PACK/look.py", depends_on = [each], join = "settled", required = False)
epi = command(name = "epi", run = "python3 $PACK/look.py", stage = "epilogue", required = False)
workflow([src, each, use, late, judge, epi])
"#,
        json!(["ok", "bad/x"]),
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(p.row("each")["status"], "fail");
    assert_eq!(p.row("each[bad/x]")["status"], "fail");
    assert_eq!(
        p.row("each[bad/x]")["files"],
        true,
        "a failing attempt's set"
    );
    let both = vec![
        "each[bad%2Fx]/out.txt: bad/x".to_string(),
        "each[ok]/out.txt: ok".to_string(),
    ];
    let passing = vec!["each[ok]/out.txt: ok".to_string()];
    assert_eq!(listed(&p, "use"), passing);
    assert_eq!(listed(&p, "late"), passing);
    assert_eq!(listed(&p, "judge"), both);
    assert_eq!(listed(&p, "epi"), both);

    let entry = &saved(&p, "judge")["each"];
    assert_eq!(entry["files"], true);
    assert_eq!(entry["per_instance"]["ok"]["files"], true);
    assert_eq!(entry["per_instance"]["bad/x"]["files"], true);
    assert_eq!(entry["per_instance"]["bad/x"]["status"], "fail");
    let outcome = &saved(&p, "epi")["outcome"]["tasks"]["each"];
    assert_eq!(outcome["per_instance"]["bad/x"]["files"], true, "{outcome}");
    assert_eq!(outcome["per_instance"]["ok"]["files"], true);
}

// RFC-0002:C-SETTLED-JOIN: an instance that published no set (it declared a file and did not
// write it) is flagged false in per_instance while its sibling's is true; the node's flag says
// at least one instance's set was published.
#[test]
fn per_instance_flags_follow_each_instances_own_set() {
    let p = mapped_pack(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
each = command(name = "each", run = "python3 $PACK/each.py", depends_on = [src], over = src.items, max_fanout = 8, emits_files = ["out.txt", "extra.txt"], required = False)
judge = command(name = "judge", run = "python3 $PACK/look.py", depends_on = [each], join = "settled", required = False)
workflow([src, each, judge])
"#,
        json!(["x", "y"]),
    );
    // `extra.txt` appears only for `y`: `x` passes without it, a measured failure with no set.
    p.file(
        "each.py",
        r#"import json, os
item = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))["item"]
open("out.txt", "w").write(item)
if item == "y":
    open("extra.txt", "w").write("e")
print("{}")
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(p.row("each[x]")["status"], "fail");
    assert_eq!(p.row("each[x]")["files"], false);
    assert_eq!(p.row("each[y]")["files"], true);
    assert_eq!(p.row("each")["files"], true);
    assert!(!run_dir(&p).join("files/each[x]").exists());
    let entry = &saved(&p, "judge")["each"];
    assert_eq!(entry["per_instance"]["x"]["files"], false, "{entry}");
    assert_eq!(entry["per_instance"]["y"]["files"], true, "{entry}");
    assert_eq!(
        listed(&p, "judge"),
        ["each[y]/extra.txt: e", "each[y]/out.txt: y"]
    );
}

// RFC-0002:C-TASK-FILES: isolated instances running in parallel lanes each capture from their
// own worktree into their own directory, and the captured sets are staged for a dependent even
// though isolation discarded the worktrees.
#[test]
fn isolated_instances_capture_in_parallel_into_their_own_directories() {
    let p = mapped_pack(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
each = command(name = "each", run = "python3 $PACK/each.py", depends_on = [src], over = src.items, max_fanout = 8, emits_files = ["out.txt"], isolated = True)
use = command(name = "use", run = "python3 $PACK/look.py", depends_on = [each])
workflow([src, each, use])
"#,
        json!(["p/1", "p/2", "p%3"]),
    );
    let r = p.run(&["--jobs", "3"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        listed(&p, "use"),
        [
            "each[p%253]/out.txt: p%3",
            "each[p%2F1]/out.txt: p/1",
            "each[p%2F2]/out.txt: p/2",
        ]
    );
}

// RFC-0002:C-SETTLED-JOIN: a mapped task joining "settled" is itself a consumer: each instance
// is staged with a failed dependency's set and its entry's `files` flag says so.
#[test]
fn a_settled_mapped_consumer_gets_a_failed_set_in_every_instance() {
    let p = mapped_pack(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
broken = command(name = "broken", run = "printf b > b.txt; exit 1", emits_files = ["b.txt"], required = False)
each = command(name = "each", run = "python3 $PACK/look.py", depends_on = [src, broken], over = src.items, max_fanout = 4, join = "settled", required = False)
workflow([src, broken, each])
"#,
        json!(["k1", "k2"]),
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for key in ["k1", "k2"] {
        let name = format!("each[{key}]");
        assert_eq!(listed(&p, &name), ["broken/b.txt: b"]);
        let inputs = saved(&p, &name);
        assert_eq!(inputs["broken"]["status"], "fail");
        assert_eq!(inputs["broken"]["files"], true, "{inputs}");
        assert_eq!(inputs["item"], key);
    }
}
