//! The bounded compiler (issue 11 item 5): a nesting bomb, a memory bomb and an overflowing
//! duration each end in a clear error naming the limit, from `plan compile`, `check` and
//! `plan run` alike; nothing panics or aborts, and nothing is dispatched.

use crate::support::{Pack, Ran};

/// A playbook pack whose `workflow.star` starts with `prelude`.
fn star(prelude: &str) -> Pack {
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n");
    p.file(
        "workflow.star",
        &format!("{prelude}\nworkflow([command(name = \"a\", run = \"echo {{}}\")])\n"),
    );
    p
}

/// `plan compile`, `check` and `plan run` of `p`: each refuses, naming `limit`.
fn every_entry_refuses(p: &Pack, limit: &str) {
    let file = p
        .path()
        .join("workflow.star")
        .to_string_lossy()
        .into_owned();
    let compile = p
        .command(&["plan".into(), "compile".into(), "--file".into(), file])
        .run();
    let check = p.check().run();
    let run = p.run(&[]);
    for (what, r) in [("compile", &compile), ("check", &check), ("run", &run)] {
        assert_eq!(r.code, 1, "{what}: {r:?}");
        assert_no_crash(what, r);
        assert!(
            r.stderr.contains(limit),
            "{what} names {limit}: {}",
            r.stderr
        );
    }
    assert!(!p.state().join("runs").exists(), "nothing was started");
}

fn assert_no_crash(what: &str, r: &Ran) {
    for crash in ["panicked", "overflowed its stack", "memory allocation"] {
        assert!(!r.stderr.contains(crash), "{what}: {crash}: {}", r.stderr);
    }
}

#[test]
fn nesting_bomb_of_2500_open_brackets_is_a_diagnostic() {
    let p = star(&format!("x = {}", "[".repeat(2500)));
    every_entry_refuses(&p, "max_nesting");
    let r = p.check().run();
    assert!(
        r.stderr.contains("workflow.star:1:"),
        "file:line:col: {}",
        r.stderr
    );
}

#[test]
fn nesting_bombs_of_every_shape_are_diagnostics() {
    for bomb in [
        format!("x = {}{}", "[".repeat(20_000), "]".repeat(20_000)),
        format!("x = {}1", "-".repeat(20_000)),
        format!("x = {}", vec!["1"; 20_000].join(" + ")),
        format!("x = len{}", ".x".repeat(20_000)),
    ] {
        let p = star(&bomb);
        let r = p.check().run();
        assert_eq!(r.code, 1, "{r:?}");
        assert_no_crash("check", &r);
        assert!(r.stderr.contains("max_nesting"), "{}", r.stderr);
    }
}

#[test]
fn doubling_memory_bomb_is_a_compile_error_naming_the_limit() {
    let doubling = "x = x + x\n".repeat(40);
    let p = star(&format!("x = \"a\"\n{doubling}"));
    every_entry_refuses(&p, "max_eval_memory");
}

#[test]
fn string_repeat_memory_bomb_is_a_compile_error_naming_the_limit() {
    let p = star("x = \"a\" * (1 << 30)");
    let started = std::time::Instant::now();
    every_entry_refuses(&p, "max_eval_memory");
    assert!(started.elapsed().as_secs() < 20, "refused fast");
}

#[test]
fn check_shows_the_compile_limits() {
    let p = star("");
    let r = p.check().run();
    assert!(
        r.stdout.contains("max_nesting = 200") && r.stdout.contains("max_eval_memory = "),
        "{}",
        r.stdout
    );
}

#[test]
fn max_time_overflow_is_refused_without_a_panic_or_a_run() {
    let p = star("");
    for huge in ["18446744073709551615s", "99999999999999999h", "8761h"] {
        let r = p.run(&["--max-time", huge]);
        // A bad value is a bad command line (issue 19).
        assert_eq!(r.code, 2, "{huge}: {r:?}");
        assert_no_crash(huge, &r);
        assert!(r.stderr.contains("--max-time"), "{}", r.stderr);
    }
    assert!(!p.state().join("runs").exists(), "nothing was started");
}
