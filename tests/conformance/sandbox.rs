//! Every attempt in a sandbox (issue 11, item 1; RFC-0002:C-PLAYBOOK-BUDGET, C-TASK-FILES,
//! C-PLAYBOOK-RESUME): each test is an attack a hostile task made on an unsandboxed engine. The
//! operator stop endings (SIGTERM, a second signal) are in `stop.rs`.

use crate::support::{
    assert_all_gone, assert_sleeping, command, marked_sleep, wait_for_file, Pack,
};
use std::process::Stdio;

// The forged-row resume: a task appends a passing row for the gate to its run's session log and
// kills its parent. The log is out of its reach and its parent is its sandbox's init, so the
// gate still runs, fails, and the run (and its resumption) stays invalid.
#[test]
fn the_forged_row_resume() {
    let forged = r#"{"v":1,"kind":"task_result","ts":"2026-01-01T00:00:00.000Z","task":"gate","status":"pass","note":"forged","output":{},"attempts":1,"cost_usd":0.0,"secs":0.0,"score":null,"files":false}"#;
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "evil",
            &format!(
                "for l in ../state/runs/*/session.jsonl; do echo '{forged}' >> \"$l\"; done; kill -9 $PPID; echo '{{}}'"
            ),
            "required = false"
        ),
        "[[workflow.task]]\nname = \"gate\"\nkind = \"evaluate\"\nrun = \"echo '{\\\"pass\\\": false}'\"\ndepends_on = [\"evil\"]\njoin = \"settled\"\n",
    ));
    let first = p.run(&[]);
    let resumed = p.run(&["--resume"]);
    assert_eq!(resumed.code, 3, "{first:?}\n{resumed:?}");
    let log = crate::resume::log_text(&p);
    assert!(!log.contains("forged"), "{log}");
    assert_eq!(p.row("gate")["status"], "fail");
    assert_eq!(p.shutdown()["verdict"], "invalid");
}

// A task edits `../workflow.star`: the pack is hidden, so the edit never reaches it and the
// run can be resumed and relaunched unchanged.
#[test]
fn the_workflow_star_edit_fails() {
    let star = "a = command(name = \"a\", run = \"echo '# pwned' >> ../workflow.star; echo '{}'\")\nworkflow([a])\n";
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n");
    p.file("workflow.star", star);
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(p.path().join("workflow.star")).unwrap(),
        star
    );
    assert_eq!(p.run(&[]).code, 0);
}

// The root write to a staged input: the engine runs as root here, which ignores mode bits; the
// staged `inputs/` is a read-only bind mount, which root cannot write through either.
#[test]
fn the_root_write_to_a_staged_input_fails() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "make",
            "printf made > a.txt; echo '{}'",
            "emits_files = [\"a.txt\"]"
        ),
        command(
            "use",
            "chmod -R u+w inputs 2>/dev/null; if printf x >> inputs/make/a.txt 2>/dev/null; then exit 1; fi; \
             if touch inputs/new 2>/dev/null; then exit 1; fi; echo '{}'",
            "depends_on = [\"make\"]"
        ),
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("use")["status"], "pass");
}

// The root task that unmounts what hides the state and remounts its inputs read-write: under an
// engine run as root (CI, this VM) it would hold every capability without `--cap-drop ALL`. It
// cannot unmount, remount or make a namespace, so its forged row never reaches the log and the
// staged input stays untouched.
#[test]
fn the_root_task_that_unmounts_the_hidden_state_fails() {
    let forged = r#"{"v":1,"kind":"task_result","ts":"2026-01-01T00:00:00.000Z","task":"gate","status":"pass","note":"forged","output":{},"attempts":1,"cost_usd":0.0,"secs":0.0,"score":null,"files":false}"#;
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("make", "printf made > a.txt; echo '{}'", "emits_files = [\"a.txt\"]"),
        command(
            "evil",
            &format!(
                "umount -l ../state; umount -l ..; mount -o remount,rw,bind inputs; \
                 mount -o remount,rw /; unshare -m true && echo unshared >> \"$PACK/escaped\"; \
                 printf x >> inputs/make/a.txt && echo wrote >> \"$PACK/escaped\"; \
                 for l in ../state/runs/*/session.jsonl; do echo '{forged}' >> \"$l\" && echo forged >> \"$PACK/escaped\"; done; echo '{{}}'"
            ),
            "depends_on = [\"make\"]"
        ),
        "[[workflow.task]]\nname = \"gate\"\nkind = \"evaluate\"\nrun = \"echo '{\\\"pass\\\": false}'\"\ndepends_on = [\"evil\"]\n",
    ));
    assert_eq!(p.run(&[]).code, 3);
    assert!(
        !p.probe().join("escaped").exists(),
        "{:?}",
        std::fs::read_to_string(p.probe().join("escaped"))
    );
    assert!(!crate::resume::log_text(&p).contains("forged"));
    assert_eq!(p.row("gate")["status"], "fail");
}

// The launcher's open descriptor: whatever the engine inherited without close-on-exec (here a
// writable file as descriptor 7) does not reach a task, which sees only its stdin, stdout and
// stderr.
#[test]
fn the_launchers_open_descriptor_does_not_reach_a_task() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let p = Pack::playbook(&command(
        "peek",
        "if [ -e /proc/self/fd/7 ]; then echo open >> \"$PACK/leaked\"; fi; echo '{}'",
        "",
    ));
    let held = std::fs::File::create(p.probe().join("held")).unwrap();
    let fd = held.as_raw_fd();
    let mut cmd = p.command(&p.run_args(&[])).0;
    // SAFETY: dup2 is async-signal-safe; the copy at 7 is not close-on-exec, as a shell's
    // `exec 7>file` would leave it for the engine.
    unsafe {
        cmd.pre_exec(move || match libc::dup2(fd, 7) {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        })
    };
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(p.row("peek")["status"], "pass");
    assert!(
        !p.probe().join("leaked").exists(),
        "descriptor 7 reached the task"
    );
}

/// A task that leaves `setsid sleep <mark>` behind, says it started, then runs `then`.
fn survivor(mark: &str, then: &str) -> String {
    format!("setsid sleep {mark} </dev/null >/dev/null 2>&1 & touch \"$PACK/started\"; {then}")
}

// The setsid survivor after a normal pass: the attempt is over when its process exits.
#[test]
fn the_setsid_survivor_after_a_pass() {
    let mark = marked_sleep();
    let p = Pack::playbook(&command("pass", &survivor(&mark, "echo '{}'"), ""));
    assert_eq!(p.run(&[]).code, 0);
    assert_all_gone(&mark);
}

// The setsid survivor after the task's own timeout.
#[test]
fn the_setsid_survivor_after_a_task_timeout() {
    let mark = marked_sleep();
    let p = Pack::playbook(&command(
        "hang",
        &survivor(&mark, "sleep 60"),
        "timeout_secs = 1",
    ));
    assert_eq!(p.run(&[]).code, 3);
    assert_eq!(
        p.row("hang")["note"],
        "timed out: the task ran past its 1s limit"
    );
    assert_all_gone(&mark);
}

// The setsid survivor after the run's wall-clock ceiling (--max-time).
#[test]
fn the_setsid_survivor_after_max_time() {
    let mark = marked_sleep();
    let p = Pack::playbook(&command("hang", &survivor(&mark, "sleep 60"), ""));
    assert_eq!(p.run(&["--max-time", "1s"]).code, 3);
    assert_eq!(p.shutdown()["ceiling"], "wall_clock");
    assert_all_gone(&mark);
}

// The setsid survivor after SIGKILL of the engine and --resume: the attempt's namespace dies
// with the engine, before any resume.
#[test]
fn the_setsid_survivor_after_sigkill_and_resume() {
    let mark = marked_sleep();
    let p = Pack::playbook(&command(
        "slow",
        &format!(
            "if [ -e \"$PACK/second\" ]; then echo '{{}}'; exit 0; fi; touch \"$PACK/second\"; {}",
            survivor(&mark, "wait")
        ),
        "",
    ));
    let mut child = p
        .command(&p.run_args(&[]))
        .0
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&p.probe().join("started"), 20);
    assert_sleeping(&mark);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_all_gone(&mark);
    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("slow")["status"], "pass");
}

/// `crucible args` on a host that cannot make the sandbox: in a user namespace whose limit on
/// further user namespaces is 0, without a capability (so it needs one for its own namespaces).
fn fenced(p: &Pack, args: &[String]) -> crate::support::Cmd {
    let mut c = std::process::Command::new("unshare");
    c.args(["-U", "-r", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-all --inh-caps=-all -- \"$@\"")
        .args(["sh", crate::support::BIN])
        .args(args)
        .current_dir(p.path())
        .env("PACK", p.probe())
        .stdin(Stdio::null());
    crate::support::Cmd(c)
}

// A host that cannot make the sandbox (no capability and no user namespaces): `plan run` refuses
// before dispatch naming why and the opt-outs, and `check` reports the same; `--no-sandbox` and
// `[sandbox] enabled = false` run unsandboxed, where a task sees the pack.
#[test]
fn without_namespaces_the_run_is_refused_unless_opted_out() {
    let p = Pack::playbook(&command("a", "test -e ../crucible.toml && echo '{}'", ""));
    let refused = fenced(&p, &p.run_args(&[])).run();
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("this host cannot make one"),
        "{refused:?}"
    );
    assert!(refused.stderr.contains("--no-sandbox"), "{refused:?}");
    assert!(!p.state().join("runs").exists(), "nothing was dispatched");
    let check = fenced(
        &p,
        &["check".into(), "--manifest".into(), "crucible.toml".into()],
    )
    .run();
    assert_eq!(check.code, 1, "{check:?}");
    assert!(
        check.stderr.contains("this host cannot make one"),
        "{check:?}"
    );
    let off = fenced(&p, &p.run_args(&["--no-sandbox"])).run();
    assert_eq!(off.code, 0, "{off:?}");
    // In the sandbox the same task cannot see the pack.
    assert_eq!(p.run(&[]).code, 3);

    let q = Pack::playbook(&format!(
        "[sandbox]\nenabled = false\n{}",
        command("a", "test -e ../crucible.toml && echo '{}'", "")
    ));
    let check = q.check().run();
    assert!(
        check
            .stdout
            .contains("sandbox: off ([sandbox] enabled = false)"),
        "{check:?}"
    );
    assert_eq!(q.run(&[]).code, 0);
}

// An engine that is not root makes the same sandbox inside a user namespace mapping only its
// own ids: run as `nobody`, a task still cannot see the pack or the state, cannot write what is
// read-only, and writes its workspace.
#[test]
fn an_unprivileged_engine_sandboxes_its_tasks_too() {
    // Its own `[sandbox]` table: the test probes live in the target directory, which `nobody`
    // may not reach, so they are not exposed.
    let p = Pack::playbook(&format!("[sandbox]\nenabled = true\n{}", command(
        "a",
        "test ! -e ../crucible.toml && test ! -e ../state/runs/*/session.jsonl && ! touch /etc/x 2>/dev/null \
         && touch made.txt && echo '{}'",
        "",
    )));
    // A copy of the engine, and its home, in the system temp dir: the checkout and its target
    // directory may sit where `nobody` cannot reach (a 0700 home or mktemp directory).
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("crucible");
    std::fs::copy(crate::support::BIN, &bin).unwrap();
    for root in [p.path(), home.path()] {
        let own = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(root)
            .status()
            .unwrap();
        assert!(own.success());
    }
    let mut c = std::process::Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(p.run_args(&[]))
        .current_dir(p.path())
        .env("HOME", home.path())
        .stdin(Stdio::null());
    let r = crate::support::Cmd(c).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(p.workspace().join("made.txt").exists());
}

/// A manifest with two agent tasks on the command backend whose turn tries the loopback server
/// at `port` and reports what it reached and which declared secrets it received: `boxed` in the
/// named sandbox `offline` (listing only `SECRET_A`), `open` in the run's default sandbox.
fn sandboxed_agents(port: u16, sandbox_table: &str) -> String {
    let turn = format!(
        r#"if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}; printf "GET / HTTP/1.0\r\n\r\n" >&3; head -c 15 <&3' >reply 2>/dev/null; then net=$(cat reply); else net=none; fi; rm -f reply; echo "{{\"net\": \"$net\", \"a\": \"$SECRET_A\", \"b\": \"$SECRET_B\"}}" > PLAN_TASK_RESULT.json"#
    );
    format!(
        "[env]\nsecrets = [\"SECRET_A\", \"SECRET_B\"]\n\
         [agent]\nbackend = \"command\"\nagent_cmd = '''{turn}'''\n\
         {sandbox_table}\n\
         [[workflow.task]]\nname = \"boxed\"\nkind = \"agent\"\nprompt = \"x\"\nsandbox = \"offline\"\n\
         [[workflow.task]]\nname = \"open\"\nkind = \"agent\"\nprompt = \"y\"\n"
    )
}

// A task in a named sandbox (`sandbox = "offline"`, `[agent.sandbox.offline]` with no image and
// no endpoints) has no network: it cannot open a TCP connection to a loopback HTTP server the
// test runs, while a task in the default sandbox can. Of the declared secrets it receives only
// those its sandbox lists; `check` prints what the sandbox gives.
#[test]
fn a_task_in_a_named_sandbox_has_no_network_and_only_its_secrets() {
    let port = crate::support::loopback_server();
    let p = Pack::playbook(&sandboxed_agents(
        port,
        "[agent.sandbox.offline]\nsecrets = [\"SECRET_A\"]",
    ));
    let check = p.check().run();
    assert_eq!(check.code, 0, "{check:?}");
    assert!(
        check
            .stdout
            .contains("task boxed: sandbox offline: network none, declared secrets: SECRET_A"),
        "{check:?}"
    );
    let r = p
        .command(&p.run_args(&[]))
        .env("SECRET_A", "alpha-secret")
        .env("SECRET_B", "bravo-secret")
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let (boxed, open) = (p.row("boxed"), p.row("open"));
    assert_eq!(open["output"]["net"], "HTTP/1.0 200 OK", "{open}");
    assert_eq!(boxed["output"]["net"], "none", "{boxed}");
    // Values are masked in outputs: `***` is a secret received, "" one withheld.
    assert_eq!(open["output"]["b"], "***", "{open}");
    assert_eq!(boxed["output"]["a"], "***", "{boxed}");
    assert_eq!(boxed["output"]["b"], "", "{boxed}");
}

// A named sandbox with an image or an egress allowlist, one no table defines, one listing an
// undeclared secret, or one in a run that opted out of the sandbox: refused by `plan run`
// before dispatch and by `check`, with the same reason.
#[test]
fn named_sandboxes_it_cannot_honour_are_refused_by_check_and_run_alike() {
    for (table, flags, reason) in [
        (
            "[agent.sandbox.offline]\nimage = \"debian:12\"",
            &[][..],
            "[agent.sandbox.offline].image is not built in this engine: images are not run locally",
        ),
        (
            "[agent.sandbox.offline]\nendpoints = [\"api.example.com\"]",
            &[][..],
            "[agent.sandbox.offline].endpoints is not built in this engine: an egress allowlist cannot be enforced",
        ),
        (
            "[agent.sandbox.other]",
            &[][..],
            "task `boxed` names sandbox `offline`, which no [agent.sandbox.offline] table defines",
        ),
        (
            "[agent.sandbox.offline]\nsecrets = [\"SECRET_C\"]",
            &[][..],
            "task `boxed` names sandbox `offline`, whose secret `SECRET_C` [env].secrets does not declare",
        ),
        (
            "[agent.sandbox.offline]",
            &["--no-sandbox"][..],
            "task `boxed` names sandbox `offline` (no network), which needs the sandbox this run opted out of",
        ),
    ] {
        let p = Pack::playbook(&sandboxed_agents(1, table));
        let run = p.run(flags);
        assert_eq!(run.code, 1, "{table}: {run:?}");
        assert!(run.stderr.contains(reason), "{table}: {run:?}");
        assert!(!p.state().join("runs").exists(), "nothing was dispatched");
        if flags.is_empty() {
            let check = p.check().run();
            assert_eq!(check.code, 1, "{table}: {check:?}");
            assert!(check.stderr.contains(reason), "{table}: {check:?}");
        }
    }
}
