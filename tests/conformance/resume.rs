//! RFC-0002:C-PLAYBOOK-RESUME (with the resume parts of C-SETTLED-JOIN and C-PLAYBOOK-BUDGET):
//! `plan run --resume` folds the session log and never dispatches settled work again, proven by
//! killing the engine with SIGKILL over and over.

use crate::support::{command, Pack, Ran, BIN};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The ledger every task appends its name to: outside the pack, so the pack digest holds.
pub struct Ledger {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Ledger {
    pub fn new() -> Ledger {
        let dir = crate::support::probe_dir();
        let path = dir.path().join("ledger");
        Ledger { _dir: dir, path }
    }

    pub fn entries(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub fn count(&self, name: &str) -> usize {
        self.entries().iter().filter(|e| *e == name).count()
    }
}

/// A command task that appends its name to `$LEDGER`, then runs `then`.
pub fn ledgered(name: &str, then: &str, extra: &str) -> String {
    command(
        name,
        &format!("echo \"$CRUCIBLE_TASK\" >> \"$LEDGER\"; {then}"),
        extra,
    )
}

/// `plan run` (plus `args`) with the ledger in the environment.
pub fn run_with(p: &Pack, ledger: &Ledger, args: &[&str]) -> Ran {
    p.command(&p.run_args(args))
        .env("LEDGER", &ledger.path.to_string_lossy())
        .run()
}

/// The current run's session log as raw text.
pub fn log_text(p: &Pack) -> String {
    let current = std::fs::read_to_string(p.state().join("current")).unwrap();
    std::fs::read_to_string(log_path(p, current.trim())).unwrap()
}

pub fn log_path(p: &Pack, run: &str) -> PathBuf {
    p.state().join("runs").join(run).join("session.jsonl")
}

pub fn current(p: &Pack) -> String {
    std::fs::read_to_string(p.state().join("current"))
        .unwrap()
        .trim()
        .to_string()
}

/// The names of the `task_result` rows in a log text, in order (a torn last line skipped).
fn settled(text: &str) -> Vec<String> {
    crucible_plan::wire::decode_log(text)
        .expect("the log parses")
        .into_iter()
        .filter_map(|l| match l.event {
            crucible_plan::wire::Event::TaskResult(r) => Some(r.task),
            _ => None,
        })
        .collect()
}

/// Rewrites the current run's log to keep only lines for which `keep` holds (a crash that
/// lost what followed them), so a resume can be tested deterministically.
pub fn cut_log(p: &Pack, keep: impl Fn(&Value) -> bool) {
    let path = log_path(p, &current(p));
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| keep(&serde_json::from_str(l).unwrap()))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept).unwrap();
}

/// Makes the pack's workspace a checkout of a git repository (`upstream/`, one commit holding
/// `README`) by adding a `[repo]` table to its manifest.
pub fn with_upstream_repo(p: &Pack) {
    let upstream = p.path().join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    std::fs::write(upstream.join("README"), "upstream\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "README"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "one",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&upstream)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let manifest = p.path().join("crucible.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("[repo]\npath = \"upstream\"\n{text}")).unwrap();
}

/// A seeded xorshift: the test's random choices, reproducible from the seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The crash test's playbook: `n` main tasks, shared and isolated, with random earlier
/// dependencies, advisory failures and their blocked or settled-join dependents; a mapped node
/// over three items; a revise loop passing in round 2 or 3; a declared-files producer whose
/// consumer fails unless the set is staged; plus an epilogue. Tasks never read the workspace
/// (staged `inputs/` aside), so the rebuilt workspace cannot change a status. Loop members
/// ledger their round row's name (`draft[round-2]`), instances theirs (`each[p]`), so every
/// ledger entry names the row its attempt settles.
fn crash_playbook(seed: u64, n: usize) -> String {
    let mut rng = Rng(seed);
    let mut body = String::new();
    let mut may_not_pass = vec![false; n];
    for i in 0..n {
        let name = format!("t{i:02}");
        let mut extra = Vec::new();
        let mut deps = BTreeSet::new();
        if i > 0 {
            for _ in 0..rng.below(3) {
                deps.insert(format!("t{:02}", rng.below(i as u64)));
            }
        }
        let settled_join = !deps.is_empty() && rng.below(4) == 0;
        let fails = rng.below(8) == 0;
        let blockable = !settled_join
            && deps
                .iter()
                .any(|d| may_not_pass[d[1..].parse::<usize>().unwrap()]);
        may_not_pass[i] = fails || blockable;
        // A required task that did not pass would halt the run; these stay advisory so that
        // a halt never meets attempts that were in flight at a kill.
        if may_not_pass[i] {
            extra.push("required = false".to_string());
        }
        if !deps.is_empty() {
            let list: Vec<String> = deps.iter().map(|d| format!("\"{d}\"")).collect();
            extra.push(format!("depends_on = [{}]", list.join(", ")));
        }
        if settled_join {
            extra.push("join = \"settled\"".into());
        }
        let isolated = rng.below(3) == 0;
        if isolated {
            extra.push("isolated = true".into());
        }
        let work = if fails {
            "echo '{\"note\": \"seeded failure\"}'; exit 4".to_string()
        } else if isolated {
            format!("sleep 0.05; echo {i} > iso.txt; echo '{{\"n\": {i}}}'")
        } else {
            format!("sleep 0.05; echo {i} > shared-{i}.txt; echo '{{\"n\": {i}}}'")
        };
        body.push_str(&ledgered(&name, &work, &extra.join("\n")));
    }
    let pass_at = 2 + rng.below(2);
    let dep = format!("t{:02}", rng.below(n as u64));
    body.push_str(&ledgered(
        "src",
        "sleep 0.05; echo '{\"items\": [\"p\", \"q\", \"r\"]}'",
        &format!("emits = {{ items = \"list\" }}\ndepends_on = [\"{dep}\"]\njoin = \"settled\""),
    ));
    body.push_str(&ledgered(
        "each",
        "sleep 0.05; echo '{}'",
        "depends_on = [\"src\"]\nover = \"src.items\"\nmax_fanout = 4\nisolated = true",
    ));
    body.push_str(&command(
        "draft",
        "python3 \"$PACK/draft.py\"",
        "depends_on = [\"src\"]",
    ));
    body.push_str(&command(
        "review",
        &format!("python3 \"$PACK/review.py\" {pass_at}"),
        "depends_on = [\"draft\"]\nrevise = [\"draft\"]\nmax_rounds = 3",
    ));
    body.push_str(&ledgered(
        "mk",
        "sleep 0.05; mkdir -p made; echo made > made/mk.txt; echo '{}'",
        "emits_files = [\"made/mk.txt\"]",
    ));
    // An isolated producer: its set is moved out of its checkout (files/adopt.rs).
    body.push_str(&ledgered(
        "mki",
        "sleep 0.05; mkdir -p made; echo moved > made/mki.txt; echo '{}'",
        "emits_files = [\"made/mki.txt\"]\nisolated = true",
    ));
    body.push_str(&ledgered(
        "usef",
        "test \"$(cat inputs/mk/made/mk.txt)\" = made && test \"$(cat inputs/mki/made/mki.txt)\" = moved && echo '{}'",
        "depends_on = [\"mk\", \"mki\", \"each\", \"review\"]",
    ));
    body.push_str(&ledgered(
        "report",
        "echo '{}'",
        "stage = \"epilogue\"\nrequired = false",
    ));
    body
}

/// The crash test's pack: its playbook and the loop's scripts.
fn crash_pack(manifest: &str) -> Pack {
    let p = Pack::playbook(manifest);
    p.file(
        "draft.py",
        r#"import json, os, time
i = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
rnd = i.get("revision", {}).get("round", 1)
open(os.environ["LEDGER"], "a").write("draft[round-%d]\n" % rnd)
time.sleep(0.05)
print(json.dumps({"round": rnd}))
"#,
    );
    p.file(
        "review.py",
        r#"import json, os, sys, time
i = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
rnd = i["draft"]["round"]
open(os.environ["LEDGER"], "a").write("review[round-%d]\n" % rnd)
time.sleep(0.05)
print("{}")
sys.exit(0 if rnd >= int(sys.argv[1]) else 1)
"#,
    );
    p
}

/// Every process still carrying `mark` in its environment (the killed engine's attempts).
fn marked_processes(mark: &str) -> Vec<u32> {
    let needle = format!("CRASH_MARK={mark}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

fn spawn(p: &Pack, ledger: &Ledger, mark: &str, args: &[&str]) -> Child {
    Command::new(BIN)
        .args(p.run_args(args))
        .current_dir(p.path())
        .env("PACK", p.probe())
        .env("LEDGER", &ledger.path)
        .env("CRASH_MARK", mark)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(ledger.path.with_extension("stderr")).unwrap())
        .spawn()
        .expect("the binary starts")
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.matches('\n').count())
        .unwrap_or(0)
}

/// The final row of every task in the current run's log, by name.
fn statuses(p: &Pack) -> BTreeMap<String, String> {
    p.log()
        .into_iter()
        .filter(|l| l["kind"] == "task_result")
        .map(|l| {
            (
                l["task"].as_str().unwrap().to_string(),
                l["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

// RFC-0002:C-PLAYBOOK-RESUME, the crash test of issue 6: a seeded 48-task playbook (shared and
// isolated tasks, advisory failures, blocked and settled-join dependents, a mapped node, a revise
// loop, a declared-files producer and consumer, an epilogue) is killed
// with SIGKILL at seeded moments, at least 20 times in a row, and resumed each time until it
// ends. No settled task, instance or round is dispatched again (a second ledger entry only for an
// attempt in flight and unsettled at a kill, checked against the log at that kill); the verdict and every status
// equal an uninterrupted run's; the log parses; one shutdown; the epilogue settled once.
#[test]
fn sigkill_twenty_times_and_resume_equals_an_uninterrupted_run() {
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_cafe_f00d);
    let manifest = crash_playbook(seed, 40);
    let args = ["--jobs", "2", "--max-time", "5m"];

    let reference = crash_pack(&manifest);
    let ref_ledger = Ledger::new();
    let r = run_with(&reference, &ref_ledger, &args);
    assert!(r.code == 0 || r.code == 3, "{r:?}");
    let want_status = statuses(&reference);
    let want_shutdown = reference.shutdown();
    // 48 tasks, three instances, two or three rounds of two body tasks.
    let rounds = want_status.keys().filter(|t| t.contains("[round-")).count();
    assert!(rounds == 4 || rounds == 6, "{want_status:?}");
    assert_eq!(
        want_status.len(),
        48 + 3 + rounds,
        "every task settles once uninterrupted"
    );
    for t in ["each[p]", "each", "review", "usef"] {
        assert_eq!(want_status[t], "pass", "{t} uninterrupted");
    }

    let p = crash_pack(&manifest);
    let ledger = Ledger::new();
    let mark = format!("{seed}-{}", std::process::id());
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    // Per kill: the ledger length and the tasks settled in the log at that moment.
    let mut kills: Vec<(usize, BTreeSet<String>)> = Vec::new();
    let began = Instant::now();
    let mut resume = false;
    let exit = loop {
        let mut run_args = args.to_vec();
        if resume {
            run_args.push("--resume");
        }
        let mut child = spawn(&p, &ledger, &mark, &run_args);
        // Kill points wait on an event: the ledger growing (an attempt in flight) or the log
        // growing (a row settled), by a seeded amount.
        let (on_log, by) = (rng.below(3) != 0, 1 + rng.below(2) as usize);
        let log_file = p.state().join("current");
        let watched = |p: &Pack| -> usize {
            if on_log {
                std::fs::read_to_string(&log_file)
                    .map(|c| line_count(&log_path(p, c.trim())))
                    .unwrap_or(0)
            } else {
                line_count(&ledger.path)
            }
        };
        let from = watched(&p);
        let ended = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if watched(&p) >= from + by {
                break None;
            }
            assert!(
                began.elapsed() < Duration::from_secs(120),
                "the crash test stalled"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        if let Some(status) = ended {
            break status;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The killed engine's attempts are orphans now: let them finish before resuming, so
        // none writes into the rebuilt workspace or the ledger behind the next run's back.
        // A process caught mid-exec can read as having no environment, so the scan must come
        // up empty several times in a row.
        let mut clear = 0;
        while clear < 3 {
            clear = if marked_processes(&mark).is_empty() {
                clear + 1
            } else {
                0
            };
            assert!(began.elapsed() < Duration::from_secs(120), "orphans linger");
            std::thread::sleep(Duration::from_millis(2));
        }
        kills.push((
            ledger.entries().len(),
            settled(&log_text(&p)).into_iter().collect(),
        ));
        resume = true;
    };
    eprintln!(
        "seed {seed}: {} kills, {:.1}s, {exit}",
        kills.len(),
        began.elapsed().as_secs_f64()
    );
    assert!(
        kills.len() >= 20,
        "only {} kills before the run ended (seed {seed})",
        kills.len()
    );
    assert_eq!(
        exit.code(),
        Some(r.code),
        "same exit as the uninterrupted run; the last run said: {}",
        std::fs::read_to_string(ledger.path.with_extension("stderr")).unwrap_or_default()
    );

    // No settled task dispatched again: nothing settled at a kill enters the ledger after it.
    let entries = ledger.entries();
    for (k, (at, settled_then)) in kills.iter().enumerate() {
        for e in &entries[*at..] {
            assert!(
                !settled_then.contains(e),
                "{e} had settled before kill {k} but was dispatched again (seed {seed})"
            );
        }
    }
    // Every extra ledger entry is a re-dispatch of an attempt a kill left unsettled.
    for name in want_status.keys() {
        let again = kills
            .iter()
            .filter(|(at, s)| !s.contains(name) && entries[..*at].contains(name))
            .count();
        let at: Vec<usize> = (0..entries.len())
            .filter(|&i| &entries[i] == name)
            .collect();
        let ks: Vec<(usize, bool)> = kills.iter().map(|(a, s)| (*a, s.contains(name))).collect();
        assert!(
            ledger.count(name) <= 1 + again,
            "{name} ran {} times with {again} kills in flight: entries at {at:?}, kills {ks:?}",
            ledger.count(name)
        );
    }
    let text = log_text(&p);
    let lines = crucible_plan::wire::decode_log(&text).expect("the log parses");
    assert_eq!(lines.len(), text.lines().count(), "no line was dropped");
    let rows = settled(&text);
    let unique: BTreeSet<&String> = rows.iter().collect();
    assert_eq!(unique.len(), rows.len(), "one row per task: {rows:?}");
    assert_eq!(statuses(&p), want_status, "every status as uninterrupted");
    let got_shutdown = p.shutdown(); // exactly one, and last
    for k in ["outcome", "verdict", "ceiling", "reason"] {
        assert_eq!(got_shutdown[k], want_shutdown[k], "{k}");
    }
    p.row("report"); // the epilogue settled exactly once
    let resumed = p.log().iter().filter(|l| l["kind"] == "resumed").count();
    // A kill can land before a resumption's `resumed` line (while it cuts a torn line).
    assert!(
        resumed >= 1 && resumed <= kills.len(),
        "{resumed} resumed lines"
    );
}

fn three_and_epilogue() -> String {
    format!(
        "{}{}{}{}",
        ledgered("a", "echo '{\"a\": 1}'", ""),
        ledgered("b", "echo '{\"b\": 2}'", "depends_on = [\"a\"]"),
        ledgered(
            "c",
            "cat \"$CRUCIBLE_INPUTS_FILE\" >> \"$LEDGER.inputs\"; echo '{}'",
            "depends_on = [\"b\"]"
        ),
        ledgered("z", "echo '{}'", "stage = \"epilogue\""),
    )
}

// RFC-0002:C-PLAYBOOK-RESUME: a torn last line is tolerated (cut before anything is appended);
// folded rows are terminal and feed their dependents exactly as live.
#[test]
fn a_torn_last_line_is_tolerated_and_folded_rows_feed_dependents() {
    let p = Pack::playbook(&three_and_epilogue());
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    // The crash: b's row was half written, nothing after it reached the disk.
    let path = log_path(&p, &current(&p));
    let text = std::fs::read_to_string(&path).unwrap();
    let b_at = text.find("\"task\":\"b\"").unwrap();
    let line_start = text[..b_at].rfind('\n').unwrap() + 1;
    std::fs::write(&path, &text[..line_start + 30]).unwrap();
    std::fs::remove_file(&ledger.path).unwrap();
    std::fs::remove_file(format!("{}.inputs", ledger.path.display())).unwrap();

    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        ledger.entries(),
        ["b", "c", "z"],
        "a is folded, never run again"
    );
    let inputs: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.inputs", ledger.path.display())).unwrap(),
    )
    .unwrap();
    assert_eq!(inputs["b"], serde_json::json!({"b": 2}));
    for t in ["a", "b", "c", "z"] {
        p.row(t); // exactly one row each
    }
    p.shutdown();
    let text = log_text(&p);
    assert_eq!(
        crucible_plan::wire::decode_log(&text).unwrap().len(),
        text.lines().count()
    );
    assert_eq!(p.log().iter().filter(|l| l["kind"] == "resumed").count(), 1);
}

// RFC-0002:C-PLAYBOOK-RESUME: a malformed line anywhere but last is refused, naming its line.
#[test]
fn a_malformed_line_is_refused_with_its_number() {
    let p = Pack::playbook(&three_and_epilogue());
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    let path = log_path(&p, &current(&p));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"v\":1,\"kind\":\"task_result\",\"task\":";
    lines.truncate(4);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("line 3"), "{}", r.stderr);
}

// RFC-0002:C-PLAYBOOK-RESUME: resuming a run that already shut down re-exits with its verdict
// and changes nothing.
#[test]
fn resuming_a_finished_run_re_exits_with_its_verdict() {
    let p = Pack::playbook(&format!(
        "{}{}",
        ledgered("a", "echo '{}'", ""),
        ledgered("broken", "exit 2", "depends_on = [\"a\"]")
    ));
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 3);
    let before = log_text(&p);
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stdout.contains("verdict: invalid"), "{}", r.stdout);
    assert_eq!(log_text(&p), before);
    assert_eq!(ledger.entries(), ["a", "broken"]);
}

// RFC-0002:C-PLAYBOOK-RESUME: with every main-graph task folded, only the epilogue task without
// a folded result runs; summary and shutdown happen once.
#[test]
fn a_fully_folded_main_graph_runs_only_the_missing_epilogue() {
    let p = Pack::playbook(&three_and_epilogue());
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "z");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["z"]);
    p.row("z");
    assert_eq!(p.shutdown()["outcome"], "finished");
}

// RFC-0002:C-PLAYBOOK-RESUME: a folded early completion dispatches no main-graph task again
// (the ones it left undispatched stay so), only the epilogue.
#[test]
fn a_folded_early_completion_dispatches_only_the_epilogue() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        ledgered(
            "done",
            "echo '{\"complete\": true, \"reason\": \"nothing to do\"}'",
            ""
        ),
        ledgered("later", "echo '{}'", "depends_on = [\"done\"]"),
        ledgered("z", "echo '{}'", "stage = \"epilogue\""),
    ));
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    assert!(!p.has_row("later"));
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "z");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["z"]);
    assert!(!p.has_row("later"));
    let s = p.shutdown();
    assert_eq!(s["outcome"], "complete");
    assert_eq!(s["reason"], "nothing to do");
}

const LONG_AGO: u64 = 400 * 86_400;

// RFC-0002:C-PLAYBOOK-RESUME + C-PLAYBOOK-BUDGET: elapsed time before the interruption, the
// downtime included, counts against the wall-clock ceiling: a run that started long ago
// resumes straight into its ceiling and dispatches nothing.
#[test]
fn downtime_counts_against_the_wall_clock_ceiling() {
    let p = Pack::playbook(&three_and_epilogue());
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &["--max-time", "1h"]).code, 0);
    // Further back than the machine's uptime, as after a reboot: no monotonic clock reaches it.
    let long_ago = rfc3339(std::time::SystemTime::now() - Duration::from_secs(LONG_AGO));
    cut_log(&p, |l| {
        l["kind"] != "shutdown" && l["task"] != "c" && l["task"] != "z"
    });
    let path = log_path(&p, &current(&p));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[0]["ts"] = Value::from(long_ago);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--max-time", "1h", "--resume"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(ledger.entries().is_empty(), "{:?}", ledger.entries());
    assert_eq!(p.row("c")["blocked"]["reason"], "wall_clock_ceiling");
    let s = p.shutdown();
    assert_eq!(s["ceiling"], "wall_clock");
    assert!(s["elapsed_secs"].as_f64().unwrap() >= LONG_AGO as f64);
    let resumed: Vec<Value> = p
        .log()
        .into_iter()
        .filter(|l| l["kind"] == "resumed")
        .collect();
    assert!(resumed[0]["elapsed_secs"].as_f64().unwrap() >= LONG_AGO as f64);
}

// RFC-0002:C-PLAYBOOK-RESUME + C-PLAYBOOK-BUDGET: spend recorded before the interruption counts
// against the cost ceiling: the folded spend already reaches it, so the next spender is blocked
// naming the ceiling instead of being dispatched.
#[test]
fn folded_spend_counts_against_the_cost_ceiling() {
    let agent =
        r#"echo "$CRUCIBLE_TASK" >> "$LEDGER"; echo '{"cost_usd": 1.0}' > PLAN_TASK_RESULT.json"#;
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''{agent}'''\n\
         [[workflow.task]]\nname = \"first\"\nkind = \"agent\"\nprompt = \"p\"\n\
         [[workflow.task]]\nname = \"second\"\nkind = \"agent\"\nprompt = \"p\"\ndepends_on = [\"first\"]\n"
    ));
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &["--max-cost", "1"]).code, 3);
    // The crash came right after first settled: second was never decided.
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "second");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--max-cost", "1", "--resume"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(ledger.entries().is_empty(), "{:?}", ledger.entries());
    assert_eq!(p.row("second")["blocked"]["reason"], "budget_ceiling");
    let s = p.shutdown();
    assert_eq!(s["spent_usd"], 1.0);
    assert_eq!(s["ceiling"], "cost");
    let resumed: Vec<Value> = p
        .log()
        .into_iter()
        .filter(|l| l["kind"] == "resumed")
        .collect();
    assert_eq!(resumed[0]["spent"], 1.0);
}

// RFC-0002:C-PLAYBOOK-RESUME: the same pack, params, variant and --max-cost are required; each
// difference is refused by name and nothing runs.
#[test]
fn a_different_launch_is_refused_naming_the_difference() {
    let p = Pack::playbook(&three_and_epilogue());
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &["--max-cost", "2"]).code, 0);
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "z");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--max-cost", "3", "--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("--max-cost (2 then, 3 now)"),
        "{}",
        r.stderr
    );
    p.file("notes.txt", "a pack edit");
    let r = run_with(&p, &ledger, &["--max-cost", "2", "--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("the pack (tree1:"), "{}", r.stderr);
    // A variant manifest is another launch too.
    std::fs::remove_file(p.path().join("notes.txt")).unwrap();
    std::fs::copy(
        p.path().join("crucible.toml"),
        p.path().join("crucible.ci.toml"),
    )
    .unwrap();
    let mut args = p.run_args(&["--max-cost", "2", "--resume"]);
    let m = args.iter().position(|a| a == "--manifest").unwrap();
    args[m + 1] = p.path().join("crucible.ci.toml").to_string_lossy().into();
    let r = p
        .command(&args)
        .env("LEDGER", &ledger.path.to_string_lossy())
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("the manifest variant"), "{}", r.stderr);
    assert!(ledger.entries().is_empty());
}

// RFC-0002:C-PLAYBOOK-RESUME: params must match the interrupted run's.
#[test]
fn different_params_are_refused() {
    let p = Pack::playbook("file = \"workflow.star\"\n");
    p.file(
        "workflow.star",
        r#"params = {"who": {"type": "string", "default": "x"}}
a = command(name = "a", run = "echo a >> \"$LEDGER\"; echo '{}'")
workflow(type = "playbook", tasks = [a])
"#,
    );
    let ledger = Ledger::new();
    let r = run_with(&p, &ledger, &["--param", "who=ann"]);
    assert_eq!(r.code, 0, "{r:?}");
    cut_log(&p, |l| {
        l["kind"] != "shutdown" && l["kind"] != "task_result"
    });
    let r = run_with(&p, &ledger, &["--param", "who=bob", "--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("params (who)"), "{}", r.stderr);
    assert_eq!(ledger.entries(), ["a"]);
}

// RFC-0002:C-PLAYBOOK-RESUME: with no run recorded there is nothing to resume.
#[test]
fn nothing_to_resume_is_refused() {
    let p = Pack::playbook(&three_and_epilogue());
    let ledger = Ledger::new();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("nothing to resume"), "{}", r.stderr);
    assert!(ledger.entries().is_empty());
}

/// A UTC RFC 3339 timestamp (days-to-civil, Howard Hinnant's algorithm).
fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// RFC-0002:C-SETTLED-JOIN (resume): a folded non-passing result satisfies a settled join as a
// live one does: the consumer dispatches with the failure's entry, the producer is not re-run.
#[test]
fn a_folded_failure_satisfies_a_settled_join() {
    let p = Pack::playbook(&format!(
        "{}{}",
        ledgered(
            "broken",
            "echo '{\"note\": \"bad input\"}'; exit 3",
            "required = false"
        ),
        ledgered(
            "consumer",
            "cat \"$CRUCIBLE_INPUTS_FILE\" > \"$LEDGER.inputs\"; echo '{}'",
            "depends_on = [\"broken\"]\njoin = \"settled\""
        ),
    ));
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "consumer");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["consumer"]);
    let inputs: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.inputs", ledger.path.display())).unwrap(),
    )
    .unwrap();
    assert_eq!(
        inputs["broken"],
        serde_json::json!({"status": "fail", "note": "exit 3: bad input", "output": {"note": "bad input"}, "files": false})
    );
}

// RFC-0002:C-PLAYBOOK-RESUME + C-SETTLED-JOIN: a folded required failure stops dispatch as it did
// live: what the crash left undecided settles blocked naming it, and only the epilogue runs.
#[test]
fn a_folded_required_failure_blocks_what_was_left() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        ledgered("first", "exit 1", ""),
        ledgered("second", "echo '{}'", ""),
        ledgered("z", "echo '{}'", "stage = \"epilogue\""),
    ));
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 3);
    assert_eq!(p.row("second")["blocked"]["reason"], "required_task_failed");
    cut_log(&p, |l| {
        l["kind"] != "shutdown" && l["task"] != "second" && l["task"] != "z"
    });
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(ledger.entries(), ["z"]);
    let second = p.row("second");
    assert_eq!(second["blocked"]["reason"], "required_task_failed");
    assert_eq!(second["blocked"]["task"], "first");
    assert_eq!(p.shutdown()["outcome"], "error");
}

// RFC-0002:C-PLAYBOOK-RESUME: only an interrupted run is resumed; one still running in another
// process is refused and left alone.
#[test]
fn a_run_still_going_is_not_resumed() {
    let p = Pack::playbook(&ledgered("slow", "sleep 30; echo '{}'", ""));
    let ledger = Ledger::new();
    let mut child = spawn(&p, &ledger, "still-going", &[]);
    let until = Instant::now() + Duration::from_secs(20);
    while ledger.entries().is_empty() {
        assert!(Instant::now() < until, "the task never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("is still running"), "{}", r.stderr);
    assert_eq!(ledger.entries(), ["slow"]);
    // An operator stop ends the first run cleanly.
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(3));
    assert_eq!(p.shutdown()["outcome"], "stopped");
}

// RFC-0002:C-PLAYBOOK-RESUME: the workspace is rebuilt as the pristine checkout of the run's
// repository, not as any task left it: a passing task's undeclared change does not survive.
#[test]
fn the_workspace_is_rebuilt_from_the_pristine_checkout() {
    let p = Pack::playbook(&format!(
        "{}{}",
        ledgered("edit", "echo edited > README; echo new > new.txt; echo '{}'", ""),
        ledgered(
            "look",
            "cat README > \"$LEDGER.readme\"; test -e new.txt && echo has-new >> \"$LEDGER.readme\"; echo '{}'",
            "depends_on = [\"edit\"]"
        ),
    ));
    with_upstream_repo(&p);
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    let readme = format!("{}.readme", ledger.path.display());
    assert_eq!(
        std::fs::read_to_string(&readme).unwrap(),
        "edited\nhas-new\n"
    );
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "look");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["look"]);
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), "upstream\n");
}

// RFC-0002:C-PLAYBOOK-RESUME, C-PLAYBOOK-BUDGET: an attempt the SIGKILLed engine left running
// would go on working (and spending) outside every ceiling; the resume kills its whole group
// before anything else, then runs the task again.
#[test]
fn a_resume_kills_what_the_dead_engine_left_running() {
    // Unsandboxed: in the sandbox the attempt dies with the engine already (sandbox.rs).
    let p = crate::support::Pack::playbook(&crate::support::command(
        "slow",
        "if [ -e \"$PACK/second\" ]; then echo '{}'; exit 0; fi; touch \"$PACK/second\"; sleep 300 & echo $! > \"$PACK/bg.pid\"; touch \"$PACK/started\"; wait",
        "",
    ));
    let mut child = p
        .command(&p.run_args(&["--no-sandbox"]))
        .0
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::support::wait_for_file(&p.probe().join("started"), 20);
    child.kill().unwrap(); // SIGKILL: no stop, no shutdown
    child.wait().unwrap();
    let pid = crate::support::read_pid(&p.probe().join("bg.pid"));
    assert!(
        !crate::support::process_gone(pid),
        "the orphan outlived the engine"
    );

    let r = p.run(&["--resume", "--no-sandbox"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        crate::support::process_gone(pid),
        "the resume killed the orphan's group"
    );
    assert_eq!(p.row("slow")["status"], "pass");
}

// RFC-0002:C-PLAYBOOK-RESUME after a pack (issue 18): a run packs its git memory's loose
// objects when it ends, so a resume after it rebuilds the workspace from packed objects only;
// it goes on, commits onto the packed history, and leaves the memory whole and packed again.
#[test]
fn a_resume_after_the_memory_was_packed_goes_on_from_it() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        ledgered("one", "echo 1 > one.txt; echo '{}'", ""),
        ledgered(
            "two",
            "echo 2 > two.txt; echo '{}'",
            "depends_on = [\"one\"]"
        ),
        ledgered(
            "three",
            "echo 3 > three.txt; echo '{}'",
            "depends_on = [\"two\"]"
        ),
    ));
    with_upstream_repo(&p);
    let ledger = Ledger::new();
    assert_eq!(run_with(&p, &ledger, &[]).code, 0);
    let memory = p.state().join("runs").join(current(&p)).join("memory");
    let loose = || {
        std::fs::read_dir(memory.join("objects"))
            .unwrap()
            .flatten()
            .filter(|d| d.file_name().len() == 2)
            .map(|d| std::fs::read_dir(d.path()).unwrap().count())
            .sum::<usize>()
    };
    assert_eq!(loose(), 0, "the ended run's objects are all packed");
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "three");
    std::fs::remove_file(&ledger.path).unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ledger.entries(), ["three"]);
    assert_eq!(loose(), 0);
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&memory)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["fsck", "--strict", "--no-dangling"]);
    assert_eq!(git(&["show", "HEAD:three.txt"]), "3\n");
    for task in ["one", "two", "three"] {
        git(&[
            "rev-parse",
            "--verify",
            &format!("refs/crucible/tasks/{task}"),
        ]);
    }
}
