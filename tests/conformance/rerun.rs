//! RFC-0002:C-PLAYBOOK-RERUN: `plan rerun --parent RUN --select T…` reruns the rerun set and
//! reuses everything else from the finished parent, or refuses naming what stops it.

use crate::resume::{current, cut_log, ledgered, with_upstream_repo, Ledger};
use crate::support::{Pack, Ran};
use serde_json::Value;

fn rerun(p: &Pack, ledger: &Ledger, parent: &str, select: &[&str]) -> Ran {
    let mut args = p.run_args(&["--parent", parent]);
    args[1] = "rerun".into();
    for s in select {
        args.push("--select".into());
        args.push(s.to_string());
    }
    p.command(&args)
        .env("LEDGER", &ledger.path.to_string_lossy())
        .run()
}

fn run(p: &Pack, ledger: &Ledger) -> Ran {
    p.command(&p.run_args(&[]))
        .env("LEDGER", &ledger.path.to_string_lossy())
        .run()
}

/// a → b → c, d on its own (advisory, fails when `$PACK/d-fails` exists), an epilogue z; a and
/// b leave files in the shared workspace.
fn graph() -> String {
    format!(
        "{}{}{}{}{}",
        ledgered("a", "echo from-a > a.txt; echo '{\"a\": 1}'", ""),
        ledgered(
            "b",
            "echo from-b > b.txt; echo '{\"b\": 2}'",
            "depends_on = [\"a\"]"
        ),
        ledgered(
            "c",
            "cat a.txt b.txt > \"$LEDGER.c-saw\"; echo '{}'",
            "depends_on = [\"b\"]"
        ),
        ledgered(
            "d",
            "test -e \"$LEDGER.d-fails\" && exit 1; echo '{}'",
            "required = false"
        ),
        ledgered("z", "echo '{}'", "stage = \"epilogue\""),
    )
}

fn fresh(ledger: &Ledger) {
    let _ = std::fs::remove_file(&ledger.path);
}

fn rows(p: &Pack) -> Vec<Value> {
    p.log()
        .into_iter()
        .filter(|l| l["kind"] == "task_result")
        .collect()
}

// RFC-0002:C-PLAYBOOK-RERUN: the selection and what is downstream of it rerun, with every
// epilogue; the rest is reused: rows marked with the producing run, in the parent's settle
// order, its commits replayed onto the parent's start so the workspace holds their changes.
#[test]
fn selection_downstream_and_epilogue_rerun_the_rest_is_reused() {
    let p = Pack::playbook(&graph());
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let parent = current(&p);
    // A file the pack holds is not part of any task's definition: editing it refuses nothing.
    p.file("notes.md", "edited after the parent ran\n");
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["b"]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut ran = ledger.entries();
    ran.sort();
    assert_eq!(ran, ["b", "c", "z"]);
    let child = current(&p);
    assert_ne!(child, parent);
    assert_eq!(p.log()[0]["parent"], Value::from(parent.clone()));
    for t in ["a", "d"] {
        assert_eq!(p.row(t)["reused_from"], Value::from(parent.clone()), "{t}");
        assert_eq!(p.row(t)["status"], "pass");
    }
    for t in ["b", "c", "z"] {
        assert!(p.row(t).get("reused_from").is_none(), "{t}");
    }
    // Reused rows come first, in the parent's settle order.
    let names: Vec<String> = rows(&p)
        .iter()
        .map(|r| r["task"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(&names[..2], ["a", "d"]);
    // c saw a's replayed change and b's fresh one.
    let saw = std::fs::read_to_string(format!("{}.c-saw", ledger.path.display())).unwrap();
    assert_eq!(saw, "from-a\nfrom-b\n");
    let log = std::process::Command::new("git")
        .args(["--git-dir"])
        .arg(p.state().join("runs").join(&child).join("memory"))
        .args(["log", "--format=%s"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "task b\ntask a\ncrucible: baseline workspace\n"
    );
}

// RFC-0002:C-PLAYBOOK-RERUN: a task the parent did not settle passing reruns, unselected.
#[test]
fn a_task_the_parent_did_not_pass_reruns() {
    let p = Pack::playbook(&graph());
    let ledger = Ledger::new();
    std::fs::write(format!("{}.d-fails", ledger.path.display()), "").unwrap();
    assert_eq!(run(&p, &ledger).code, 0);
    assert_eq!(p.row("d")["status"], "fail");
    let parent = current(&p);
    std::fs::remove_file(format!("{}.d-fails", ledger.path.display())).unwrap();
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["c"]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut ran = ledger.entries();
    ran.sort();
    assert_eq!(ran, ["c", "d", "z"]);
    assert_eq!(p.row("d")["status"], "pass");
}

// RFC-0002:C-PLAYBOOK-RERUN: a task new to the graph reruns; an edit to a reused task is
// refused naming each edited task, while an edit to a selected one is simply rerun.
#[test]
fn new_tasks_rerun_and_edited_reused_tasks_are_refused_by_name() {
    let p = Pack::playbook(&graph());
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let parent = current(&p);
    let manifest = p.path().join("crucible.toml");
    let original = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        format!(
            "{original}{}",
            ledgered("e", "echo '{}'", "required = false")
        ),
    )
    .unwrap();
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["c"]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut ran = ledger.entries();
    ran.sort();
    assert_eq!(ran, ["c", "e", "z"]);

    let edited = original
        .replace("echo from-a", "echo edited-a")
        .replace("test -e", "test -f");
    std::fs::write(&manifest, edited).unwrap();
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["c"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("reused task(s) a, b, d changed"),
        "{}",
        r.stderr
    );
    assert!(ledger.entries().is_empty());
    // Selected, the edited a reruns with everything downstream; d is still refused.
    let r = rerun(&p, &ledger, &parent, &["a"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("reused task(s) d changed"),
        "{}",
        r.stderr
    );
    let r = rerun(&p, &ledger, &parent, &["a", "d"]);
    assert_eq!(r.code, 0, "{r:?}");
}

// RFC-0002:C-PLAYBOOK-RERUN: a rerun of a rerun names the original producer of a row its parent
// reused; reused spend is reported apart and does not count against the rerun's ceiling.
#[test]
fn a_rerun_of_a_rerun_names_the_original_producer_and_keeps_reused_spend_apart() {
    let agent =
        r#"echo "$CRUCIBLE_TASK" >> "$LEDGER"; echo '{"cost_usd": 0.75}' > PLAN_TASK_RESULT.json"#;
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''{agent}'''\n\
         [[workflow.task]]\nname = \"think\"\nkind = \"agent\"\nprompt = \"p\"\n{}{}",
        ledgered("a", "echo '{}'", "depends_on = [\"think\"]"),
        ledgered("b", "echo '{}'", "depends_on = [\"a\"]"),
    ));
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let first = current(&p);
    fresh(&ledger);
    // The ceiling is below the reused 0.75: reused spend never counts against it.
    let mut args = p.run_args(&["--parent", &first, "--select", "a", "--max-cost", "0.5"]);
    args[1] = "rerun".into();
    let r = p
        .command(&args)
        .env("LEDGER", &ledger.path.to_string_lossy())
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("reused $0.75 of the parent's spend"),
        "{}",
        r.stdout
    );
    assert_eq!(p.shutdown()["spent_usd"], 0.0);
    let second = current(&p);
    fresh(&ledger);
    let r = rerun(&p, &ledger, &second, &["b"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["b"]);
    assert_eq!(p.row("think")["reused_from"], Value::from(first.clone()));
    assert_eq!(p.row("a")["reused_from"], Value::from(second));
    assert_eq!(p.row("think")["cost_usd"], 0.75);
}

// RFC-0002:C-PLAYBOOK-RERUN: refused when the parent has not shut down, when a selected task is
// not in the graph, and when the parent's session log or task commits are missing, naming what.
#[test]
fn refusals_name_what_stops_the_rerun() {
    let p = Pack::playbook(&graph());
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let parent = current(&p);
    fresh(&ledger);
    let check = |select: &[&str], want: &str| {
        let r = rerun(&p, &ledger, &parent, select);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains(want), "want {want:?}: {}", r.stderr);
        assert!(ledger.entries().is_empty());
    };
    check(&["nope"], "--select nope: the graph has no such task");
    check(&["z"], "names an epilogue task");
    let r = rerun(&p, &ledger, "no-such-run", &["b"]);
    assert!(r.code == 1 && r.stderr.contains("no such run"), "{r:?}");

    let dir = p.state().join("runs").join(&parent);
    std::fs::rename(dir.join("memory"), dir.join("memory.away")).unwrap();
    check(&["b"], "missing its task commits (git memory");
    std::fs::rename(dir.join("memory.away"), dir.join("memory")).unwrap();

    let log = dir.join("session.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).unwrap();
    check(&["b"], "its session log");
    std::fs::write(&log, &text).unwrap();

    // The parent as if it were still running: no shutdown line.
    std::fs::write(p.state().join("current"), &parent).unwrap();
    cut_log(&p, |l| l["kind"] != "shutdown");
    check(&["b"], "it has not shut down");
    // Nothing was left behind by the refusals: only the parent's run directory exists.
    assert_eq!(
        std::fs::read_dir(p.state().join("runs")).unwrap().count(),
        1
    );
}

// RFC-0002:C-PLAYBOOK-RERUN: a rerun starts from the parent's start commit and is refused when
// that commit is unavailable.
#[test]
fn an_unavailable_start_commit_is_refused() {
    let p = Pack::playbook(&format!(
        "{}{}",
        ledgered("a", "echo '{}'", ""),
        ledgered("b", "echo '{}'", "depends_on = [\"a\"]")
    ));
    with_upstream_repo(&p);
    let ledger = Ledger::new();
    let r = run(&p, &ledger);
    assert_eq!(r.code, 0, "{r:?}");
    let parent = current(&p);
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["b"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["b"]);
    fresh(&ledger);
    let run_json = p.state().join("runs").join(&parent).join("run.json");
    let mut rj: Value = serde_json::from_str(&std::fs::read_to_string(&run_json).unwrap()).unwrap();
    rj["base_commit"] = Value::from("1111111111111111111111111111111111111111");
    std::fs::write(&run_json, rj.to_string()).unwrap();
    let r = rerun(&p, &ledger, &parent, &["b"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("start commit 1111111111111111111111111111111111111111 is unavailable"),
        "{}",
        r.stderr
    );
    assert!(ledger.entries().is_empty());
}

// RFC-0002:C-PLAYBOOK-RERUN: a reused task's commit that no longer applies onto the start
// refuses the rerun.
#[test]
fn a_replay_failure_refuses_the_rerun() {
    let p = Pack::playbook(&format!(
        "[workspace]\ninject = \"seed.txt\"\n{}{}",
        ledgered("a", "echo by-a > seed.txt; echo '{}'", ""),
        ledgered("b", "echo '{}'", "depends_on = [\"a\"]")
    ));
    p.file("seed.txt", "seed\n");
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let parent = current(&p);
    // The workspace's own start changed under a's edit: a's commit cannot apply.
    p.file("seed.txt", "another seed\n");
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["b"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("replaying its commits failed") && r.stderr.contains("task a"),
        "{}",
        r.stderr
    );
    assert!(ledger.entries().is_empty());
}

// RFC-0002:C-PLAYBOOK-RERUN: a reused row that recorded a captured file set needs that set; when
// it is gone the rerun is refused naming the task and the set.
#[test]
fn missing_captured_files_are_refused_by_name() {
    let p = Pack::playbook(&graph());
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let parent = current(&p);
    // The parent's row for a says it captured files, but no set is in the run's state.
    let log = p.state().join("runs").join(&parent).join("session.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let edited: String = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["task"] == "a" {
                v["files"] = Value::Bool(true);
            }
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&log, edited).unwrap();
    fresh(&ledger);
    let r = rerun(&p, &ledger, &parent, &["b"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("the captured files of a ("),
        "{}",
        r.stderr
    );
    assert!(ledger.entries().is_empty());
}

// RFC-0002:C-PLAYBOOK-RERUN + C-PLAYBOOK-RESUME: an interrupted rerun resumes from its own start
// (the parent's start with the reused commits replayed), keeping its reused rows apart.
#[test]
fn an_interrupted_rerun_resumes_on_top_of_its_replayed_commits() {
    let p = Pack::playbook(&graph());
    let ledger = Ledger::new();
    assert_eq!(run(&p, &ledger).code, 0);
    let parent = current(&p);
    fresh(&ledger);
    assert_eq!(rerun(&p, &ledger, &parent, &["c"]).code, 0);
    // The rerun crashed before c settled: c, z and the shutdown never reached the disk.
    cut_log(&p, |l| {
        l["kind"] != "shutdown" && l["task"] != "c" && l["task"] != "z"
    });
    fresh(&ledger);
    let r = p
        .command(&p.run_args(&["--resume"]))
        .env("LEDGER", &ledger.path.to_string_lossy())
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["c", "z"]);
    // c read a's and b's replayed changes from the rebuilt workspace.
    let saw = std::fs::read_to_string(format!("{}.c-saw", ledger.path.display())).unwrap();
    assert_eq!(saw, "from-a\nfrom-b\n");
    for t in ["a", "b", "d"] {
        assert_eq!(p.row(t)["reused_from"], Value::from(parent.clone()), "{t}");
    }
    p.shutdown();
}

// RFC-0002:C-PLAYBOOK-RERUN: `plan_admitted` carries each task's definition digest, the one
// `plan show` prints; it covers the compiled task and its dependencies' digests, so editing a
// task changes its own and its dependents' digests and no other.
#[test]
fn plan_admitted_carries_each_definition_digest() {
    let p = crate::fanout::star(
        r#"a = command(name = "a", run = "echo '{}'")
b = command(name = "b", run = "echo '{}'", depends_on = [a])
c = command(name = "c", run = "echo '{}'")
workflow([a, b, c])
"#,
    );
    let digests = |p: &Pack| -> std::collections::BTreeMap<String, String> {
        let r = p.run(&[]);
        assert_eq!(r.code, 0, "{r:?}");
        let admitted = p
            .log()
            .into_iter()
            .find(|l| l["kind"] == "plan_admitted")
            .expect("a plan_admitted line");
        let logged: std::collections::BTreeMap<String, String> = admitted["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["digest"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let manifest = p
            .path()
            .join("crucible.toml")
            .to_string_lossy()
            .into_owned();
        let show = p
            .command(&["plan".into(), "show".into(), "--manifest".into(), manifest])
            .run();
        for (name, digest) in &logged {
            assert!(
                show.stdout.contains(&format!("  {digest} {name}\n")),
                "{name} {digest}: {}",
                show.stdout
            );
        }
        logged
    };
    let before = digests(&p);
    assert_eq!(before.len(), 3);
    assert!(before.values().all(|d| !d.is_empty()));
    p.file(
        "workflow.star",
        r#"a = command(name = "a", run = "echo '{\"v\": 2}'")
b = command(name = "b", run = "echo '{}'", depends_on = [a])
c = command(name = "c", run = "echo '{}'")
workflow([a, b, c])
"#,
    );
    let after = digests(&p);
    assert_ne!(before["a"], after["a"]);
    assert_ne!(
        before["b"], after["b"],
        "a dependent's digest covers its dependency's"
    );
    assert_eq!(before["c"], after["c"]);
}
