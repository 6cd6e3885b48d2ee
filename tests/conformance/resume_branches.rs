//! Resume across fan-out instances, revise-loop rounds and declared files
//! (RFC-0002:C-PLAYBOOK-RESUME, the resume parts of C-SETTLED-JOIN and C-REVISE-LOOP): each test
//! runs a playbook to its end, cuts the log right after one row (a crash that lost everything
//! later), resumes, and checks that nothing settled ran again and that the rest equals the
//! uninterrupted run. Then rerun (C-PLAYBOOK-RERUN) of mapped nodes and of captured files.

use crate::fanout::{row_names, star};
use crate::resume::{current, log_path};
use crate::revise::looped;
use crate::support::{command, save_inputs_then, Pack, Ran};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Keeps the current run's log up to and including the row of `last`: what a SIGKILL right
/// after that row reached the disk leaves.
pub fn cut_after(p: &Pack, last: &str) {
    let path = log_path(p, &current(p));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut kept = String::new();
    for l in text.lines() {
        kept.push_str(l);
        kept.push('\n');
        let v: Value = serde_json::from_str(l).unwrap();
        if v["kind"] == "task_result" && v["task"] == last {
            std::fs::write(&path, kept).unwrap();
            return;
        }
    }
    panic!("no row for {last}");
}

/// The names under the pack's `out/` (what ran and saved its inputs), emptied for the next run.
fn take_saved(p: &Pack) -> BTreeSet<String> {
    let out = p.probe().join("out");
    let names = std::fs::read_dir(&out)
        .map(|d| {
            d.map(|e| {
                let n = e.unwrap().file_name().to_string_lossy().into_owned();
                n.trim_end_matches(".json").to_string()
            })
            .collect()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&out);
    names
}

/// Every row's task, status and output (a resumed run's must equal the uninterrupted run's).
fn results(p: &Pack) -> Vec<(String, Value, Value)> {
    p.log()
        .into_iter()
        .filter(|l| l["kind"] == "task_result")
        .map(|l| {
            let t = l["task"].as_str().unwrap().to_string();
            (t, l["status"].clone(), l["output"].clone())
        })
        .collect()
}

fn sorted(mut v: Vec<(String, Value, Value)>) -> Vec<(String, Value, Value)> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// A three-item fan-out whose `b` instance fails, folded for a settled consumer.
fn fanout() -> Pack {
    let p = star(
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
each = command(name = "each", run = "python3 $PACK/save.py b", depends_on = [src], over = src.items, max_fanout = 4, required = False)
after = command(name = "after", run = "python3 $PACK/save.py", depends_on = [each], join = "settled")
workflow([src, each, after])
"#,
    );
    p.file("src.json", &json!({"items": ["a", "b", "c"]}).to_string());
    p
}

// RFC-0002:C-PLAYBOOK-RESUME, C-SETTLED-JOIN: an instance settled before the interruption is
// never dispatched again; the rest run, and the node folds the folded and the new instance rows
// into the same row and the same per_instance entry as an uninterrupted run.
#[test]
fn settled_instances_are_folded_not_dispatched_again() {
    let p = fanout();
    assert_eq!(p.run(&[]).code, 0);
    let want_after = p.saved("after");
    let want = sorted(results(&p));
    assert_eq!(take_saved(&p).len(), 4); // three instances and after; src only prints
    let first = row_names(&p)[1].clone();
    cut_after(&p, &first);

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // The summary counts the folded instance with the two that ran after the resume.
    assert!(r.stdout.contains("each fail instances=3 "), "{}", r.stdout);
    assert_eq!(p.saved("after"), want_after, "after reads the same fold");
    let ran = take_saved(&p);
    assert!(!ran.contains(&first), "{first} ran again: {ran:?}");
    assert_eq!(ran.len(), 3, "the two other instances and after: {ran:?}");
    assert_eq!(sorted(results(&p)), want);
    p.row("each");
    p.shutdown();
}

// RFC-0002:C-PLAYBOOK-RESUME, C-SETTLED-JOIN: a node folded from the log feeds its consumer the
// same entry, `per_instance` included, rebuilt from its folded instance rows.
#[test]
fn a_folded_node_feeds_its_consumer_per_instance() {
    let p = fanout();
    assert_eq!(p.run(&[]).code, 0);
    let want_after = p.saved("after");
    assert!(want_after["each"]["per_instance"].is_object());
    let want = sorted(results(&p));
    take_saved(&p);
    cut_after(&p, "each");

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(p.saved("after"), want_after);
    assert_eq!(take_saved(&p), BTreeSet::from(["after".to_string()]));
    assert_eq!(sorted(results(&p)), want);
    p.shutdown();
}

/// The loop of `revise.rs` passing in round 3, run to its end; `(rows, draft-3 inputs)`.
fn loop_to_round_three() -> (Pack, Vec<(String, Value, Value)>, Value) {
    let p = looped("", 3);
    p.file("pass_at", "3");
    // A resumed run's workspace is the pristine checkout (RFC-0002:C-PLAYBOOK-RESUME), so this
    // reviewer reads only its inputs, not the draft's file.
    p.file(
        "review.py",
        r#"import json, os, sys
inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
need = int(open(os.path.join(os.environ["PACK"], "pass_at")).read())
rnd = inputs["draft"]["round"]
print(json.dumps({"seen": rnd, "revision": "revision" in inputs}))
sys.exit(0 if rnd >= need else 1)
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let draft3 = p.saved("draft-3");
    take_saved(&p);
    let rows = results(&p);
    (p, rows, draft3)
}

// RFC-0002:C-REVISE-LOOP, C-PLAYBOOK-RESUME: a loop interrupted mid-round resumes at the next
// undispatched body task of that round; settled rounds are replayed, never dispatched again, and
// the next round's target gets the same `revision` input.
#[test]
fn a_loop_interrupted_mid_round_resumes_at_its_next_body_task() {
    let (p, want, draft3) = loop_to_round_three();
    cut_after(&p, "draft[round-2]");

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(p.saved("draft-3"), draft3, "the same revision input");
    assert_eq!(
        take_saved(&p),
        BTreeSet::from(["draft-3".to_string(), "after".to_string()]),
        "draft rounds 1 and 2 never ran again"
    );
    assert_eq!(results(&p), want);
    assert_eq!(p.row("review")["attempts"], 3);
    p.shutdown();
}

// RFC-0002:C-REVISE-LOOP, C-PLAYBOOK-RESUME: a loop whose final rows were partly written is
// terminal: no body task runs again, the missing final row is written from the folded rounds.
#[test]
fn a_loop_with_a_final_row_written_dispatches_no_round() {
    let (p, want, _) = loop_to_round_three();
    cut_after(&p, "draft");

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(take_saved(&p), BTreeSet::from(["after".to_string()]));
    assert_eq!(results(&p), want);
    p.shutdown();
}

/// `make` captures `d/f.txt`; `use` (a settled join) saves its inputs and what was staged.
fn files_pack() -> Pack {
    let save = save_inputs_then("{}");
    Pack::playbook(&format!(
        "{}{}",
        command(
            "make",
            "mkdir -p \"$PACK/out\" d; touch \"$PACK/out/make\"; echo x > d/f.txt; echo '{}'",
            "emits_files = [\"d/f.txt\"]"
        ),
        command(
            "use",
            &format!(
                "mkdir -p \"$PACK/out\"; cat inputs/make/d/f.txt > \"$PACK/out/staged\" 2>/dev/null || echo none > \"$PACK/out/staged\"; {save}"
            ),
            "depends_on = [\"make\"]\njoin = \"settled\""
        ),
    ))
}

fn staged(p: &Pack) -> String {
    std::fs::read_to_string(p.probe().join("out/staged")).unwrap()
}

fn run_dir(p: &Pack) -> std::path::PathBuf {
    p.state().join("runs").join(current(p))
}

// RFC-0002:C-PLAYBOOK-RESUME, C-TASK-FILES: a folded passing producer's captured set stays in
// the run's `files/` and is staged to its consumer as live; the producer never runs again.
#[test]
fn a_folded_producers_set_is_staged_to_its_consumer() {
    let p = files_pack();
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(staged(&p), "x\n");
    cut_after(&p, "make");
    take_saved(&p);

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(staged(&p), "x\n");
    assert_eq!(p.saved("use")["make"]["files"], true);
    assert!(!p.probe().join("out/make").exists(), "make ran again");
    assert_eq!(p.row("make")["files"], true);
    p.shutdown();
}

// RFC-0002:C-PLAYBOOK-RESUME: a folded row says `files: true` but its set did not survive: the
// consumer still dispatches, told no files were staged, and the producer is not run again.
#[test]
fn a_lost_set_leaves_its_consumer_told_nothing_was_staged() {
    let p = files_pack();
    assert_eq!(p.run(&[]).code, 0);
    cut_after(&p, "make");
    take_saved(&p);
    std::fs::remove_dir_all(run_dir(&p).join("files/make")).unwrap();
    // A capture the crash cut short left its temporary: the resumed run drops it.
    let temp = run_dir(&p).join("files/.tmp-crashed");
    std::fs::create_dir_all(temp.join("d")).unwrap();

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!temp.exists(), "the temporary is swept");
    assert_eq!(staged(&p), "none\n");
    assert_eq!(p.saved("use")["make"]["files"], false);
    assert_eq!(p.row("use")["status"], "pass");
    assert!(!p.probe().join("out/make").exists(), "make ran again");
    p.shutdown();
}

fn rerun(p: &Pack, parent: &str, select: &[&str]) -> Ran {
    let mut args = p.run_args(&["--parent", parent]);
    args[1] = "rerun".into();
    for s in select {
        args.push("--select".into());
        args.push(s.to_string());
    }
    p.command(&args).run()
}

// RFC-0002:C-PLAYBOOK-RERUN: a reused producer's captured set is copied into the rerun's
// `files/` and staged to the rerun consumer as live.
#[test]
fn a_reused_producers_set_reaches_the_rerun_consumer() {
    let p = files_pack();
    assert_eq!(p.run(&[]).code, 0);
    let parent = current(&p);
    take_saved(&p);

    let r = rerun(&p, &parent, &["use"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_ne!(current(&p), parent);
    assert_eq!(staged(&p), "x\n");
    assert_eq!(p.saved("use")["make"]["files"], true);
    assert!(
        !p.probe().join("out/make").exists(),
        "make was reused, not run"
    );
    assert_eq!(p.row("make")["reused_from"], parent.as_str());
    assert!(run_dir(&p).join("files/make/d/f.txt").is_file());
}

// RFC-0002:C-PLAYBOOK-RERUN: a reused mapped node comes with its instance rows, marked with the
// run that produced them, and feeds its consumer the same fold; a selected mapped node reruns as
// one node, every instance.
#[test]
fn a_mapped_node_is_reused_or_rerun_as_one_node() {
    let p = fanout();
    // Every instance passes: a node the parent did not pass would rerun whatever is selected.
    p.file("src.json", &json!({"items": ["a", "c", "d"]}).to_string());
    assert_eq!(p.run(&[]).code, 0);
    let parent = current(&p);
    let want_after = p.saved("after");
    take_saved(&p);

    assert_eq!(rerun(&p, &parent, &["after"]).code, 0);
    assert_eq!(p.saved("after"), want_after);
    assert_eq!(take_saved(&p), BTreeSet::from(["after".to_string()]));
    for t in ["each[a]", "each[c]", "each[d]", "each"] {
        assert_eq!(p.row(t)["reused_from"], parent.as_str(), "{t}");
    }
    p.shutdown();
    // A rerun of that rerun still names the run that produced the instances.
    let child = current(&p);
    assert_eq!(rerun(&p, &child, &["after"]).code, 0);
    assert_eq!(p.saved("after"), want_after);
    take_saved(&p);
    for t in ["each[a]", "each[c]", "each[d]", "each"] {
        assert_eq!(p.row(t)["reused_from"], parent.as_str(), "{t}");
    }

    let r = rerun(&p, &parent, &["each"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(take_saved(&p).len(), 4, "three instances and after");
    for t in ["each[a]", "each[c]", "each[d]", "each"] {
        assert!(p.row(t)["reused_from"].is_null(), "{t}");
    }
}

// RFC-0002:C-PLAYBOOK-RERUN, C-REVISE-LOOP: selecting the reviewer reruns every member of its
// loop, the target upstream of it included, and whatever the loop feeds; what is outside the
// loop and upstream of it is reused.
#[test]
fn selecting_a_loop_member_reruns_the_whole_loop() {
    let (p, want, _) = loop_to_round_three();
    let parent = current(&p);

    let r = rerun(&p, &parent, &["review"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        take_saved(&p),
        BTreeSet::from(["draft-1", "draft-2", "draft-3", "after"].map(String::from)),
        "draft reran with its reviewer"
    );
    assert_eq!(p.row("plan")["reused_from"], parent.as_str());
    for t in ["draft", "review", "after"] {
        assert!(p.row(t)["reused_from"].is_null(), "{t}");
    }
    assert_eq!(results(&p), want);
}

// RFC-0002:C-PLAYBOOK-RESUME: the workspace is rebuilt as the pristine checkout plus the
// declared files of every folded task that passed; a failing task's captured set is never
// restored into it (it reaches consumers only staged under `inputs/`).
#[test]
fn the_workspace_gets_passing_sets_back_never_failing_ones() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "good",
            "mkdir -p d; echo good > d/good.txt; echo '{}'",
            "emits_files = [\"d/good.txt\"]"
        ),
        command(
            "bad",
            "mkdir -p e; echo bad > e/bad.txt; exit 1",
            "emits_files = [\"e/bad.txt\"]\nrequired = false"
        ),
        command(
            "look",
            "mkdir -p \"$PACK/out\"; (cat d/good.txt e/bad.txt inputs/bad/e/bad.txt 2>&1 | sed 's/:.*//') > \"$PACK/out/look\"; echo '{}'",
            "depends_on = [\"good\", \"bad\"]\njoin = \"settled\"\nisolated = false"
        ),
    ));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.row("bad")["files"],
        true,
        "a failing attempt's set is captured"
    );
    let last = row_names(&p)[1].clone();
    cut_after(&p, &last);
    take_saved(&p);

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let seen = std::fs::read_to_string(p.probe().join("out/look")).unwrap();
    assert_eq!(
        seen, "good\ncat\nbad\n",
        "good's file, no e/bad.txt, bad's set staged"
    );
    assert!(!p.workspace().join("e/bad.txt").exists());
    p.shutdown();
}

// RFC-0002:C-PLAYBOOK-RESUME, C-SETTLED-JOIN: a route's row folds like any task's: it is not
// decided again, and the `when` of its dependents reads its folded answers.
#[test]
fn a_folded_route_decides_its_dependents() {
    let p = star(
        r#"judge = command(name = "judge", run = "cat $PACK/answers.json", emits = ["ok"])
gate = route(name = "gate", depends_on = [judge], source = judge, questions = {"ok": noul(ask = "fine?")})
yes = command(name = "yes", run = "python3 $PACK/save.py", depends_on = [gate], when = gate.ok, answers = "yes")
no = command(name = "no", run = "python3 $PACK/save.py", depends_on = [gate], when = gate.ok, answers = ["no", "uncertain"])
workflow([judge, gate, yes, no])
"#,
    );
    p.file("answers.json", &json!({"ok": false}).to_string());
    assert_eq!(p.run(&[]).code, 0);
    let want = sorted(results(&p));
    take_saved(&p);
    cut_after(&p, "gate");

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(take_saved(&p), BTreeSet::from(["no".to_string()]));
    assert_eq!(p.row("yes")["status"], "not_taken");
    assert_eq!(sorted(results(&p)), want);
    p.shutdown();
}

/// A mapped producer whose instances each declare a file (one key needs escaping), and a
/// consumer that records what was staged for it.
fn mapped_files_pack() -> Pack {
    let save = save_inputs_then("{}");
    Pack::playbook(&format!(
        "{}{}{}",
        command(
            "src",
            r#"echo '{"items": ["a/b", "c"]}'"#,
            "emits = { items = \"list\" }"
        ),
        command(
            "each",
            "mkdir -p \"$PACK/out\"; touch \"$PACK/out/each-$(echo \"$CRUCIBLE_TASK\" | tr '/[]' '___')\"; python3 -c 'import json,os; print(json.load(open(os.environ[\"CRUCIBLE_INPUTS_FILE\"]))[\"item\"])' > f.txt; echo '{}'",
            "depends_on = [\"src\"]\nover = \"src.items\"\nmax_fanout = 4\nisolated = true\nemits_files = [\"f.txt\"]"
        ),
        command(
            "use",
            &format!(
                "mkdir -p \"$PACK/res\"; cat inputs/*/f.txt | sort | tr '\\n' ' ' > \"$PACK/res/staged\"; ls inputs | sort | tr '\\n' ' ' > \"$PACK/res/dirs\"; {save}"
            ),
            "depends_on = [\"each\"]"
        ),
    ))
}

/// A result file the consumer wrote into the pack's `res/`, removed so the pack (and its
/// digest, which a resume checks) is as it was.
fn take_res(p: &Pack, name: &str) -> String {
    let path = p.probe().join("res").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(path).unwrap();
    text
}

// RFC-0002:C-PLAYBOOK-RESUME, C-PLAYBOOK-RERUN, C-TASK-FILES: each instance's set lives under
// its escaped key; a resume stages the folded instances' sets to the consumer without running
// them again, and a rerun reusing the node copies every instance's set and stages it as live.
#[test]
fn mapped_instance_sets_survive_resume_and_rerun() {
    let p = mapped_files_pack();
    assert_eq!(p.run(&[]).code, 0);
    let want = "a/b c ";
    assert_eq!(take_res(&p, "staged"), want);
    assert_eq!(take_res(&p, "dirs"), "each[a%2Fb] each[c] ");
    cut_after(&p, "each");
    take_saved(&p);

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(take_res(&p, "staged"), want);
    assert_eq!(
        take_saved(&p),
        BTreeSet::from(["use".to_string()]),
        "no instance ran again"
    );
    let parent = current(&p);

    let r = rerun(&p, &parent, &["use"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(take_res(&p, "staged"), want);
    assert_eq!(
        take_saved(&p),
        BTreeSet::from(["use".to_string()]),
        "the node was reused"
    );
    assert!(run_dir(&p).join("files/each[a%2Fb]/f.txt").is_file());
    assert_eq!(p.row("each[a/b]")["reused_from"], parent.as_str());
}

// RFC-0002:C-PLAYBOOK-RESUME, C-PLAYBOOK-LANE: the declared files a resume restores are part of
// the rebuilt workspace, not some task's change: a failing task's discard after the resume
// keeps them, and the next passing task's commit does not claim them.
#[test]
fn restored_files_survive_a_failing_task_and_are_no_tasks_change() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "good",
            "mkdir -p d; echo good > d/good.txt; echo '{}'",
            "emits_files = [\"d/good.txt\"]"
        ),
        command(
            "flaky",
            "echo junk > junk.txt; exit 1",
            "depends_on = [\"good\"]\nrequired = false"
        ),
        command(
            "after",
            "mkdir -p \"$PACK/res\"; cat d/good.txt > \"$PACK/res/after\"; echo x > after.txt; echo '{}'",
            "depends_on = [\"good\", \"flaky\"]\njoin = \"settled\""
        ),
    ));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(take_res(&p, "after"), "good\n");
    cut_after(&p, "good");
    take_saved(&p);

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(p.row("flaky")["status"], "fail");
    assert_eq!(
        take_res(&p, "after"),
        "good\n",
        "the restored file outlived flaky's discard"
    );
    let out = std::process::Command::new("git")
        .args(["show", "--name-only", "--format=%s", "HEAD"])
        .current_dir(p.workspace())
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout);
    assert_eq!(head.trim(), "task after\n\nafter.txt", "{head}");
}
