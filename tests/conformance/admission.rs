//! What `check` says is what `plan run` does: one admission function decides both, so every
//! pack `plan run` refuses before dispatch, `check` refuses with the same reason
//! (RFC-0002:C-PLAYBOOK-CAPS, C-PLAYBOOK-BUDGET's "before any spend", RFC-0001:C-MANIFEST).

use crate::support::Pack;

/// A command task that leaves a mark if it is ever dispatched.
const MARK: &str = "[[workflow.task]]\nname = \"mark\"\nkind = \"command\"\nrun = 'touch \"$PACK/ran\"; echo {}'\n";

/// A manifest that runs a `workflow.star` beside it, with `extra` tables after `[workflow]`.
fn star(src: &str, extra: &str) -> Pack {
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n{extra}"
    ));
    p.file("workflow.star", src);
    p
}

const MARK_STAR: &str = "mark = command(name = \"mark\", run = 'touch \"$PACK/ran\"; echo {}')\n";

/// One bad pack: how to build it, the flags both commands get, and the reason both must give.
struct Case {
    name: &'static str,
    pack: fn() -> Pack,
    flags: &'static [&'static str],
    reason: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "agent task with no backend",
            pack: || Pack::playbook(&format!("{MARK}[[workflow.task]]\nname = \"w\"\nkind = \"agent\"\nprompt = \"hi\"\n")),
            flags: &[],
            reason: "the plan has agent tasks but no agent backend",
        },
        Case {
            name: "misspelt backend",
            pack: || Pack::playbook(&format!("[agent]\nbackend = \"comand\"\nagent_cmd = \"cat\"\n{MARK}")),
            flags: &[],
            reason: "[agent].backend = \"comand\" is not a backend",
        },
        Case {
            name: "openshell backend",
            pack: || Pack::playbook(&format!("[agent]\nbackend = \"openshell\"\n{MARK}")),
            flags: &[],
            reason: "[agent].backend = \"openshell\" is not built in this engine",
        },
        Case {
            name: "[agent].openshell",
            pack: || Pack::playbook(&format!("[agent.openshell]\nendpoints = []\n{MARK}")),
            flags: &[],
            reason: "[agent].openshell is not built in this engine",
        },
        Case {
            name: "[agent].broker",
            pack: || Pack::playbook(&format!("[agent.broker]\nenabled = true\n{MARK}")),
            flags: &[],
            reason: "[agent].broker is not built in this engine",
        },
        Case {
            name: "[agent].relay",
            pack: || Pack::playbook(&format!("[agent]\nrelay = \"wss://relay.example\"\n{MARK}")),
            flags: &[],
            reason: "[agent].relay is not built in this engine",
        },
        Case {
            name: "task sandbox",
            pack: || {
                star(
                    &format!("{MARK_STAR}w = agent(name = \"w\", prompt = \"hi\", sandbox = \"net\")\nworkflow([mark, w])\n"),
                    "[agent]\nbackend = \"command\"\nagent_cmd = \"cat\"\n[agent.sandbox.net]\nsecrets = [\"S\"]\n",
                )
            },
            flags: &[],
            reason: "task `w` names sandbox `net`, whose secret `S` [env].secrets does not declare",
        },
        Case {
            name: "[agent.sandbox.*]",
            pack: || Pack::playbook(&format!("[agent.sandbox.net]\nendpoints = [\"x\"]\n{MARK}")),
            flags: &[],
            reason: "[agent.sandbox.net].endpoints is not built in this engine",
        },
        Case {
            name: "report to email",
            pack: || {
                star(
                    &format!("{MARK_STAR}r = report(name = \"r\", destination = {{\"kind\": \"email\"}})\nworkflow([mark, r])\n"),
                    "",
                )
            },
            flags: &[],
            reason: "task `r` uses the report destination `email`, which this engine does not run yet",
        },
        Case {
            name: "human route with the human capability and no one to ask",
            pack: || {
                star(
                    &format!("{MARK_STAR}g = route(name = \"g\", depends_on = [mark], human = True, needs = \"human\", questions = {{\"ok\": noul()}})\nworkflow([mark, g])\n"),
                    "",
                )
            },
            flags: &["--cap", "human"],
            reason: "route `g` is decided by a person, and this run has no one to ask: no controller (CRUCIBLE_DECISIONS_URL) and no terminal",
        },
        Case {
            name: "model route with `decision` and no binding",
            pack: || {
                star(
                    &format!("{MARK_STAR}g = route(name = \"g\", depends_on = [mark], min_confidence = 0.5, questions = {{\"ok\": noul()}})\nworkflow([mark, g])\n"),
                    "",
                )
            },
            flags: &["--cap", "decision"],
            reason: "route `g` asks a decision model and the run has no decision binding",
        },
        Case {
            name: "empty inject",
            pack: || Pack::playbook(&format!("[workspace]\ninject = \"\"\n{MARK}")),
            flags: &[],
            reason: "workspace setup: an inject has an empty src",
        },
        Case {
            name: "inject matching nothing",
            pack: || Pack::playbook(&format!("[workspace]\ninject = \"seed/*.txt\"\n{MARK}")),
            flags: &[],
            reason: "workspace setup: inject \"seed/*.txt\" matches no file below the manifest directory",
        },
        Case {
            name: "missing [repo].path",
            pack: || Pack::playbook(&format!("[repo]\npath = \"no-such-repo\"\n{MARK}")),
            flags: &[],
            reason: "workspace setup: [repo].path",
        },
        Case {
            name: "a timeout above --max-time",
            pack: || Pack::playbook(&format!("{MARK}[[workflow.task]]\nname = \"slow\"\nkind = \"command\"\nrun = \"true\"\ntimeout_secs = 120\n")),
            flags: &["--max-time", "1m"],
            reason: "task `slow` declares timeout 2m above --max-time 1m",
        },
        Case {
            name: "a workspace inside the state directory",
            pack: || Pack::playbook(&format!("[workspace]\ndir = \"state/ws\"\n{MARK}")),
            flags: &[],
            reason: "/ws overlap: keep them apart",
        },
        Case {
            name: "missing goal file",
            pack: || Pack::playbook(&format!("[agent]\ngoal_file = \"goal.md\"\n{MARK}")),
            flags: &[],
            reason: "[agent].goal_file goal.md",
        },
    ]
}

// Every refusal: `check` finds it and `plan run` refuses it, with the same reason, and the run
// dispatches nothing and leaves no run behind.
#[test]
fn check_refuses_everything_plan_run_refuses_with_the_same_reason() {
    for case in cases() {
        let p = (case.pack)();
        let manifest = p
            .path()
            .join("crucible.toml")
            .to_string_lossy()
            .into_owned();
        let mut check: Vec<String> = vec!["check".into(), "--manifest".into(), manifest];
        check.extend(case.flags.iter().map(|f| f.to_string()));
        let c = p.command(&check).run();
        assert_eq!(c.code, 1, "{}: check must refuse: {c:?}", case.name);
        assert!(
            c.stderr
                .lines()
                .any(|l| l.starts_with("error[admission]: ") && l.contains(case.reason)),
            "{}: check gives another reason: {}",
            case.name,
            c.stderr
        );
        let r = p.run(case.flags);
        assert_eq!(r.code, 1, "{}: plan run must refuse: {r:?}", case.name);
        assert!(
            r.stderr.contains("refused: ") && r.stderr.contains(case.reason),
            "{}: plan run gives another reason: {}",
            case.name,
            r.stderr
        );
        assert!(!p.probe().join("ran").exists(), "{}: dispatched", case.name);
        let runs = p.state().join("runs");
        let left = std::fs::read_dir(&runs).map_or(0, |d| d.count());
        assert_eq!(left, 0, "{}: a refused run leaves no run", case.name);
    }
}

// The tables and keys this engine reads but does not act on are named by `check` and by
// `plan run`, and the run goes ahead without them.
#[test]
fn tables_the_engine_does_not_apply_are_named_by_check_and_run() {
    let p = Pack::playbook(&format!(
        "[publish]\ntarget = \"x\"\n[outputs]\nx = 1\n[agent]\nmethod_prompt = \"m\"\ntoolbox_dir = \"tools\"\n[workspace]\ninject = {{src = \"seed.txt\", frozen = true}}\n{MARK}"
    ));
    p.file("seed.txt", "seed\n");
    let c = p.check().run();
    assert_eq!(c.code, 0, "{c:?}");
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    for what in [
        "[outputs] is not applied by this engine",
        "[publish] is not applied by this engine",
        "[agent].method_prompt is not applied by this engine",
        "[agent].toolbox_dir is not applied by this engine",
        "[workspace].inject \"seed.txt\": `frozen` is not applied by this engine",
    ] {
        assert!(
            c.stdout.contains(&format!("not applied: {what}")),
            "check: {what}: {}",
            c.stdout
        );
        assert!(
            r.stderr.contains(&format!("warning: not applied: {what}")),
            "run: {what}: {}",
            r.stderr
        );
    }
}

// The operator's settings `plan run` refuses before any work (a malformed bound or series
// history in the environment) are findings of `check`, with the same reason.
#[test]
fn check_refuses_the_operator_settings_plan_run_refuses() {
    for (var, value, reason) in [
        (
            "CRUCIBLE_MAX_ASKS",
            "many",
            "CRUCIBLE_MAX_ASKS: \"many\" is not a whole number",
        ),
        (
            "CRUCIBLE_HISTORY_MAX_BYTES",
            "lots",
            "CRUCIBLE_HISTORY_MAX_BYTES:",
        ),
        ("CRUCIBLE_HISTORY", "not json", "CRUCIBLE_HISTORY:"),
    ] {
        let p = Pack::playbook(MARK);
        let c = p.check().env(var, value).run();
        assert_eq!(c.code, 1, "{var}: {c:?}");
        assert!(
            c.stderr.contains(&format!("error[launch]: {reason}")),
            "{var}: {}",
            c.stderr
        );
        let r = p.command(&p.run_args(&[])).env(var, value).run();
        assert_eq!(r.code, 1, "{var}: {r:?}");
        assert!(r.stderr.contains(reason), "{var}: {}", r.stderr);
        assert!(!p.probe().join("ran").exists(), "{var}: dispatched");
    }
}
