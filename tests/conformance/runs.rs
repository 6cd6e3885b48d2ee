//! `crucible runs`: the runs of a state directory, oldest first.

use crate::support::{command, Pack};

#[test]
fn runs_lists_each_run_with_its_outcome() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    assert_eq!(p.run(&[]).code, 0);
    std::fs::write(
        p.path().join("crucible.toml"),
        format!(
            "[workflow]\ntype = \"playbook\"\n{}",
            command("a", "exit 1", "")
        ),
    )
    .unwrap();
    assert_eq!(p.run(&[]).code, 3);
    let out = p
        .command(&[
            "runs".into(),
            "--state-dir".into(),
            p.state().to_string_lossy().into(),
        ])
        .run();
    assert_eq!(out.code, 0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[1].contains("finished") && lines[1].contains("valid"));
    assert!(lines[2].contains("error") && lines[2].contains("invalid"));
    let current = std::fs::read_to_string(p.state().join("current")).unwrap();
    assert!(lines[2].starts_with(current.trim()));
}

// RFC-0002:C-PLAYBOOK-RERUN: a parent that is not a run in the state directory is refused.
#[test]
fn rerun_of_an_unknown_parent_is_refused() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    let args: Vec<String> = [
        "plan",
        "rerun",
        "--parent",
        "x",
        "--select",
        "a",
        "--max-cost",
        "1",
        "--max-time",
        "1m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = p.command(&args).run();
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no such run"), "{}", r.stderr);
}

/// `crucible` with `args` from the pack's directory.
fn cli(p: &Pack, args: &[&str]) -> crate::support::Ran {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    p.command(&args).run()
}

// Issue 19: `runs` reads `state/` beside the manifest, as `plan run` writes it: by default from
// the pack's directory, and with `--manifest` from anywhere; no manifest there is an error.
#[test]
fn runs_reads_beside_the_manifest() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    assert_eq!(p.run(&[]).code, 0);
    let here = cli(&p, &["runs"]);
    assert_eq!(here.code, 0, "{here:?}");
    assert_eq!(here.stdout.lines().count(), 2, "{}", here.stdout);
    let manifest = p.path().join("crucible.toml");
    let mut elsewhere = p.command(&[
        "runs".into(),
        "--manifest".into(),
        manifest.to_string_lossy().into(),
    ]);
    elsewhere.0.current_dir("/");
    assert_eq!(elsewhere.run().stdout, here.stdout);
    let mut nowhere = p.command(&["runs".into()]);
    nowhere.0.current_dir("/");
    let r = nowhere.run();
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("--manifest"), "{}", r.stderr);
}

// Issue 19: the status column tells a running run, a crashed one (resumable only when it is the
// most recent) and an ended one apart; `logs --follow` prints each row's log as it settles and
// ends with the run.
#[test]
fn runs_status_and_logs_follow() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command("a", "echo '{}'", ""),
        command(
            "slow",
            r#"touch "$PACK/started"; while [ ! -e "$PACK/release" ]; do sleep 0.05; done; echo slow-said >&2; echo '{}'"#,
            "depends_on = [\"a\"]"
        )
    ));
    let mut run = std::process::Command::new(crate::support::BIN);
    run.args(p.run_args(&[]))
        .current_dir(p.path())
        .env("PACK", p.probe())
        .stdout(std::process::Stdio::null());
    let mut child = run.spawn().unwrap();
    crate::support::wait_for_file(&p.probe().join("started"), 30);
    let listed = cli(&p, &["runs"]);
    assert!(
        listed.stdout.lines().nth(1).unwrap().contains("running"),
        "{}",
        listed.stdout
    );
    let follow = std::process::Command::new(crate::support::BIN)
        .args(["logs", "latest", "--follow"])
        .current_dir(p.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(p.probe().join("release"), "").unwrap();
    assert!(child.wait().unwrap().success());
    let followed = follow.wait_with_output().unwrap();
    assert!(followed.status.success());
    let text = String::from_utf8_lossy(&followed.stdout);
    assert!(
        text.contains("── slow attempt-1.stderr ──\nslow-said\n"),
        "{text}"
    );
    assert!(text.contains("── a attempt-1.stdout ──\n{}\n"), "{text}");

    // A second run, then both made to look crashed: no shutdown line, no engine.
    assert_eq!(p.run(&[]).code, 0);
    for dir in std::fs::read_dir(p.state().join("runs")).unwrap().flatten() {
        let log = dir.path().join("session.jsonl");
        let text = std::fs::read_to_string(&log).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("\"shutdown\""))
            .collect();
        std::fs::write(&log, kept.join("\n") + "\n").unwrap();
    }
    let listed = cli(&p, &["runs"]).stdout;
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[1].contains("crashed ") && !lines[1].contains("resumable"),
        "{listed}"
    );
    assert!(lines[2].contains("crashed (resumable)"), "{listed}");
}

// Issue 19: `runs show` takes `latest` or a unique prefix; a prefix of two runs, or of none, is
// refused naming why. Rows name their instances and their node's instance count.
#[test]
fn runs_show_by_latest_and_prefix() {
    let p = crate::fanout::star(
        r#"src = command(name = "src", run = "echo '{\"items\": [\"x\", \"y\", \"z\"]}'", emits = {"items": "list"})
each = command(name = "each", run = "echo '{}'", depends_on = [src], over = src.items, max_fanout = 4)
workflow([src, each])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("each pass instances=3 attempts=3"),
        "{}",
        r.stdout
    );
    assert_eq!(p.run(&[]).code, 0);
    let shown = cli(&p, &["runs", "show", "latest"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let current = std::fs::read_to_string(p.state().join("current")).unwrap();
    let id = current.trim();
    assert!(
        shown.stdout.starts_with(&format!("run      {id}\n")),
        "{}",
        shown.stdout
    );
    for part in [
        "each[y]",
        "instance y",
        "instances=3",
        "ceilings $5.00 and 1m",
        "verdict: valid",
    ] {
        assert!(shown.stdout.contains(part), "{part}: {}", shown.stdout);
    }
    assert!(shown.stdout.contains(&format!(
        "log:  {}",
        p.state().join("runs").join(id).join("logs").display()
    )));
    let by_prefix = cli(&p, &["runs", "show", &id[..30]]);
    assert_eq!(by_prefix.stdout, shown.stdout);
    let both = cli(&p, &["runs", "show", &id[..4]]);
    assert_eq!(both.code, 1);
    assert!(
        both.stderr.contains("is the start of 2 runs"),
        "{}",
        both.stderr
    );
    let none = cli(&p, &["logs", "zzz"]);
    assert_eq!(none.code, 1);
    assert!(none.stderr.contains("no such run"), "{}", none.stderr);
}

// Issue 19, RFC-0002:C-PLAYBOOK-RERUN: after a run that did not pass, the summary says what to
// do next, and `plan rerun --parent latest` without `--select` runs again what did not pass,
// reusing the rest.
#[test]
fn rerun_latest_without_select_reruns_what_did_not_pass() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command("a", "echo '{}'", ""),
        command(
            "flaky",
            r#"if [ -e "$PACK/fixed" ]; then echo '{}'; else exit 1; fi"#,
            "depends_on = [\"a\"]"
        )
    ));
    let first = p.run(&[]);
    assert_eq!(first.code, 3);
    assert!(
        first.stdout.contains("crucible plan rerun --parent latest"),
        "{}",
        first.stdout
    );
    let parent = std::fs::read_to_string(p.state().join("current")).unwrap();
    std::fs::write(p.probe().join("fixed"), "").unwrap();
    let mut args = p.run_args(&["--parent", "latest"]);
    args[1] = "rerun".into();
    let r = p.command(&args).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("a")["reused_from"], parent.trim());
    assert_eq!(p.row("flaky")["status"], "pass");
    assert!(p.row("flaky").get("reused_from").is_none());
}
