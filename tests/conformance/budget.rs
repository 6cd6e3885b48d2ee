//! RFC-0002:C-PLAYBOOK-BUDGET: both ceilings, per-attempt deadlines, the cost rule and the
//! wall-clock rule.

use crate::support::{assert_all_gone, command, marked_sleep, Pack};
use serde_json::json;

// RFC-0002:C-PLAYBOOK-BUDGET: a missing ceiling is refused before any dispatch (exit 1).
#[test]
fn missing_ceilings_are_refused_before_dispatch() {
    let p = Pack::playbook(&command("a", "touch \"$PACK/ran\"; echo '{}'", ""));
    for missing in ["--no-max-cost", "--no-max-time"] {
        let r = p.run(&[missing]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("is required"), "{}", r.stderr);
    }
    // Issue 19: both missing are reported at once.
    let r = p.run(&["--no-max-cost", "--no-max-time"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("--max-cost and --max-time are required"),
        "{}",
        r.stderr
    );
    assert!(!p.probe().join("ran").exists());
    assert!(
        !p.state().join("runs").exists()
            || std::fs::read_dir(p.state().join("runs"))
                .unwrap()
                .next()
                .is_none()
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: a declared timeout above --max-time is refused before dispatch.
#[test]
fn timeout_above_the_ceiling_is_refused() {
    let p = Pack::playbook(&command("a", "echo '{}'", "timeout_secs = 120"));
    let r = p.run(&["--max-time", "1m"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("timeout 2m above --max-time 1m"),
        "{}",
        r.stderr
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: at its own limit an attempt's whole process group dies (a sleep
// left in the background included) and it settles as a measured failure naming the limit, not
// retried.
#[test]
fn timeout_kills_the_group_and_fails_without_retry() {
    let mark = marked_sleep();
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "hang",
            &format!("sleep {mark} & wait"),
            "timeout_secs = 1\nrequired = false"
        ),
        command("next", "echo '{}'", "")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let hang = p.row("hang");
    assert_eq!(hang["status"], "fail");
    assert_eq!(hang["note"], "timed out: the task ran past its 1s limit");
    assert_eq!(hang["attempts"], 1);
    assert_all_gone(&mark);
}

// RFC-0002:C-PLAYBOOK-BUDGET: the wall-clock ceiling kills attempts in flight, blocks everything
// after, skips the epilogue, and ends the run `budget` / `wall_clock`, invalid.
#[test]
fn wall_clock_ceiling_kills_and_blocks_everything() {
    let mark = marked_sleep();
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("forever", &format!("sleep {mark} & wait"), ""),
        command(
            "after",
            "echo '{}'",
            "depends_on = [\"forever\"]\njoin = \"settled\""
        ),
        command(
            "epi",
            "touch \"$PACK/epi.ran\"; echo '{}'",
            "stage = \"epilogue\""
        )
    ));
    let r = p.run(&["--max-time", "1s"]);
    assert_eq!(r.code, 3, "{r:?}");
    let f = p.row("forever");
    assert_eq!(f["status"], "fail");
    assert_eq!(
        f["note"],
        "wall-clock ceiling reached: the run ran past its 1s limit"
    );
    assert_eq!(
        p.row("after")["blocked"],
        json!({"reason": "wall_clock_ceiling"})
    );
    assert_eq!(
        p.row("epi")["blocked"],
        json!({"reason": "wall_clock_ceiling"})
    );
    assert!(!p.probe().join("epi.ran").exists());
    let s = p.shutdown();
    assert_eq!(
        (
            s["outcome"].as_str(),
            s["ceiling"].as_str(),
            s["verdict"].as_str()
        ),
        (Some("budget"), Some("wall_clock"), Some("invalid"))
    );
    assert_all_gone(&mark);
}

// RFC-0002:C-PLAYBOOK-BUDGET: the cost ceiling is checked before every spending dispatch; once
// reached, later spending tasks (a spending epilogue included) are blocked naming it, while
// tasks that cannot spend still run; the run ends `budget` / `cost`, invalid.
#[test]
fn cost_ceiling_blocks_spenders_only() {
    let agent = r#"echo "{\"cost_usd\": 0.6, \"by\": \"$CRUCIBLE_TASK\"}" > PLAN_TASK_RESULT.json"#;
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''{agent}'''\n\
         [[workflow.task]]\nname = \"first\"\nkind = \"agent\"\nprompt = \"p\"\n\
         [[workflow.task]]\nname = \"second\"\nkind = \"agent\"\nprompt = \"p\"\ndepends_on = [\"first\"]\nrequired = false\n\
         {}{}\
         [[workflow.task]]\nname = \"epi_agent\"\nkind = \"agent\"\nprompt = \"p\"\nstage = \"epilogue\"\n",
        command("count", "echo '{}'", "depends_on = [\"first\"]"),
        command("epi_cmd", "echo '{}'", "stage = \"epilogue\"")
    ));
    let r = p.run(&["--max-cost", "0.5"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(p.row("first")["cost_usd"], 0.6);
    assert_eq!(
        p.row("second")["blocked"],
        json!({"reason": "budget_ceiling"})
    );
    assert_eq!(p.row("count")["status"], "pass");
    assert_eq!(p.row("epi_cmd")["status"], "pass");
    assert_eq!(
        p.row("epi_agent")["blocked"],
        json!({"reason": "budget_ceiling"})
    );
    let s = p.shutdown();
    assert_eq!(
        (
            s["outcome"].as_str(),
            s["ceiling"].as_str(),
            s["verdict"].as_str()
        ),
        (Some("budget"), Some("cost"), Some("invalid"))
    );
    assert_eq!(s["spent_usd"], 0.6);
}

// RFC-0002:C-PLAYBOOK-BUDGET: the wall-clock ceiling falling during the epilogue kills it and
// names the ceiling in the outcome, but does not change the verdict the main graph determined.
#[test]
fn wall_clock_during_the_epilogue_keeps_the_main_verdict() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("work", "echo '{}'", ""),
        command("slow_report", "sleep 300", "stage = \"epilogue\""),
        command(
            "after_report",
            "echo '{}'",
            "stage = \"epilogue\"\ndepends_on = [\"slow_report\"]\njoin = \"settled\""
        )
    ));
    let r = p.run(&["--max-time", "1s"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("work")["status"], "pass");
    assert_eq!(
        p.row("slow_report")["note"],
        "wall-clock ceiling reached: the run ran past its 1s limit"
    );
    assert_eq!(
        p.row("after_report")["blocked"],
        json!({"reason": "wall_clock_ceiling"})
    );
    let s = p.shutdown();
    assert_eq!(
        (
            s["outcome"].as_str(),
            s["ceiling"].as_str(),
            s["verdict"].as_str()
        ),
        (Some("budget"), Some("wall_clock"), Some("valid"))
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: isolated lanes are admitted one at a time, each against the spend
// settled so far; reaching the ceiling never kills an attempt in flight, whose spend still counts.
#[test]
fn cost_ceiling_admits_lanes_one_at_a_time_and_spares_attempts_in_flight() {
    let turn = r#"case "$CRUCIBLE_TASK" in
  a) echo '{"cost_usd": 1.0}' > PLAN_TASK_RESULT.json ;;
  b) until [ -e "$PACK/a.settled" ]; do sleep 0.02; done
     echo '{"cost_usd": 0.5}' > PLAN_TASK_RESULT.json ;;
  *) echo '{"cost_usd": 0.1}' > PLAN_TASK_RESULT.json ;;
esac"#;
    let agent = |name: &str| {
        format!("[[workflow.task]]\nname = \"{name}\"\nkind = \"agent\"\nprompt = \"p\"\nisolated = true\nrequired = false\ntimeout_secs = 20\n")
    };
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''{turn}'''\n{}{}{}",
        agent("a"),
        agent("b"),
        agent("c")
    ));
    let settled = crate::support::announce_settled(&p, "a");
    let r = p.run(&["--max-cost", "1", "--jobs", "2"]);
    settled.join().unwrap();
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(p.row("a")["cost_usd"], 1.0);
    let b = p.row("b");
    assert_eq!(
        (b["status"].as_str(), b["cost_usd"].as_f64()),
        (Some("pass"), Some(0.5))
    );
    assert_eq!(p.row("c")["blocked"], json!({"reason": "budget_ceiling"}));
    let s = p.shutdown();
    assert_eq!(
        (s["ceiling"].as_str(), s["spent_usd"].as_f64()),
        (Some("cost"), Some(1.5))
    );
}
