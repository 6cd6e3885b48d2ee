//! Shared helpers: a pack written into a tempdir, run through the real binary.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_crucible");

/// The launch variables test tasks report through: the pack directory, a ledger file, and a
/// crash test's mark.
pub const OBSERVED_ENV: [&str; 3] = ["PACK", "LEDGER", "CRASH_MARK"];

/// Where tests observe tasks from outside their sandbox: each pack's probe directory and each
/// ledger live below it, and every test manifest exposes it (`[sandbox] expose`). The pack and
/// the state directory stay hidden from tasks (issue 11), so a task reports through here.
pub fn probe_root() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("probes");
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// A fresh directory below [`probe_root`].
pub fn probe_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(probe_root()).expect("probe dir")
}

/// The manifest tables test packs declare: the variables tasks report through, given to every
/// task (a task gets nothing else from the launch environment), and the probe root exposed.
pub fn observed_tables() -> String {
    format!("{}{}", observed_env(), exposed_probes())
}

fn observed_env() -> String {
    format!("\n[env]\npass = {OBSERVED_ENV:?}\n")
}

fn exposed_probes() -> String {
    format!(
        "\n[sandbox]\nexpose = [{:?}]\n",
        probe_root().to_string_lossy()
    )
}

/// A pack in a tempdir: `crucible.toml` plus whatever files a test adds. Its tasks see `$PACK`
/// as its probe directory, which holds a copy of every file [`Pack::file`] adds: the pack itself
/// is out of their reach.
pub struct Pack {
    dir: tempfile::TempDir,
    probe: tempfile::TempDir,
}

/// What one `crucible` invocation did.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Pack {
    /// A playbook manifest: `[workflow] type = "playbook"` followed by `body` (task tables etc).
    pub fn playbook(body: &str) -> Pack {
        Pack::with_manifest(&format!("[workflow]\ntype = \"playbook\"\n{body}"))
    }

    /// A pack whose manifest is `manifest` plus [`observed_tables`], each table unless it
    /// declares its own.
    pub fn with_manifest(manifest: &str) -> Pack {
        let dir = tempfile::tempdir().expect("tempdir");
        let has = |table: &str| manifest.lines().any(|l| l.trim() == table);
        let mut manifest = manifest.to_string();
        if !has("[env]") {
            manifest.push_str(&observed_env());
        }
        if !has("[sandbox]") {
            manifest.push_str(&exposed_probes());
        }
        std::fs::write(dir.path().join("crucible.toml"), manifest).unwrap();
        Pack {
            dir,
            probe: probe_dir(),
        }
    }

    /// The directory tasks see as `$PACK`: where they report, and a copy of the pack's files.
    pub fn probe(&self) -> &Path {
        self.probe.path()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    pub fn workspace(&self) -> PathBuf {
        self.path().join("workspace")
    }

    /// Adds a file to the pack, and its copy to the probe.
    pub fn file(&self, rel: &str, content: &str) -> &Pack {
        for root in [self.path(), self.probe()] {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        self
    }

    /// `plan run` with generous ceilings unless `args` set their own.
    pub fn run(&self, args: &[&str]) -> Ran {
        self.command(&self.run_args(args)).run()
    }

    pub fn run_args(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<String> = vec![
            "plan".into(),
            "run".into(),
            "--manifest".into(),
            self.path().join("crucible.toml").to_string_lossy().into(),
        ];
        if !args.contains(&"--max-cost") && !args.contains(&"--no-max-cost") {
            all.extend(["--max-cost".into(), "5".into()]);
        }
        if !args.contains(&"--max-time") && !args.contains(&"--no-max-time") {
            all.extend(["--max-time".into(), "60s".into()]);
        }
        all.extend(
            args.iter()
                .filter(|a| !a.starts_with("--no-max"))
                .map(|a| a.to_string()),
        );
        all
    }

    /// `crucible check --manifest` of this pack.
    pub fn check(&self) -> Cmd {
        let manifest = self.path().join("crucible.toml");
        self.command(&[
            "check".into(),
            "--manifest".into(),
            manifest.to_string_lossy().into(),
        ])
    }

    pub fn command(&self, args: &[String]) -> Cmd {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.path())
            .env("PACK", self.probe())
            .stdin(Stdio::null());
        Cmd(c)
    }

    /// The session log of the most recent run, one value per line.
    pub fn log(&self) -> Vec<Value> {
        let current = std::fs::read_to_string(self.state().join("current")).expect("a run");
        let path = self
            .state()
            .join("runs")
            .join(current.trim())
            .join("session.jsonl");
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// The `task_result` row of `task` in the latest run (exactly one, or the test fails).
    pub fn row(&self, task: &str) -> Value {
        let rows: Vec<Value> = self
            .log()
            .into_iter()
            .filter(|l| l["kind"] == "task_result" && l["task"] == task)
            .collect();
        assert_eq!(rows.len(), 1, "exactly one row for {task}: {rows:?}");
        rows.into_iter().next().unwrap()
    }

    pub fn has_row(&self, task: &str) -> bool {
        self.log()
            .iter()
            .any(|l| l["kind"] == "task_result" && l["task"] == task)
    }

    pub fn shutdown(&self) -> Value {
        let log = self.log();
        let shutdowns: Vec<&Value> = log.iter().filter(|l| l["kind"] == "shutdown").collect();
        assert_eq!(shutdowns.len(), 1, "exactly one shutdown");
        assert_eq!(log.last().unwrap()["kind"], "shutdown", "shutdown is last");
        shutdowns[0].clone()
    }

    /// The JSON a task wrote to `$PACK/out/<name>.json` (tests have tasks save inputs).
    pub fn saved(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.probe().join("out").join(format!("{name}.json")))
            .unwrap_or_else(|e| panic!("out/{name}.json: {e}"));
        serde_json::from_str(&text).unwrap()
    }
}

pub struct Cmd(pub Command);

impl Cmd {
    pub fn env(mut self, k: &str, v: &str) -> Cmd {
        self.0.env(k, v);
        self
    }

    pub fn run(mut self) -> Ran {
        Ran::from(self.0.output().expect("the binary runs"))
    }
}

impl From<std::process::Output> for Ran {
    fn from(out: std::process::Output) -> Ran {
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Polls `probe` every 100 ms for at most `secs` seconds until it gives a value; while it
/// gives `Err(why)`, `why` is the failure's message once the time is up.
pub fn poll<T>(secs: u64, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        match probe() {
            Ok(v) => return v,
            Err(why) => assert!(std::time::Instant::now() < until, "{why}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A loopback port nothing listens on, for an unreachable peer. Port 1 lies outside the
/// kernel's ephemeral range, so no other test's listener can be given it, as a freed ephemeral
/// port can be while the test still counts on it being closed.
pub const CLOSED_PORT: u16 = 1;

/// A loopback HTTP server answering every connection `HTTP/1.0 200 OK`: its port. What a task
/// with a network reaches and one without cannot.
pub fn loopback_server() -> u16 {
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            use std::io::{Read, Write};
            let mut conn = conn;
            let _ = conn.read(&mut [0u8; 512]);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\n\r\nhi");
        }
    });
    port
}

/// A `[[workflow.task]]` command table.
pub fn command(name: &str, run: &str, extra: &str) -> String {
    format!(
        "[[workflow.task]]\nname = \"{name}\"\nkind = \"command\"\nrun = '''{run}'''\n{extra}\n"
    )
}

/// A shell snippet that saves the task's inputs JSON to `$PACK/out/<task>.json` and prints `out`.
pub fn save_inputs_then(out: &str) -> String {
    format!("mkdir -p \"$PACK/out\"; cp \"$CRUCIBLE_INPUTS_FILE\" \"$PACK/out/$CRUCIBLE_TASK.json\"; echo '{out}'")
}

/// Whether a process is gone (a zombie awaiting a reaper counts as gone: it runs nothing).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
            .is_some_and(|s| s == 'Z' || s == 'X'),
    }
}

/// Blocks until `path` exists (the event a test waits for), failing after `secs`.
/// The process id a task wrote to `path`.
pub fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .expect("a pid")
}

pub fn wait_for_file(path: &Path, secs: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < until,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The agent CLI `name` as `scripts/install-agents.sh` installed it (`CRUCIBLE_AGENT_CLIS`, else
/// `target/agent-clis`), or `None` with a loud message: CI installs them, so there the test runs.
pub fn agent_cli(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("CRUCIBLE_AGENT_CLIS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/agent-clis"),
        PathBuf::from,
    );
    let bin = root.join("node_modules/.bin").join(name);
    if bin.exists() {
        return Some(bin);
    }
    eprintln!(
        "SKIPPED: the {name} CLI is not installed at {} (run scripts/install-agents.sh)",
        bin.display()
    );
    None
}

/// An argument for `sleep` that no other process uses (`3000.<unique digits>` seconds): it names
/// the process on the host, where the pid a task sees in its own PID namespace means nothing.
pub fn marked_sleep() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("3000.{}{n:03}{t:09}", std::process::id())
}

/// The live (not zombie) host processes running `sleep <mark>`.
pub fn sleeping(mark: &str) -> Vec<u32> {
    let want = format!("sleep\0{mark}\0");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmd.ends_with(want.as_bytes()) && !process_gone(*pid)
        })
        .collect()
}

/// Fails unless a `sleep <mark>` is live within 10 s: a task's `touch` after `sleep &` can land
/// before the forked shell has exec'd `sleep`.
pub fn assert_sleeping(mark: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sleeping(mark).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "sleep {mark} never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Fails unless every `sleep <mark>` is gone within 10 s.
pub fn assert_all_gone(mark: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sleeping(mark).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "sleep {mark} survived: {:?}",
            sleeping(mark)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Writes `<probe>/<task>.settled` once `task`'s row is in the current run's log: a task waits
/// on that file for another's settlement, since the log is out of its reach.
pub fn announce_settled(p: &Pack, task: &str) -> std::thread::JoinHandle<()> {
    let (state, flag) = (p.state(), p.probe().join(format!("{task}.settled")));
    let needle = format!("\"task\":\"{task}\"");
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < until {
            let log = std::fs::read_to_string(state.join("current"))
                .ok()
                .and_then(|c| {
                    std::fs::read_to_string(state.join("runs").join(c.trim()).join("session.jsonl"))
                        .ok()
                });
            if log.is_some_and(|l| l.contains(&needle)) {
                std::fs::write(&flag, "").unwrap();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    })
}

/// Compares `actual` with the snapshot file `tests/conformance/snapshots/<name>`, exactly;
/// `CRUCIBLE_UPDATE_SNAPSHOTS=1` rewrites the file instead.
pub fn snapshot(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/conformance/snapshots")
        .join(name);
    if std::env::var_os("CRUCIBLE_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (CRUCIBLE_UPDATE_SNAPSHOTS=1 writes it)",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "{name} changed (CRUCIBLE_UPDATE_SNAPSHOTS=1 rewrites it)"
    );
}
