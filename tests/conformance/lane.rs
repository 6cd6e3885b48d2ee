//! RFC-0002:C-PLAYBOOK-LANE: verdict, exit code, outcome, early completion, epilogue, git memory,
//! isolation, the session log.

use crate::support::{command, save_inputs_then, Pack};
use serde_json::json;

// RFC-0002:C-PLAYBOOK-LANE: every required task passing is valid, exit 0, outcome finished; the
// log is start, plan_admitted, one row per task, shutdown last and once.
#[test]
fn all_pass_is_valid_and_the_log_has_its_shape() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command("a", r#"echo '{"n": 1}'"#, ""),
        command("b", r#"echo '{"n": 2}'"#, "depends_on = [\"a\"]")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("verdict: valid"), "{}", r.stdout);
    assert!(
        r.stdout.contains("a pass attempts=1 cost=$0.00"),
        "{}",
        r.stdout
    );
    let log = p.log();
    let kinds: Vec<&str> = log.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "start",
            "plan_admitted",
            "task_result",
            "task_result",
            "shutdown"
        ]
    );
    assert!(log.iter().all(|l| l["v"] == 1 && l["ts"].is_string()));
    assert_eq!(log[0]["gate"], "task");
    assert!(log[0]["pack"].as_str().unwrap().starts_with("tree1:"));
    assert_eq!(log[1]["tasks"][1]["depends_on"], json!(["a"]));
    assert_eq!(p.row("b")["score"], json!(null));
    assert_eq!(p.row("b")["output"], json!({"n": 2}));
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("finished"), Some("valid"))
    );
    let run_json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            p.state()
                .join("runs")
                .join(log[0]["run"].as_str().unwrap())
                .join("run.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(run_json["base_commit"].as_str().unwrap().len(), 40);
}

// RFC-0002:C-PLAYBOOK-LANE: a required failure invalidates the run (exit 3, outcome error) and
// blocks everything not yet dispatched, naming the failed task.
#[test]
fn required_failure_is_invalid_and_blocks_the_rest() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("a", "echo oops >&2; exit 4", ""),
        command("b", r#"echo '{}'"#, "depends_on = [\"a\"]"),
        command(
            "c",
            r#"echo '{}'"#,
            "depends_on = [\"b\"]\njoin = \"settled\""
        )
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stdout.contains("verdict: invalid"));
    let a = p.row("a");
    assert_eq!(
        (a["status"].as_str(), a["note"].as_str()),
        (Some("fail"), Some("exit 4: oops"))
    );
    for t in ["b", "c"] {
        let row = p.row(t);
        assert_eq!(row["status"], "blocked");
        assert_eq!(
            row["blocked"],
            json!({"reason": "required_task_failed", "task": "a"})
        );
    }
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("error"), Some("invalid"))
    );
}

// RFC-0002:C-PLAYBOOK-LANE: an advisory failure blocks only its dependents; the verdict holds.
#[test]
fn advisory_failure_blocks_only_its_dependents() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("lint", "exit 1", "required = false"),
        command(
            "after_lint",
            r#"echo '{}'"#,
            "depends_on = [\"lint\"]\nrequired = false"
        ),
        command("build", r#"echo '{}'"#, "")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("lint")["status"], "fail");
    assert_eq!(
        p.row("after_lint")["blocked"],
        json!({"reason": "dependency_did_not_pass", "task": "lint"})
    );
    assert_eq!(p.row("build")["status"], "pass");
    assert_eq!(p.shutdown()["verdict"], "valid");
}

// RFC-0002:C-PLAYBOOK-LANE: early completion stops dispatch; undispatched tasks stay unsettled
// (no row, not blocked); the reason is recorded; the epilogue still runs; the run is valid.
#[test]
fn early_completion_ends_the_run_valid() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "check",
            r#"echo '{"complete": true, "reason": "nothing to do"}'"#,
            ""
        ),
        command("work", r#"echo '{}'"#, "depends_on = [\"check\"]"),
        command("report", &save_inputs_then("{}"), "stage = \"epilogue\"")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!p.has_row("work"));
    assert!(r.stdout.contains("work unsettled"), "{}", r.stdout);
    let s = p.shutdown();
    assert_eq!(s["outcome"], "complete");
    assert_eq!(s["reason"], "nothing to do");
    assert_eq!(s["verdict"], "valid");
    let outcome = &p.saved("report")["outcome"];
    assert_eq!(outcome["exit"], "complete");
    assert_eq!(outcome["tasks"]["check"]["status"], "pass");
    assert!(outcome["tasks"].get("work").is_none());
}

// RFC-0002:C-PLAYBOOK-LANE: an agent's `complete` is refused on its row; the run goes on.
#[test]
fn early_completion_from_an_agent_is_refused() {
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''echo '{{\"complete\": true, \"reason\": \"skip it\"}}' > PLAN_TASK_RESULT.json'''\n\
         [[workflow.task]]\nname = \"think\"\nkind = \"agent\"\nprompt = \"Decide.\"\n{}",
        command("after", r#"echo '{}'"#, "depends_on = [\"think\"]")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let think = p.row("think");
    assert_eq!(think["status"], "pass");
    assert!(think["refused"]
        .as_str()
        .unwrap()
        .contains("early completion refused"));
    assert_eq!(p.row("after")["status"], "pass");
    assert_eq!(p.shutdown()["outcome"], "finished");
}

// RFC-0002:C-PLAYBOOK-LANE: a required failure before a concurrent early completion keeps the
// run invalid; the outcome is still `complete`.
#[test]
fn failure_then_completion_is_complete_and_invalid() {
    let wait_for_a =
        r#"until [ -e "$PACK/a.settled" ]; do sleep 0.02; done; echo '{"complete": true}'"#;
    let p = Pack::playbook(&format!(
        "{}{}",
        command("a", "exit 1", "isolated = true"),
        command("b", wait_for_a, "isolated = true\ntimeout_secs = 10")
    ));
    let settled = crate::support::announce_settled(&p, "a");
    let r = p.run(&["--jobs", "2"]);
    settled.join().unwrap();
    assert_eq!(r.code, 3, "{r:?}");
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("complete"), Some("invalid"))
    );
}

// RFC-0002:C-PLAYBOOK-LANE: the epilogue runs on the failure path with the `outcome` input, and
// never changes the verdict.
#[test]
fn epilogue_runs_after_a_failure_and_cannot_change_the_verdict() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("a", r#"echo '{"note": "broken"}'; exit 1"#, ""),
        command("b", r#"echo '{}'"#, "depends_on = [\"a\"]"),
        command("summary", &save_inputs_then("{}"), "stage = \"epilogue\"")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    let inputs = p.saved("summary");
    assert_eq!(inputs["outcome"]["exit"], "error");
    assert_eq!(
        inputs["outcome"]["tasks"]["a"],
        json!({"status": "fail", "note": "exit 1: broken", "output": {"note": "broken"}, "files": false})
    );
    assert_eq!(inputs["outcome"]["tasks"]["b"]["status"], "blocked");
    assert_eq!(inputs["params"], json!({}));

    // A failing epilogue leaves a valid run valid.
    let p = Pack::playbook(&format!(
        "{}{}",
        command("a", r#"echo '{}'"#, ""),
        command("tail", "exit 1", "stage = \"epilogue\"")
    ));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(p.row("tail")["status"], "fail");
    assert_eq!(p.shutdown()["verdict"], "valid");
}

// RFC-0002:C-PLAYBOOK-LANE: changes are committed when, and only when, a task passes; a failing
// or timed-out task contributes nothing.
#[test]
fn commits_on_pass_only() {
    let p = Pack::playbook(&format!(
        "{}{}{}{}",
        command("good", r#"echo good > good.txt; echo '{}'"#, ""),
        command(
            "bad",
            r#"echo bad > bad.txt; echo changed > good.txt; exit 1"#,
            "depends_on = [\"good\"]\nrequired = false"
        ),
        command(
            "slow",
            r#"echo slow > slow.txt; sleep 30"#,
            "depends_on = [\"good\"]\nrequired = false\ntimeout_secs = 1"
        ),
        command(
            "tidy",
            r#"rm good.txt; echo '{}'"#,
            "depends_on = [\"bad\", \"slow\"]\njoin = \"settled\""
        )
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(p.workspace())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        git(&["log", "--format=%s %an"]),
        "task tidy crucible\ntask good crucible\ncrucible: baseline workspace crucible\n"
    );
    assert_eq!(
        git(&["show", "--name-status", "--format=", "HEAD~1"]),
        "A\tgood.txt\n"
    );
    assert_eq!(git(&["status", "--porcelain"]), "");
    assert!(!p.workspace().join("bad.txt").exists() && !p.workspace().join("slow.txt").exists());
    // The commit set survives in the run's memory under the task's ref.
    let refs = git(&["for-each-ref", "--format=%(refname)", "refs/crucible/tasks"]);
    assert_eq!(refs, "refs/crucible/tasks/good\nrefs/crucible/tasks/tidy\n");
    // ...and outlives the workspace: the run's memory/ is the git directory.
    std::fs::remove_dir_all(p.workspace()).unwrap();
    let run = p.log()[0]["run"].as_str().unwrap().to_string();
    let memory = p.state().join("runs").join(run).join("memory");
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&memory)
        .args(["log", "--format=%s", "refs/crucible/tasks/good", "-1"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "task good\n");
}

// RFC-0002:C-PLAYBOOK-LANE (isolation): isolated tasks run concurrently up to --jobs, in their own
// worktrees, and their file changes are discarded.
#[test]
fn isolated_tasks_run_concurrently() {
    let meet = |me: &str, other: &str| {
        format!(
            r#"touch "$PACK/{me}.here"; until [ -e "$PACK/{other}.here" ]; do sleep 0.02; done; echo x > scratch.txt; echo '{{}}'"#
        )
    };
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "left",
            &meet("left", "right"),
            "isolated = true\ntimeout_secs = 10"
        ),
        command(
            "right",
            &meet("right", "left"),
            "isolated = true\ntimeout_secs = 10"
        )
    ));
    let r = p.run(&["--jobs", "2"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("left")["status"], "pass");
    assert_eq!(p.row("right")["status"], "pass");
    assert!(!p.workspace().join("scratch.txt").exists());
}

// RFC-0002:C-PLAYBOOK-LANE (isolation), issue 18: every isolated attempt starts at HEAD exactly,
// however its checkout is made (an engine run as root makes each one an overlay over a kept
// checkout of HEAD, shared by the attempts that start there): what one isolated task modifies,
// deletes, renames, chmods or replaces with a directory is seen by no later isolated task, which
// sees what shared tasks committed since, and no mount or layer outlives the run.
#[test]
fn isolated_checkouts_start_at_head_and_keep_their_changes_to_themselves() {
    // A thousand more files under fill/: a workspace worth an overlay (a smaller one gets whole
    // checkouts, which the other isolated tests exercise).
    let seeded = r"printf one > a.txt; mkdir -p dir fill; printf b > dir/b.txt; printf '#!/bin/sh\n' > tool.sh
        (cd fill && seq 1000 | xargs touch)";
    let vandal = r#"stat -f -c %T . > "$PACK/fs"; test "$(cat a.txt)" = one && test -e dir/b.txt || exit 9
        printf defaced > a.txt; chmod +x a.txt; mv tool.sh moved.sh; rm -r dir; printf file > dir
        printf new > new.txt; rm a.txt && mkdir a.txt; echo '{}'"#;
    // Exactly the entries `want` (sorted `find` output), `a.txt` a file, nothing executable.
    let expect = |want: &str| {
        format!(
            r#"got=$(find . \( -path ./inputs -o -path ./fill \) -prune -o -print | sort | tr '\n' ' '); [ "$got" = "{want}" ] || {{ echo "$got" >&2; exit 9; }}
            test -f a.txt && test ! -x a.txt && test ! -x tool.sh || exit 9; echo '{{}}'"#
        )
    };
    let p = Pack::playbook(&format!(
        "{}{}{}{}{}",
        command("seed", &format!("{seeded}; echo '{{}}'"), ""),
        command("vandal", vandal, "isolated = true\ndepends_on = [\"seed\"]"),
        command(
            "after_vandal",
            &expect(". ./a.txt ./dir ./dir/b.txt ./tool.sh "),
            "isolated = true\ndepends_on = [\"vandal\"]"
        ),
        command(
            "moves_head",
            "printf two > a.txt; rm -r dir; printf c > c.txt; echo '{}'",
            "depends_on = [\"after_vandal\"]"
        ),
        command(
            "after_head_moved",
            &format!(
                "test \"$(cat a.txt)\" = two || exit 9; {}",
                expect(". ./a.txt ./c.txt ./tool.sh ")
            ),
            "isolated = true\ndepends_on = [\"moves_head\"]"
        ),
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    for t in [
        "seed",
        "vandal",
        "after_vandal",
        "moves_head",
        "after_head_moved",
    ] {
        assert_eq!(p.row(t)["status"], "pass", "{t}: {r:?}");
    }
    // Run as root, the engine has its own mount namespace and isolated checkouts are overlays.
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let fs = std::fs::read_to_string(p.probe().join("fs")).unwrap();
        assert_eq!(fs.trim(), "overlayfs");
    }
    let current = std::fs::read_to_string(p.state().join("current")).unwrap();
    let run_dir = p.state().join("runs").join(current.trim());
    assert!(!run_dir.join("layers").exists() && !run_dir.join("worktrees").exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(p.path().to_str().unwrap()), "{mounts}");
}

// RFC-0002:C-PLAYBOOK-LANE: a manifest workspace is built from [repo] at its ref, with injects
// and setup_cmd, before the base commit.
#[test]
fn workspace_from_a_repo_at_a_ref_with_injects() {
    let p = Pack::playbook(&command(
        "look",
        r#"cat version.txt extra/note.txt | tr '\n' ' ' | sed 's/^/{"seen": "/; s/ $/"}/'"#,
        "",
    ));
    let src = p.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let git = |args: &[&str]| {
        assert!(std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&src)
            .output()
            .unwrap()
            .status
            .success());
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(src.join("version.txt"), "v1\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "one"]);
    git(&["tag", "v1"]);
    std::fs::write(src.join("version.txt"), "v2\n").unwrap();
    git(&["commit", "-qam", "two"]);
    p.file("notes/note.txt", "injected\n");
    let manifest = std::fs::read_to_string(p.path().join("crucible.toml")).unwrap();
    std::fs::write(
        p.path().join("crucible.toml"),
        // A setup_cmd would replace the clone (tests/conformance/workspace.rs).
        format!("[repo]\npath = \"src\"\nref = \"v1\"\n[workspace]\ninject = [{{src = \"notes\", dst = \"extra\"}}]\n{manifest}"),
    )
    .unwrap();
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("look")["output"], json!({"seen": "v1 injected"}));
}

// Odd plans are refused before any dispatch with exit 1 and a message naming the problem, never
// run halfway (the full validator lives in crucible-plan; these are the engine's own guards).
#[test]
fn odd_plans_are_refused_before_dispatch() {
    let cases = [
        (
            format!(
                "{}{}",
                command("a", "echo '{}'", "depends_on = [\"b\"]"),
                command("b", "echo '{}'", "depends_on = [\"a\"]")
            ),
            "cycle",
        ),
        (
            command("a", "echo '{}'", "depends_on = [\"ghost\"]"),
            "unknown task `ghost`",
        ),
        (
            command("a", "echo '{}'", "emits = { complete = \"boolean\" }"),
            "reserved output field",
        ),
        (
            format!(
                "{}{}",
                command("a", "echo '{}'", ""),
                command(
                    "e",
                    "echo '{}'",
                    "stage = \"epilogue\"\ndepends_on = [\"a\"]"
                )
            ),
            "reserved input `outcome`",
        ),
    ];
    for (body, needle) in cases {
        let p = Pack::playbook(&format!(
            "{body}\n{}",
            command("marker", "touch \"$PACK/ran\"; echo '{}'", "")
        ));
        let r = p.run(&[]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains(needle), "{needle}: {}", r.stderr);
        assert!(!p.probe().join("ran").exists());
    }
}

// The workspace is rebuilt each run, so a state directory inside it is refused up front.
#[test]
fn state_inside_the_workspace_is_refused() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    let inside = p.workspace().join("state");
    let r = p.run(&["--state-dir", inside.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("overlap"), "{}", r.stderr);
}

// RFC-0002:C-PLAYBOOK-LANE: a playbook executes its graph exactly once; a requested iteration
// count above one is refused before any dispatch, never silently ignored.
#[test]
fn an_iteration_count_above_one_is_refused() {
    let p = Pack::playbook(&command("a", "touch \"$PACK/ran\"; echo '{}'", ""));
    let r = p.run(&["--iterations", "3"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("exactly once"), "{}", r.stderr);
    assert!(!p.probe().join("ran").exists());
    let r = p.run(&["--iterations", "1"]);
    assert_eq!(r.code, 0, "{r:?}");
}
