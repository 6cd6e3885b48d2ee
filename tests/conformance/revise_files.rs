//! Declared files in revise loops through the real binary (RFC-0002:C-REVISE-LOOP with
//! C-TASK-FILES and C-SETTLED-JOIN): the reviewer's failing round's set staged into each target
//! under the reviewer's name, the `revision.review.files` flag, each round's set replacing the
//! last, and dependents of body tasks reading the last round's set.

use crate::fanout::star;
use crate::support::Pack;
use serde_json::{json, Value};
use std::path::PathBuf;

fn run_dir(p: &Pack) -> PathBuf {
    let current = std::fs::read_to_string(p.state().join("current")).expect("a run");
    p.state().join("runs").join(current.trim())
}

/// `plan → draft → review (revise = [draft]) → after (settled)`. `draft` writes `draft.md`
/// naming its round; `review` writes `review.md` naming its round (in the rounds listed in
/// `$PACK/review_writes`, every round without it) and passes from round `$PACK/pass_at`. Each
/// task saves its inputs and what `inputs/` held as `$PACK/out/<task>-<round>.{json,ls}`.
fn looped(max_rounds: u32) -> Pack {
    let p = star(&format!(
        r#"plan = command(name = "plan", run = "echo '{{}}'")
draft = command(name = "draft", run = "python3 $PACK/body.py draft", depends_on = [plan], emits_files = ["draft.md"])
review = command(name = "review", run = "python3 $PACK/body.py review", depends_on = [draft], emits_files = ["review.md"], revise = [draft], max_rounds = {max_rounds}, required = False)
after = command(name = "after", run = "python3 $PACK/body.py after", depends_on = [draft, review], join = "settled", required = False)
workflow([plan, draft, review, after])
"#
    ));
    p.file(
        "body.py",
        r#"import json, os, sys
me = sys.argv[1]
pack = os.environ["PACK"]
inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
count = os.path.join(pack, me + ".count")
rnd = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(rnd))
out = os.path.join(pack, "out")
os.makedirs(out, exist_ok=True)
json.dump(inputs, open(os.path.join(out, "%s-%d.json" % (me, rnd)), "w"))
lines = []
if os.path.isdir("inputs"):
    for d in sorted(os.listdir("inputs")):
        for f in sorted(os.listdir(os.path.join("inputs", d))):
            lines.append("%s/%s: %s" % (d, f, open(os.path.join("inputs", d, f)).read()))
open(os.path.join(out, "%s-%d.ls" % (me, rnd)), "w").write("\n".join(lines))
if me == "draft":
    open("draft.md", "w").write("draft %d" % rnd)
if me == "review":
    writes = os.path.join(pack, "review_writes")
    if not os.path.exists(writes) or str(rnd) in open(writes).read().split():
        open("review.md", "w").write("review %d" % rnd)
    try:
        need = int(open(os.path.join(pack, "pass_at")).read())
    except OSError:
        need = 99
    print("{}")
    sys.exit(0 if rnd >= need else 1)
print("{}")
"#,
    );
    p
}

fn listed(p: &Pack, name: &str) -> Vec<String> {
    std::fs::read_to_string(p.probe().join("out").join(format!("{name}.ls")))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn saved(p: &Pack, name: &str) -> Value {
    let text = std::fs::read_to_string(p.probe().join("out").join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn published(p: &Pack, task: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(run_dir(p).join("files").join(task).join(file)).ok()
}

// RFC-0002:C-REVISE-LOOP: from round 2 the target is staged with the reviewer's failing round's
// set under `inputs/review/` and `revision.review.files` says so; round 1 has neither. Within a
// round the reviewer reads this round's draft set, each round's capture replaces the last, and
// a dependent of the body reads the last round's sets.
#[test]
fn reviewer_failing_set_reaches_the_target_from_round_two() {
    let p = looped(3);
    p.file("pass_at", "2");
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    assert_eq!(listed(&p, "draft-1"), Vec::<String>::new());
    assert!(saved(&p, "draft-1").get("revision").is_none());
    assert_eq!(listed(&p, "review-1"), ["draft/draft.md: draft 1"]);

    assert_eq!(
        listed(&p, "draft-2"),
        ["review/review.md: review 1"],
        "the reviewer's failing round's set, under the reviewer's name"
    );
    let rev = &saved(&p, "draft-2")["revision"];
    assert_eq!(rev["round"], 2);
    assert_eq!(rev["reviewer"], "review");
    assert_eq!(rev["review"]["status"], "fail");
    assert_eq!(rev["review"]["files"], true, "{rev}");
    assert_eq!(
        listed(&p, "review-2"),
        ["draft/draft.md: draft 2"],
        "this round's draft set replaced round 1's"
    );
    assert!(saved(&p, "review-2").get("revision").is_none());

    assert_eq!(p.row("draft[round-1]")["files"], true);
    assert_eq!(p.row("review[round-1]")["files"], true);
    assert_eq!(p.row("draft")["files"], true);
    assert_eq!(p.row("review")["status"], "pass");
    assert_eq!(
        published(&p, "draft", "draft.md").as_deref(),
        Some("draft 2")
    );
    assert_eq!(
        published(&p, "review", "review.md").as_deref(),
        Some("review 2")
    );
    assert_eq!(
        listed(&p, "after-1"),
        ["draft/draft.md: draft 2", "review/review.md: review 2"],
        "a dependent of body tasks reads the last round's sets"
    );
    let after = saved(&p, "after-1");
    assert_eq!(after["draft"]["files"], true);
    assert_eq!(after["review"]["files"], true);
}

// RFC-0002:C-REVISE-LOOP: a reviewer round that failed without writing its declared file
// publishes no set and removes round 1's, so the next round's target is staged with nothing
// from the reviewer and its `revision.review.files` is false; the loop's final rows say no set.
#[test]
fn a_reviewer_round_without_a_set_replaces_the_earlier_set_with_none() {
    let p = looped(3);
    p.file("review_writes", "1");
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    assert_eq!(listed(&p, "draft-2"), ["review/review.md: review 1"]);
    assert_eq!(saved(&p, "draft-2")["revision"]["review"]["files"], true);

    assert_eq!(p.row("review[round-2]")["status"], "fail");
    assert_eq!(p.row("review[round-2]")["files"], false);
    assert_eq!(listed(&p, "draft-3"), Vec::<String>::new());
    let rev = &saved(&p, "draft-3")["revision"];
    assert_eq!(rev["round"], 3);
    assert_eq!(rev["review"]["files"], false, "{rev}");

    assert_eq!(p.row("review")["status"], "fail");
    assert_eq!(p.row("review")["files"], false);
    assert_eq!(published(&p, "review", "review.md"), None);
    assert_eq!(
        published(&p, "draft", "draft.md").as_deref(),
        Some("draft 3")
    );
    assert_eq!(listed(&p, "after-1"), ["draft/draft.md: draft 3"]);
    let after = saved(&p, "after-1");
    assert_eq!(after["review"]["files"], false);
    assert_eq!(after["draft"]["files"], true);
    assert_eq!(after["review"]["status"], json!("fail"));
}
