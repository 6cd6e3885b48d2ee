//! Every row the engine writes can be read back, and it folds only rows it wrote (issue 11
//! item 6): outputs are bounded at capture by the bounds the reader uses, a row the engine could
//! not have written is refused naming its line, run ids are validated wherever they are read,
//! and a file-size limit fails a write instead of killing the engine.

use crate::resume::{current, cut_log, log_path};
use crate::support::{command, Pack};
use std::process::Command;

/// A two-task run whose log then loses everything after `a`'s row: an interrupted run.
fn interrupted() -> Pack {
    let p = Pack::playbook(&format!(
        "{}{}",
        command("a", "echo '{}'", ""),
        command("b", "echo '{}'", "depends_on = [\"a\"]")
    ));
    assert_eq!(p.run(&[]).code, 0);
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "b");
    p
}

fn append(p: &Pack, line: &str) -> usize {
    let path = log_path(p, &current(p));
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(line);
    text.push('\n');
    std::fs::write(&path, &text).unwrap();
    text.lines().count()
}

#[test]
fn output_nested_126_deep_is_refused_at_capture_and_the_run_reads_back() {
    let deep = format!("{}1{}", "{\"a\":".repeat(126), "}".repeat(126));
    let p = Pack::playbook(&command("deep", &format!("echo '{deep}'"), ""));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("deep");
    assert_eq!(row["status"], "fail");
    assert!(
        row["note"]
            .as_str()
            .unwrap()
            .contains("over the bound of 64"),
        "{row}"
    );
    let again = p.run(&["--resume"]);
    assert_eq!(again.code, 3, "the finished run reads back: {again:?}");
}

#[test]
fn ten_megabyte_result_line_is_reported_over_the_bound() {
    let p = Pack::playbook(&command(
        "big",
        "python3 -c 'import sys; sys.stdout.write(\"{\\\"x\\\": \\\"\" + \"y\" * 10000000 + \"\\\"}\\n\")'",
        "",
    ));
    assert_eq!(p.run(&[]).code, 3);
    let note = p.row("big")["note"].as_str().unwrap().to_string();
    assert!(note.contains("over the bound of 524288 bytes"), "{note}");
}

#[test]
fn forged_row_of_unknown_kind_is_refused_naming_the_line() {
    let p = interrupted();
    let n = append(&p, r#"{"v":1,"kind":"note","ts":"2026-01-01T00:00:00Z"}"#);
    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("line {n}")), "{}", r.stderr);
}

#[test]
fn forged_second_task_result_for_a_settled_task_is_refused_naming_the_line() {
    let p = interrupted();
    let row = p.row("a");
    let mut forged = row.clone();
    forged["status"] = "fail".into();
    let n = append(&p, &forged.to_string());
    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&format!("line {n}")) && r.stderr.contains("second task_result"),
        "{}",
        r.stderr
    );
    // A garbage line is refused with its number; a torn last line is still tolerated.
    let path = log_path(&p, &current(&p));
    let text = std::fs::read_to_string(&path).unwrap();
    let good: Vec<&str> = text.lines().take(n - 1).collect();
    std::fs::write(
        &path,
        format!("{}\n{{\"v\":1,\"kind\":\"task_re", good.join("\n")),
    )
    .unwrap();
    assert_eq!(p.run(&["--resume"]).code, 0, "a torn last line resumes");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen('\n', "\ngarbage\n", 1)).unwrap();
    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("line 2"), "{}", r.stderr);
}

#[test]
fn current_naming_a_path_outside_runs_is_refused() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    assert_eq!(p.run(&[]).code, 0);
    let id = current(&p);
    // A finished run's directory copied outside `runs/`, and `current` pointed at it.
    let outside = p.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::copy(log_path(&p, &id), outside.join("session.jsonl")).unwrap();
    std::fs::write(p.state().join("current"), "../../outside\n").unwrap();
    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not a run id"), "{}", r.stderr);
    let rerun: Vec<String> = [
        "plan",
        "rerun",
        "--parent",
        "../../outside",
        "--select",
        "a",
        "--max-cost",
        "1",
        "--max-time",
        "1m",
        "--manifest",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([p
        .path()
        .join("crucible.toml")
        .to_string_lossy()
        .into_owned()])
    .collect();
    let r = p.command(&rerun).run();
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no such run"), "{}", r.stderr);
}

#[test]
fn file_size_limit_fails_the_write_instead_of_killing_the_engine() {
    let p = Pack::playbook(&command(
        "a",
        "python3 -c 'print(\"{\\\"x\\\": \\\"\" + \"y\" * 20000 + \"\\\"}\")'",
        "",
    ));
    let args = p.run_args(&[]);
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 16; exec \"$0\" \"$@\"")
        .arg(crate::support::BIN)
        .args(&args)
        .current_dir(p.path())
        .env("PACK", p.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "exited, not killed: {stderr}");
    assert!(stderr.contains("File too large"), "{stderr}");
}

// RFC-0002:C-TASK-FILES: `.git` is the engine's memory link (it names the state path), never a
// declared file: refused before any dispatch, by `check` and `plan run` alike.
#[test]
fn emits_files_naming_dot_git_is_refused_before_dispatch() {
    for path in [".git", ".git/config", "sub/.GIT/x"] {
        let p = Pack::playbook(&command(
            "leak",
            "touch \"$PACK/ran\"; echo '{}'",
            &format!("emits_files = [\"{path}\"]"),
        ));
        let check = p.check().run();
        assert_eq!(check.code, 1, "{path}: {check:?}");
        assert!(check.stderr.contains(".git"), "{}", check.stderr);
        let r = p.run(&[]);
        assert_eq!(r.code, 1, "{path}: {r:?}");
        assert!(!p.probe().join("ran").exists(), "nothing was dispatched");
        assert!(!r.stdout.contains("state/runs") && !r.stderr.contains("gitdir"));
    }
}

// RFC-0002:C-TASK-FILES: a 2 GiB sparse file is over the default 1 GiB bound by its size, and
// is refused from it, before any byte is copied.
#[test]
fn two_gib_sparse_declared_file_is_refused_fast() {
    let p = Pack::playbook(&command(
        "sparse",
        "truncate -s 2G big.bin; echo '{}'",
        "emits_files = [\"big.bin\"]",
    ));
    let started = std::time::Instant::now();
    let r = p.run(&[]);
    let took = started.elapsed();
    assert_eq!(r.code, 3, "{r:?}");
    let note = p.row("sparse")["note"].as_str().unwrap().to_string();
    assert!(note.contains("bound"), "{note}");
    assert!(took.as_secs_f64() < 3.0, "refused from its size: {took:?}");
}
