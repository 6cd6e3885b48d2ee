//! Who answers a run's human-decided routes (RFC-0002:C-HUMAN-DECISION): the controller named
//! by `CRUCIBLE_DECISIONS_URL`, which the engine polls; or, with none, the person at the terminal
//! `plan run` was launched on. The terminal is shown the same evidence a controller would show
//! (as text, every value from outside escaped), and its answer is held to the same rules
//! (`crucible_engine::decision::check_answer`): each question exactly its options, one or for a
//! multiple question one or more distinct ones, never `uncertain`, and a note within the bound.
//! A runbook's gate (issue 15) is asked the same way: its evidence is the stage's summary and
//! artifacts, its one question `approve` (yes or no). While it asks, the live view holds its
//! redraws ([`TERMINAL`]), and draws afresh below the exchange after ([`ASKED`]).

use anyhow::{anyhow, Result};
use crucible_engine::decision::controller::{self, Controller};
use crucible_engine::decision::{
    self, Answer, Bounds, DecideError, Decider, Polled, QuestionView, Request, State,
};
use crucible_plan::terminal::escape;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// Held while the terminal asks: the live view does not draw meanwhile.
pub static TERMINAL: Mutex<()> = Mutex::new(());
/// How many exchanges have been shown: the live view's frame above one is not redrawn over it.
pub static ASKED: AtomicU64 = AtomicU64::new(0);

/// Who answers: the controller `CRUCIBLE_DECISIONS_URL` names, else the controller the run is
/// linked to (`CRUCIBLE_CONTROLLER_URL`, `_RUN` and `CRUCIBLE_RUN_TOKEN`: an engine outside the
/// controller that recorded its run), else the terminal where stdin and stderr are both
/// terminals, else no one.
pub fn decider() -> Result<Option<Arc<dyn Decider>>> {
    let poll = || -> Result<Duration> {
        let ms = match std::env::var(controller::POLL_MS_ENV) {
            Ok(t) => t
                .trim()
                .parse()
                .map_err(|_| anyhow!("{}: {t:?} is not a whole number", controller::POLL_MS_ENV))?,
            Err(_) => controller::DEFAULT_POLL_MS,
        };
        Ok(Duration::from_millis(ms.max(1)))
    };
    if let Ok(url) = std::env::var(controller::URL_ENV) {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(anyhow!(
                "{}: {url:?} is not an http(s) URL",
                controller::URL_ENV
            ));
        }
        let token = std::env::var(controller::TOKEN_ENV).ok();
        let c = Controller::new(&url, token, poll()?);
        return Ok(Some(Arc::new(c)));
    }
    if let Some(link) = crucible_engine::link::Link::from_env().map_err(|e| anyhow!(e))? {
        return Ok(Some(Arc::new(Controller::linked(&link, poll()?))));
    }
    Ok(Terminal::here().map(|t| Arc::new(t) as Arc<dyn Decider>))
}

/// Who would answer, for `check` and `plan show`; `None` when no one would.
pub fn describe() -> Option<String> {
    decider().ok().flatten().map(|d| d.describe())
}

/// The operator's bounds on evidence and notes (`CRUCIBLE_MAX_EVIDENCE_BYTES`,
/// `CRUCIBLE_MAX_DECISION_NOTE_BYTES`).
pub fn bounds() -> Result<Bounds> {
    let read = |var: &str, default: u64| -> Result<u64> {
        match std::env::var(var) {
            Ok(t) => t
                .trim()
                .parse()
                .map_err(|_| anyhow!("{var}: {t:?} is not a whole number of bytes")),
            Err(_) => Ok(default),
        }
    };
    Ok(Bounds {
        evidence_bytes: read(
            decision::MAX_EVIDENCE_BYTES_ENV,
            decision::DEFAULT_MAX_EVIDENCE_BYTES,
        )?,
        note_bytes: read(
            decision::MAX_NOTE_BYTES_ENV,
            decision::DEFAULT_MAX_NOTE_BYTES as u64,
        )? as usize,
    })
}

/// The terminal `plan run` was launched on.
pub struct Terminal {
    /// Answers so far of each request being asked, by route.
    progress: Mutex<HashMap<String, Progress>>,
    /// Requests the engine stopped waiting on: their exchange ends at once.
    closed: Mutex<HashSet<String>>,
}

#[derive(Default)]
struct Progress {
    shown: bool,
    answers: BTreeMap<String, Vec<String>>,
}

/// The terminal's lines, read by one thread for the life of the process: an exchange cut short
/// (its request expired) leaves no reader behind to steal the next exchange's lines.
fn lines() -> &'static Mutex<Receiver<Option<String>>> {
    static LINES: OnceLock<Mutex<Receiver<Option<String>>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            loop {
                let mut line = String::new();
                match stdin.lock().read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(None);
                        return;
                    }
                    Ok(_) => {
                        if tx.send(Some(line)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Mutex::new(rx)
    })
}

/// What one wait for a line came to.
enum Read {
    Line(String),
    Closed,
    /// `until` passed, or the engine stopped waiting on the request.
    Gone,
}

impl Terminal {
    pub fn here() -> Option<Terminal> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal()).then(|| Terminal {
            progress: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashSet::new()),
        })
    }

    fn is_closed(&self, route: &str) -> bool {
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(route)
    }

    fn read(&self, route: &str, until: SystemTime) -> Read {
        let rx = lines().lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let left = until.duration_since(SystemTime::now()).unwrap_or_default();
            if left.is_zero() || self.is_closed(route) {
                return Read::Gone;
            }
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(Some(line)) => return Read::Line(line),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Read::Closed,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Shows `prompt` and reads the line typed: `None` when the wait ended first.
    fn ask_line(
        &self,
        err: &mut impl Write,
        prompt: &str,
        route: &str,
        until: SystemTime,
    ) -> Result<Option<String>, DecideError> {
        let _ = write!(err, "{prompt}");
        let _ = err.flush();
        match self.read(route, until) {
            Read::Line(l) => Ok(Some(l)),
            Read::Closed => Err(DecideError::Refused(
                "the terminal closed before an answer".into(),
            )),
            Read::Gone => {
                let _ = writeln!(err);
                Ok(None)
            }
        }
    }

    /// Asks `req`'s questions, then its note, from where an earlier wait left off.
    fn ask(&self, req: &Request, until: SystemTime) -> Result<State, DecideError> {
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let p = progress.entry(req.route.clone()).or_default();
        let mut err = std::io::stderr().lock();
        if !p.shown {
            p.shown = true;
            ASKED.fetch_add(1, Ordering::SeqCst);
            let _ = write!(err, "{}", render(req));
        }
        for q in &req.questions {
            if p.answers.contains_key(&q.id) {
                continue;
            }
            loop {
                let Some(line) = self.ask_line(&mut err, &prompt(q), &req.route, until)? else {
                    return Ok(State::Open);
                };
                let chosen = parse_choice(q, &line);
                match decision::check_question(q, &chosen) {
                    Ok(()) => {
                        p.answers.insert(q.id.clone(), chosen);
                        break;
                    }
                    Err(why) => {
                        let _ = writeln!(err, "  not an answer: {}", escape(&why));
                    }
                }
            }
        }
        let note = loop {
            let ask = format!(
                "note (optional, at most {} bytes; empty for none)> ",
                req.max_note_bytes
            );
            let Some(line) = self.ask_line(&mut err, &ask, &req.route, until)? else {
                return Ok(State::Open);
            };
            let note = line.trim_end_matches(['\r', '\n']).to_string();
            if note.len() > req.max_note_bytes {
                let _ = writeln!(err, "  not a note: {} bytes, over the bound", note.len());
                continue;
            }
            break (!note.is_empty()).then_some(note);
        };
        let answer = Answer {
            principal: principal(),
            time: decision::rfc3339(SystemTime::now()),
            // The terminal's answer names the evidence it showed.
            digest: req.digest.clone(),
            note,
            answers: std::mem::take(&mut p.answers),
        };
        // The same rules as any answer, so a terminal can never give what a controller could not.
        decision::check_answer(req, &req.digest, &answer).map_err(DecideError::Refused)?;
        let _ = writeln!(err, "decision recorded for route {}", escape(&req.route));
        Ok(State::Answered(answer))
    }
}

impl Decider for Terminal {
    fn via(&self) -> &'static str {
        "terminal"
    }

    fn describe(&self) -> String {
        "the terminal".into()
    }

    fn open(&self, req: &Request) -> Result<Polled, DecideError> {
        Ok(polled(req, State::Open))
    }

    /// Holds the terminal (one exchange at a time) and asks until answered or `until`.
    fn poll(&self, req: &Request, until: SystemTime) -> Result<Polled, DecideError> {
        let held = loop {
            if let Ok(held) = TERMINAL.try_lock() {
                break held;
            }
            if SystemTime::now() >= until || self.is_closed(&req.route) {
                return Ok(polled(req, State::Open));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let state = self.ask(req, until);
        drop(held);
        state.map(|s| polled(req, s))
    }

    fn close(&self, req: &Request, _withdraw: bool) {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        closed.insert(req.route.clone());
    }
}

fn polled(req: &Request, state: State) -> Polled {
    Polled {
        state,
        digest: req.digest.clone(),
        expires_at: req.expires_at.clone(),
    }
}

/// The person at the terminal, as the decision records them.
fn principal() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        // SAFETY: getuid(2) takes nothing and always succeeds.
        .unwrap_or_else(|_| format!("uid {}", unsafe { libc::getuid() }));
    format!("terminal:{user}")
}

/// A line as the options it names: each token (comma- or space-separated) an option by its
/// number in the list or by itself.
fn parse_choice(q: &QuestionView, line: &str) -> Vec<String> {
    line.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| match t.parse::<usize>() {
            Ok(n) if n >= 1 && n <= q.options.len() => q.options[n - 1].clone(),
            _ => t.to_string(),
        })
        .collect()
}

fn prompt(q: &QuestionView) -> String {
    let mut out = format!("\nquestion {} ({}", escape(&q.id), q.kind);
    if q.multiple {
        out.push_str(", one or more: separate them with commas");
    }
    out.push_str(&format!("): {}\n", escape(&q.ask)));
    for (n, o) in q.options.iter().enumerate() {
        out.push_str(&format!("  {}) {}\n", n + 1, escape(o)));
    }
    out.push_str("answer> ");
    out
}

/// The request's evidence as text: every part the controller shows, every value escaped.
pub fn render(req: &Request) -> String {
    let ev = &req.evidence;
    if ev.get("gate").is_some() {
        return render_gate(req);
    }
    let mut out = format!(
        "\ndecision requested: route {} of run {}, open until {}\nevidence {}\n",
        escape(&req.route),
        escape(&req.run),
        escape(&req.expires_at),
        escape(&req.digest)
    );
    if let Some(review) = ev["review"].as_str() {
        out.push_str("review:\n");
        for line in review.lines() {
            out.push_str(&format!("  | {}\n", escape(line)));
        }
    }
    let run = &ev["run"];
    let f = |k: &str| run[k].as_f64().unwrap_or_default();
    out.push_str(&format!(
        "run: spent ${:.2} of ${:.2}, {:.1}s of {}s elapsed\n",
        f("spent_usd"),
        f("max_cost_usd"),
        f("elapsed_secs"),
        run["max_secs"]
    ));
    for (name, input) in ev["inputs"].as_object().into_iter().flatten() {
        out.push_str(&format!(
            "input {}: {}\n",
            escape(name),
            escape(input["status"].as_str().unwrap_or_default())
        ));
        if !input["output"].is_null() {
            let pretty = serde_json::to_string_pretty(&input["output"]).unwrap_or_default();
            for line in pretty.lines() {
                out.push_str(&format!("    {}\n", escape(line)));
            }
        }
    }
    for (producer, files) in ev["files"].as_object().into_iter().flatten() {
        for f in files.as_array().into_iter().flatten() {
            out.push_str(&format!(
                "file {}/{} ({} bytes, {})\n",
                escape(producer),
                escape(f["path"].as_str().unwrap_or_default()),
                f["bytes"],
                escape(f["sha256"].as_str().unwrap_or_default())
            ));
            match f.get("text").and_then(Value::as_str) {
                Some(text) => {
                    for line in text.lines() {
                        out.push_str(&format!("    {}\n", escape(line)));
                    }
                }
                None => out.push_str("    (binary: shown by the controller, not here)\n"),
            }
        }
    }
    for g in ev["gated"].as_array().into_iter().flatten() {
        let labels: Vec<&str> = (g["labels"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "starts {} ({}, needs {}) when {} is {}\n",
            escape(g["task"].as_str().unwrap_or_default()),
            escape(g["kind"].as_str().unwrap_or_default()),
            escape(g["needs"].as_str().unwrap_or_default()),
            escape(g["question"].as_str().unwrap_or_default()),
            escape(&labels.join(" or "))
        ));
    }
    out
}

/// A runbook gate's evidence as text: the gate, the stage and its summary, and each artifact by
/// path, size and digest with its text (a binary one by size and digest only).
fn render_gate(req: &Request) -> String {
    let ev = &req.evidence;
    let text = |v: &Value| escape(v.as_str().unwrap_or_default()).into_owned();
    let mut out = format!(
        "\ngate {} of runbook {} (task {}): {}\n  open until {}, evidence {}\n  stage {}: {}\n",
        text(&ev["gate"]["id"]),
        text(&ev["runbook"]["name"]),
        text(&ev["task"]),
        text(&ev["gate"]["prompt"]),
        escape(&req.expires_at),
        escape(&req.digest),
        text(&ev["stage"]["name"]),
        text(&ev["stage"]["summary"]),
    );
    for a in ev["artifacts"].as_array().into_iter().flatten() {
        let seen = match a.get("unread") {
            Some(why) => format!("not read: {}", text(why)),
            None => format!("{} ({} bytes)", text(&a["sha256"]), a["bytes"]),
        };
        out.push_str(&format!("  artifact {}  {seen}\n", text(&a["path"])));
        match (a.get("text").and_then(Value::as_str), a.get("base64")) {
            (Some(body), _) => {
                for line in body.lines() {
                    out.push_str(&format!("    | {}\n", escape(line)));
                }
            }
            (None, Some(_)) => out.push_str("    (binary: shown by the controller, not here)\n"),
            (None, None) => {}
        }
    }
    out
}
