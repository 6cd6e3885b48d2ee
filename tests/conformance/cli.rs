//! Issue 19, the command line: a bad launch value always exits 2 with clap's one wording,
//! durations take parts and fractions, `--jobs 0` is refused, and a misspelt workflow type gets a
//! did-you-mean.

use crate::support::{command, snapshot, Pack};

// Every bad launch value exits 2 worded as `invalid value 'X' for '--flag <V>': why`, before
// anything runs.
#[test]
fn bad_launch_values_exit_2_with_one_wording() {
    let p = Pack::playbook(&command("a", "touch \"$PACK/ran\"; echo '{}'", ""));
    for (flag, value, name) in [
        ("--max-cost", "abc", "--max-cost <USD>"),
        ("--max-cost", "inf", "--max-cost <USD>"),
        ("--max-time", "abc", "--max-time <DUR>"),
        ("--max-time", "1.25s", "--max-time <DUR>"),
        ("--jobs", "0", "--jobs <JOBS>"),
    ] {
        let r = p.run(&[flag, value]);
        assert_eq!(r.code, 2, "{flag} {value}: {r:?}");
        let wording = format!("error: invalid value '{value}' for '{name}': ");
        assert!(
            r.stderr.starts_with(&wording),
            "{flag} {value}: {}",
            r.stderr
        );
    }
    assert!(!p.probe().join("ran").exists());
}

// Durations accept parts together and fractions: `1h30m` is 90 minutes, `1.5m` 90 seconds.
#[test]
fn durations_take_parts_and_fractions() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    assert_eq!(p.run(&["--max-time", "1h30m"]).code, 0);
    assert_eq!(p.log()[0]["max_secs"], 5400.0);
    assert_eq!(p.run(&["--max-time", "1.5m"]).code, 0);
    assert_eq!(p.log()[0]["max_secs"], 90.0);
}

// `[workflow] type = "playbok"` names the type it most likely meant.
#[test]
fn a_misspelt_workflow_type_says_did_you_mean() {
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbok\"\n{}",
        command("a", "echo '{}'", "")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("\"playbok\" is not a workflow type: did you mean \"playbook\"?"),
        "{}",
        r.stderr
    );
}

// `--help` shows every flag with its help, examples and the exit codes; required ceilings say
// they are required.
#[test]
fn help_shows_examples_and_exit_codes() {
    for (args, file) in [
        (&["--help"][..], "help.txt"),
        (&["plan", "run", "--help"][..], "plan-run-help.txt"),
        (&["plan", "rerun", "--help"][..], "plan-rerun-help.txt"),
        (&["runs", "--help"][..], "runs-help.txt"),
        (&["logs", "--help"][..], "logs-help.txt"),
        (&["init", "--help"][..], "init-help.txt"),
    ] {
        let out = std::process::Command::new(crate::support::BIN)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        snapshot(file, &String::from_utf8_lossy(&out.stdout));
    }
    let run = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/conformance/snapshots/plan-run-help.txt"),
    )
    .unwrap();
    for part in [
        "Required: the cost ceiling",
        "Required: the wall-clock",
        "Examples:",
        "Exit codes:",
    ] {
        assert!(run.contains(part), "{part}");
    }
}
