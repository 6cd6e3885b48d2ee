//! RFC-0002:C-TASK-FILES and the file parts of C-SETTLED-JOIN and C-PLAYBOOK-LANE: declared
//! files captured, confined, bounded and staged, through the real binary.

use crate::support::{command, save_inputs_then, Pack};
use serde_json::json;
use std::path::PathBuf;

/// The latest run's directory.
fn run_dir(p: &Pack) -> PathBuf {
    let current = std::fs::read_to_string(p.state().join("current")).expect("a run");
    p.state().join("runs").join(current.trim())
}

/// The published set of `task` in the latest run.
fn set(p: &Pack, task: &str) -> PathBuf {
    run_dir(p).join("files").join(task)
}

fn note(p: &Pack, task: &str) -> String {
    p.row(task)["note"].as_str().unwrap_or_default().to_string()
}

/// Every path touched by the run's git memory commits, base commit excluded.
pub fn committed_paths(p: &Pack) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(run_dir(p).join("memory"))
        .args([
            "log",
            "--name-only",
            "--format=%s",
            "refs/crucible/base..HEAD",
        ])
        .output()
        .expect("git runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shell snippet recording what `inputs/` holds, with modes, into `$PACK/out/<task>.ls`.
fn list_inputs() -> &'static str {
    "mkdir -p \"$PACK/out\"; (cd inputs && find . -mindepth 1 | sort | while read f; do \
     echo \"$(stat -c %a \"$f\") $f\"; done) > \"$PACK/out/$CRUCIBLE_TASK.ls\" 2>/dev/null || \
     : > \"$PACK/out/$CRUCIBLE_TASK.ls\""
}

fn listed(p: &Pack, task: &str) -> String {
    std::fs::read_to_string(p.probe().join("out").join(format!("{task}.ls"))).unwrap()
}

// RFC-0002:C-TASK-FILES: a passing task's declared files are captured and staged read-only
// under `inputs/<producer>/` for every descendant, not only direct dependents; the row's
// `files` flag says a set was published; staged inputs are never committed to git memory.
#[test]
fn passing_sets_reach_every_descendant_read_only() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "fetch",
            "mkdir -p data && printf 'raw\\n' > data/raw.txt && echo '{}'",
            "emits_files = [\"data/raw.txt\"]"
        ),
        command(
            "build",
            "cat inputs/fetch/data/raw.txt > built.txt && echo more >> built.txt && echo '{}'",
            "emits_files = [\"built.txt\"]\ndepends_on = [\"fetch\"]"
        ),
        command(
            "test",
            &format!(
                "{}; cat inputs/fetch/data/raw.txt inputs/build/built.txt > \"$PACK/out/seen\"; echo '{{}}'",
                list_inputs()
            ),
            "depends_on = [\"build\"]"
        ),
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("fetch")["files"], true);
    assert_eq!(p.row("build")["files"], true);
    assert_eq!(p.row("test")["files"], false);
    assert_eq!(
        std::fs::read_to_string(p.probe().join("out/seen")).unwrap(),
        "raw\nraw\nmore\n"
    );
    // Staged read-only: directories 555, files 444, grandparent included.
    assert_eq!(
        listed(&p, "test"),
        "555 ./build\n444 ./build/built.txt\n555 ./fetch\n555 ./fetch/data\n444 ./fetch/data/raw.txt\n"
    );
    // Published copies are engine-owned, byte for byte.
    assert_eq!(
        std::fs::read(set(&p, "fetch").join("data/raw.txt")).unwrap(),
        b"raw\n"
    );
    let committed = committed_paths(&p);
    assert!(committed.contains("built.txt"), "{committed}");
    assert!(!committed.contains("inputs/"), "{committed}");
    assert!(!p.workspace().join("inputs").exists());
}

// RFC-0002:C-TASK-FILES: an absent declared file converts an otherwise-passing attempt into a
// measured failure at the producer: not retried, output retained, note names the file, and its
// dependents are blocked.
#[test]
fn an_absent_file_fails_the_producer_and_blocks_dependents() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "make",
            "echo '{\"made\": 1}'",
            "emits_files = [\"report.md\"]\nrequired = false"
        ),
        command(
            "use",
            "echo '{}'",
            "depends_on = [\"make\"]\nrequired = false"
        ),
    ));
    p.run(&[]);
    let row = p.row("make");
    assert_eq!(row["status"], "fail");
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["files"], false);
    assert_eq!(row["output"], json!({"made": 1}));
    assert!(note(&p, "make").contains("`report.md` is absent"), "{row}");
    let used = p.row("use");
    assert_eq!(used["status"], "blocked");
    assert_eq!(used["blocked"]["reason"], "dependency_did_not_pass");
    assert!(!set(&p, "make").exists());
}

// RFC-0002:C-TASK-FILES: a schema'd file is validated from the captured copy; not admitted or not
// JSON is a measured failure naming the file and the instance path, never the value.
#[test]
fn a_schema_mismatch_fails_naming_the_file_not_the_value() {
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n");
    p.file(
        "schemas/count.json",
        r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {"n": {"type": "integer"}}, "required": ["n"]}"#,
    );
    p.file(
        "workflow.star",
        r#"
bad = command(name = "bad", run = "echo '{\"n\": \"SECRET-VALUE\"}' > c.json; echo '{}'",
              emits_files = {"c.json": schema_file("schemas/count.json")}, required = False)
junk = command(name = "junk", run = "echo 'not json' > c.json; echo '{}'",
               emits_files = {"c.json": schema_file("schemas/count.json")}, required = False)
good = command(name = "good", run = "echo '{\"n\": 3}' > c.json; echo '{}'",
               emits_files = {"c.json": schema_file("schemas/count.json")}, required = False)
workflow([bad, junk, good])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let bad = note(&p, "bad");
    assert_eq!(p.row("bad")["status"], "fail");
    assert!(
        bad.contains("`c.json` does not match its schema: at /n"),
        "{bad}"
    );
    assert!(!bad.contains("SECRET-VALUE"), "{bad}");
    let junk = note(&p, "junk");
    assert_eq!(p.row("junk")["status"], "fail");
    assert!(junk.contains("`c.json` is not JSON"), "{junk}");
    assert_eq!(p.row("good")["status"], "pass");
    assert_eq!(p.row("good")["files"], true);
}

/// One hostile producer and the note fragment its refusal must carry.
fn hostile(run: &str, declared: &str, expect: &str) {
    let p = Pack::playbook(&command(
        "evil",
        run,
        &format!("emits_files = [\"{declared}\"]"),
    ));
    p.file("outside/secret", "TOP-SECRET");
    // Unsandboxed: capture's own confinement must hold even where no sandbox stops the attack.
    p.run(&["--no-sandbox"]);
    let row = p.row("evil");
    assert_eq!(row["status"], "fail", "{row}");
    assert_eq!(row["files"], false);
    let n = note(&p, "evil");
    assert!(n.contains(expect), "{n}");
    assert!(!n.contains("TOP-SECRET"));
    assert!(!set(&p, "evil").exists());
    let files = run_dir(&p).join("files");
    let leftovers: Vec<_> = std::fs::read_dir(&files)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

// RFC-0002:C-TASK-FILES: a symbolic link as the declared file is refused.
#[test]
fn a_symlink_as_the_file_is_refused() {
    hostile(
        "ln -s \"$PACK/outside/secret\" out.txt; echo '{}'",
        "out.txt",
        "symbolic link at `out.txt`",
    );
}

// RFC-0002:C-TASK-FILES: a symbolic link in a directory component is refused per component.
#[test]
fn a_symlink_as_a_directory_component_is_refused() {
    hostile(
        "ln -s \"$PACK/outside\" d; echo '{}'",
        "d/secret",
        "symbolic link at `d`",
    );
}

// RFC-0002:C-TASK-FILES: a hard link to a file outside the workspace is refused without
// resolving the path.
#[test]
fn a_hard_link_to_a_file_outside_is_refused() {
    hostile(
        "ln \"$PACK/outside/secret\" out.txt; echo '{}'",
        "out.txt",
        "hard links",
    );
}

// RFC-0002:C-TASK-FILES: a FIFO in place of a file is refused, and does not hang the engine.
#[test]
fn a_fifo_in_place_of_the_file_is_refused() {
    hostile("mkfifo out.txt; echo '{}'", "out.txt", "not a regular file");
}

// RFC-0002:C-TASK-FILES: a directory in place of the file is refused (only files are declared).
#[test]
fn a_directory_in_place_of_the_file_is_refused() {
    hostile(
        "mkdir -p out.txt && printf x > out.txt/inner; echo '{}'",
        "out.txt",
        "is a directory, not a regular file",
    );
}

// RFC-0002:C-TASK-FILES: `../` and absolute paths are refused when the plan is compiled, before
// any dispatch.
#[test]
fn traversal_and_absolute_paths_are_refused_at_compile_time() {
    for path in ["../escape.txt", "/etc/passwd", "a/../../b"] {
        let p = Pack::playbook(&command(
            "t",
            "touch \"$PACK/ran\"; echo '{}'",
            &format!("emits_files = [\"{path}\"]"),
        ));
        let r = p.run(&[]);
        assert_eq!(r.code, 1, "{path}: {r:?}");
        assert!(
            r.stderr
                .contains("is not a relative path inside the workspace"),
            "{path}: {}",
            r.stderr
        );
        assert!(!p.probe().join("ran").exists(), "{path}: dispatched");
        let c = p.command(&["check".into(), "--manifest".into(), "crucible.toml".into()]);
        assert_eq!(c.run().code, 1, "{path}: check");
    }
}

// RFC-0002:C-TASK-FILES: a file swapped for a link between the check and the copy: the copy
// reads the checked file, never the link's target. Driven by the debug-only test hook.
#[test]
fn a_file_swapped_for_a_link_during_capture_is_not_followed() {
    let p = Pack::playbook(&command(
        "racer",
        "printf original > out.txt; echo '{}'",
        "emits_files = [\"out.txt\"]",
    ));
    p.file("outside/secret", "TOP-SECRET");
    let args = p.run_args(&[]);
    let r = p
        .command(&args)
        .env(
            "CRUCIBLE_TEST_CAPTURE_HOOK",
            "rm -f \"$CRUCIBLE_CAPTURE_PATH\" && ln -s \"$PACK/outside/secret\" \"$CRUCIBLE_CAPTURE_PATH\" && touch \"$PACK/swapped\"",
        )
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    // The hook is honoured by debug builds only; a release binary ignores the variable.
    assert_eq!(
        p.probe().join("swapped").exists(),
        cfg!(debug_assertions),
        "the hook ran in debug builds only"
    );
    assert_eq!(p.row("racer")["status"], "pass");
    assert_eq!(
        std::fs::read_to_string(set(&p, "racer").join("out.txt")).unwrap(),
        "original"
    );
}

// RFC-0002:C-SETTLED-JOIN: nothing is captured from a task that skipped, even when it wrote its
// declared file, and its dependents get no set.
#[test]
fn a_skipped_task_publishes_nothing() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "maybe",
            "printf x > x.txt; echo '{\"status\": \"skipped\", \"note\": \"nothing to do\"}'",
            "emits_files = [\"x.txt\"]\nrequired = false"
        ),
        command(
            "after",
            &format!("{}; {}", list_inputs(), save_inputs_then("{}")),
            "required = false\ndepends_on = [\"maybe\"]\njoin = \"settled\""
        ),
    ));
    p.run(&[]);
    let row = p.row("maybe");
    assert_eq!(row["status"], "skipped", "{row}");
    assert_eq!(row["files"], false);
    assert!(!set(&p, "maybe").exists());
    assert_eq!(p.saved("after")["maybe"]["files"], false);
    assert_eq!(listed(&p, "after"), "");
}

// RFC-0002:C-TASK-FILES: the run-total bound is operator-configurable (flag over environment),
// shown by `crucible check`, and exceeding it fails the producer naming the bound.
#[test]
fn the_size_bound_fails_the_producer_naming_it() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "small",
            "printf 12345678 > s.txt; echo '{}'",
            "emits_files = [\"s.txt\"]\nrequired = false"
        ),
        command(
            "big",
            "head -c 4096 /dev/zero > b.bin; echo '{}'",
            "emits_files = [\"b.bin\"]\nrequired = false\ndepends_on = [\"small\"]"
        ),
    ));
    let r = p.run(&["--max-files-bytes", "1K"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("small")["files"], true);
    assert_eq!(p.row("big")["status"], "fail");
    let n = note(&p, "big");
    assert!(n.contains("bound of 1024 bytes"), "{n}");
    assert!(n.contains("--max-files-bytes"), "{n}");
    assert!(!set(&p, "big").exists());

    // The environment variable, below the flag.
    let args = p.run_args(&[]);
    let r = p
        .command(&args)
        .env("CRUCIBLE_FILES_MAX_BYTES", "100")
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("big")["status"], "fail");
    assert!(note(&p, "big").contains("bound of 100 bytes"));
    let args = p.run_args(&["--max-files-bytes", "1M"]);
    let r = p
        .command(&args)
        .env("CRUCIBLE_FILES_MAX_BYTES", "100")
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("big")["status"], "pass");

    // Discoverable before a run.
    let check = |env: Option<&str>| {
        let mut c = p.command(&["check".into(), "--manifest".into(), "crucible.toml".into()]);
        if let Some(v) = env {
            c = c.env("CRUCIBLE_FILES_MAX_BYTES", v);
        }
        c.run()
    };
    let c = check(Some("2M"));
    assert_eq!(c.code, 0, "{c:?}");
    assert!(
        c.stdout
            .contains("captured files: at most 2097152 bytes per run"),
        "{}",
        c.stdout
    );
    assert!(check(None).stdout.contains("at most 1073741824 bytes"));
    assert_eq!(check(Some("lots")).code, 1);
    let r = p.run(&["--max-files-bytes", "lots"]);
    assert_eq!(r.code, 1, "{r:?}");
}

// RFC-0002:C-SETTLED-JOIN: the bound exceeded by an attempt that already failed publishes none
// of its set and records the bound with the failure note; the status and its note stay.
#[test]
fn the_size_bound_on_a_failed_attempt_joins_its_note() {
    let p = Pack::playbook(&command(
        "big",
        "head -c 4096 /dev/zero > b.bin; echo boom >&2; exit 5",
        "emits_files = [\"b.bin\"]\nrequired = false",
    ));
    p.run(&["--max-files-bytes", "1K"]);
    let row = p.row("big");
    assert_eq!(row["status"], "fail");
    assert_eq!(row["files"], false);
    let n = note(&p, "big");
    assert!(n.starts_with("exit 5: boom; "), "{n}");
    assert!(n.contains("bound of 1024 bytes"), "{n}");
    assert!(!set(&p, "big").exists());
}

/// A producer that passes writing `shared.txt`, and a failing task on top that declares it.
fn failing_graph(fail_run: &str, consumer_join: &str) -> Pack {
    Pack::playbook(&format!(
        "{}{}{}{}",
        command(
            "first",
            "printf first > shared.txt; echo '{}'",
            "emits_files = [\"shared.txt\"]\nrequired = false"
        ),
        command(
            "broken",
            fail_run,
            "emits_files = [\"shared.txt\"]\nrequired = false\ndepends_on = [\"first\"]"
        ),
        command(
            "judge",
            &format!("{}; {}", list_inputs(), save_inputs_then("{}")),
            &format!("required = false\ndepends_on = [\"broken\"]\njoin = \"{consumer_join}\"")
        ),
        command(
            "report",
            &format!("{}; {}", list_inputs(), save_inputs_then("{}")),
            "stage = \"epilogue\""
        ),
    ))
}

// RFC-0002:C-SETTLED-JOIN: a failing attempt that did not change a path it declares publishes
// nothing (the file is the earlier task's evidence), its status stays, and the note says why.
#[test]
fn a_failing_attempt_that_did_not_change_its_path_captures_nothing() {
    let p = failing_graph("echo oops >&2; exit 4", "settled");
    p.run(&[]);
    let row = p.row("broken");
    assert_eq!(row["status"], "fail");
    assert_eq!(row["files"], false);
    let n = note(&p, "broken");
    assert!(n.starts_with("exit 4: oops"), "{n}");
    assert!(
        n.contains("`shared.txt` was not written by this attempt"),
        "{n}"
    );
    assert!(!set(&p, "broken").exists());
    assert_eq!(p.saved("judge")["broken"]["files"], false);
    // The settled join still gets its passing ancestor's set, not the failed one's.
    assert_eq!(listed(&p, "judge"), "555 ./first\n444 ./first/shared.txt\n");
}

// RFC-0002:C-SETTLED-JOIN: a failing attempt's changed paths are captured; its set is staged into
// a settled join on it (entry `files: true`) and into every epilogue task, and the failing
// attempt's workspace changes are discarded, never committed.
#[test]
fn a_failed_set_reaches_a_settled_join_and_the_epilogue() {
    let p = failing_graph("printf evidence > shared.txt; exit 4", "settled");
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("broken");
    assert_eq!(row["status"], "fail");
    assert_eq!(row["files"], true);
    assert_eq!(
        std::fs::read_to_string(set(&p, "broken").join("shared.txt")).unwrap(),
        "evidence"
    );
    let judge = p.saved("judge");
    assert_eq!(judge["broken"]["status"], "fail");
    assert_eq!(judge["broken"]["files"], true);
    assert_eq!(
        listed(&p, "judge"),
        "555 ./broken\n444 ./broken/shared.txt\n555 ./first\n444 ./first/shared.txt\n"
    );
    // RFC-0002:C-PLAYBOOK-LANE: the epilogue gets every settled main-graph task's set, passing
    // or failing, and its outcome entries say which were staged.
    let report = p.saved("report");
    let tasks = &report["outcome"]["tasks"];
    assert_eq!(tasks["first"]["files"], true);
    assert_eq!(tasks["broken"]["files"], true);
    assert_eq!(tasks["judge"]["files"], false);
    assert_eq!(
        listed(&p, "report"),
        "555 ./broken\n444 ./broken/shared.txt\n555 ./first\n444 ./first/shared.txt\n"
    );
    let committed = committed_paths(&p);
    assert!(committed.contains("task first"), "{committed}");
    assert!(!committed.contains("task broken"), "{committed}");
}

// RFC-0002:C-SETTLED-JOIN: a failed set is never staged into an all join (it is blocked) nor a
// passed join.
#[test]
fn a_failed_set_does_not_reach_other_joins() {
    let p = failing_graph("printf evidence > shared.txt; exit 4", "all");
    p.run(&[]);
    assert_eq!(p.row("broken")["files"], true);
    assert_eq!(p.row("judge")["status"], "blocked");
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "ok",
            "printf ok > o.txt; echo '{}'",
            "emits_files = [\"o.txt\"]\nrequired = false"
        ),
        command(
            "broken",
            "printf evidence > b.txt; exit 4",
            "emits_files = [\"b.txt\"]\nrequired = false"
        ),
        command(
            "any",
            &format!("{}; echo '{{}}'", list_inputs()),
            "required = false\ndepends_on = [\"ok\", \"broken\"]\njoin = \"passed\""
        ),
    ));
    p.run(&[]);
    assert_eq!(p.row("broken")["files"], true);
    assert_eq!(p.row("any")["status"], "pass");
    assert_eq!(listed(&p, "any"), "555 ./ok\n444 ./ok/o.txt\n");
}

// RFC-0002:C-TASK-FILES: a producer in disposable isolation still hands its files down, and a
// consumer in isolation is staged too.
#[test]
fn isolated_producers_files_reach_dependents() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "iso",
            "mkdir -p art && printf built > art/x.bin; echo '{}'",
            "emits_files = [\"art/x.bin\"]\nisolated = true"
        ),
        command(
            "shared",
            "cat inputs/iso/art/x.bin > \"$PACK/shared.seen\"; echo '{}'",
            "depends_on = [\"iso\"]"
        ),
        command(
            "iso2",
            "cat inputs/iso/art/x.bin > \"$PACK/iso2.seen\"; echo '{}'",
            "depends_on = [\"iso\"]\nisolated = true"
        ),
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("iso")["files"], true);
    for seen in ["shared.seen", "iso2.seen"] {
        assert_eq!(
            std::fs::read_to_string(p.probe().join(seen)).unwrap(),
            "built"
        );
    }
    // Isolation discards the producer's workspace changes; only the declared file survives.
    assert!(!p.workspace().join("art").exists());
    assert!(!committed_paths(&p).contains("art/x.bin"));
}

// RFC-0002:C-TASK-FILES: an isolated producer's files are moved out of its disposable checkout
// only when nothing holds them open for writing. Here the task leaves a process behind (escaped
// from its process group) that holds one declared file open and writes to it after the task
// ended: neither the published set nor the consumer's staged copy sees that write.
#[test]
fn a_writer_left_behind_by_an_isolated_producer_cannot_change_its_set() {
    let linger = "setsid sh -c 'exec 3>>art/x.bin; touch art/.held; sleep 1; \
                  printf LATE >&3 && touch \"$PACK/late.written\"' </dev/null >/dev/null 2>&1 &";
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "iso",
            &format!(
                "mkdir -p art && printf built > art/x.bin && printf kept > art/y.bin; {linger} \
                 while [ ! -e art/.held ]; do sleep 0.01; done; echo '{{}}'"
            ),
            "emits_files = [\"art/x.bin\", \"art/y.bin\"]\nisolated = true"
        ),
        command(
            "use",
            "for i in $(seq 100); do [ -e \"$PACK/late.written\" ] && break; sleep 0.05; done; \
             cat inputs/iso/art/x.bin > \"$PACK/seen\"; echo '{}'",
            "depends_on = [\"iso\"]"
        ),
    ));
    // Unsandboxed: the sandbox kills what an attempt leaves behind before it can write.
    let r = p.run(&["--no-sandbox"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        p.probe().join("late.written").exists(),
        "the process left behind did not write"
    );
    assert_eq!(
        std::fs::read_to_string(p.probe().join("seen")).unwrap(),
        "built"
    );
    let set = set(&p, "iso");
    assert_eq!(
        std::fs::read_to_string(set.join("art/x.bin")).unwrap(),
        "built"
    );
    assert_eq!(
        std::fs::read_to_string(set.join("art/y.bin")).unwrap(),
        "kept"
    );
}

// RFC-0002:C-SETTLED-JOIN: a set that cannot be staged whole blocks the consumer with
// `staging_refused` naming the producer, and nothing partial is left in its workspace.
#[test]
fn a_set_that_cannot_be_staged_blocks_the_consumer() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "make",
            "printf a > a.txt; printf b > b.txt; echo '{}'",
            "emits_files = [\"a.txt\", \"b.txt\"]\nrequired = false"
        ),
        // Tampers with the published set: unsandboxed, a task reaches the state directory
        // (its inputs file is in it).
        command(
            "tamper",
            "d=\"$(dirname \"$(dirname \"$CRUCIBLE_INPUTS_FILE\")\")/files/make\"; chmod u+w \"$d\"; rm -f \"$d/b.txt\"; mkfifo \"$d/b.txt\"; echo '{}'",
            "required = false\ndepends_on = [\"make\"]"
        ),
        command(
            "use",
            "touch \"$PACK/used\"; echo '{}'",
            "required = false\ndepends_on = [\"tamper\"]"
        ),
    ));
    p.run(&["--no-sandbox"]);
    assert_eq!(p.row("tamper")["status"], "pass");
    let row = p.row("use");
    assert_eq!(row["status"], "blocked", "{row}");
    assert_eq!(row["blocked"]["reason"], "staging_refused");
    assert_eq!(row["blocked"]["task"], "make");
    assert!(!p.probe().join("used").exists());
    assert!(!p.workspace().join("inputs").exists());
}

// RFC-0002:C-TASK-FILES: staging owns `inputs/`; a workspace that already holds one is refused
// before any dispatch when a task declares files, rather than overwritten.
#[test]
fn a_workspace_already_holding_inputs_is_refused() {
    let body = command(
        "t",
        "touch \"$PACK/ran\"; printf x > x.txt; echo '{}'",
        "emits_files = [\"x.txt\"]",
    );
    let p = Pack::with_manifest(&format!(
        "[workspace]\nsetup_cmd = \"mkdir $CRUCIBLE_WORKSPACE/inputs\"\n[workflow]\ntype = \"playbook\"\n{body}"
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("already holds `inputs`"), "{}", r.stderr);
    assert!(!p.probe().join("ran").exists());
}
