//! An engine outside the controller (a Kubernetes Job's pod, a `plan run` elsewhere) linked to
//! the controller that recorded its run: the controller's URL, its id of the run and the run's
//! token, handed to the engine in its environment (docs/controller.md, "Engines outside the
//! controller"). With them the engine answers its human routes and gates through the
//! controller's decisions polling protocol ([`crate::decision::controller`]) and reports its
//! session log to the controller ([`crate::link::Reporter`]); every exchange is a request the
//! engine initiates. The token is one of the engine's own `CRUCIBLE_*` settings: no task
//! receives it ([`crate::taskenv`]).

use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The controller's base URL as the engine reaches it.
pub const CONTROLLER_URL_ENV: &str = "CRUCIBLE_CONTROLLER_URL";
/// The controller's id of the run.
pub const CONTROLLER_RUN_ENV: &str = "CRUCIBLE_CONTROLLER_RUN";
/// The bearer token scoped to that run.
pub const RUN_TOKEN_ENV: &str = "CRUCIBLE_RUN_TOKEN";

/// The link to the controller, as the environment gives it.
#[derive(Clone)]
pub struct Link {
    /// Without a trailing slash.
    pub url: String,
    pub run: String,
    pub token: String,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("url", &self.url)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// The link in `get`'s variables: `None` when none of the three is set, an error naming
    /// what is missing or malformed when only some are.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Link>, String> {
        let vars = [CONTROLLER_URL_ENV, CONTROLLER_RUN_ENV, RUN_TOKEN_ENV].map(|n| (n, get(n)));
        if vars.iter().all(|(_, v)| v.is_none()) {
            return Ok(None);
        }
        let missing: Vec<&str> = vars
            .iter()
            .filter(|(_, v)| v.as_deref().is_none_or(|v| v.trim().is_empty()))
            .map(|(n, _)| *n)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the link to a controller needs {CONTROLLER_URL_ENV}, {CONTROLLER_RUN_ENV} and {RUN_TOKEN_ENV}: {} not set",
                missing.join(", ")
            ));
        }
        let [(_, Some(url)), (_, Some(run)), (_, Some(token))] = vars else {
            unreachable!("each was checked set");
        };
        let url = url.trim().trim_end_matches('/').to_string();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "{CONTROLLER_URL_ENV}: {url:?} is not an http(s) URL"
            ));
        }
        let run = run.trim().to_string();
        if !run
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!("{CONTROLLER_RUN_ENV}: {run:?} is not a run id"));
        }
        Ok(Some(Link {
            url,
            run,
            token: token.trim().to_string(),
        }))
    }

    /// The link in the process environment.
    pub fn from_env() -> Result<Option<Link>, String> {
        Link::from_vars(|n| std::env::var(n).ok())
    }
}

/// Where a stop the controller asks for goes: the run's own stop channel, as SIGTERM's.
static STOP: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedSender<()>>> =
    std::sync::Mutex::new(None);

/// Delivers a stop the linked controller asks for (its run was stopped there) to `stop`, the
/// channel the run's operator stops arrive on: the run then stops exactly as on SIGTERM.
pub fn stop_to(stop: tokio::sync::mpsc::UnboundedSender<()>) {
    *STOP.lock().unwrap_or_else(|e| e.into_inner()) = Some(stop);
}

/// Whether the controller's answer says the run was stopped there: HTTP 410 with `"stopped":
/// true` in its body. A 401 (a token refused) never is.
pub fn says_stopped(status: u16, body: &str) -> bool {
    status == 410
        && serde_json::from_str::<serde_json::Value>(body)
            .is_ok_and(|v| v["stopped"] == serde_json::Value::Bool(true))
}

/// The controller says the run was stopped there: the run stops (once), as on SIGTERM.
pub fn stopped_by_controller() {
    let stop = STOP.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(stop) = stop {
        eprintln!("stopping: the run was stopped on the controller");
        let _ = stop.send(());
    }
}

/// The most lines one report carries.
pub const MAX_BATCH_LINES: usize = 500;
/// The most bytes of lines one report carries (a longer single line goes alone).
pub const MAX_BATCH_BYTES: usize = 1 << 20;
/// Each report exchange's own deadline.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed exchange grows from this to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// How often the log is looked at when nothing wakes the reporter.
const LOOK: Duration = Duration::from_millis(500);
/// How long the reporter goes without an exchange while the log does not grow: a stop on the
/// controller reaches an engine whose tasks are quiet within about this.
const HEARTBEAT: Duration = Duration::from_secs(3);
/// Refusals in a row (other than a dead token) after which the reporter gives up.
const MAX_REFUSALS: u32 = 3;

enum Signal {
    /// The log may have grown.
    Wake,
    /// The run ended: report what is left until this instant, then stop.
    Finish(Instant),
}

/// Reports a linked run's session log to its controller (docs/controller.md, "Engines outside
/// the controller"): on its own thread, from the engine's own log file (never from anything a
/// task prints), in order, in bounded batches, from the line the controller says it holds, so a
/// resumed engine or a restarted controller neither loses nor repeats a line. A controller that
/// cannot be reached is retried with a growing pause; nothing here fails or waits on the run,
/// and at the run's end what is left is reported for a grace, then given up quietly (the log
/// stays in the state directory).
pub struct Reporter {
    signal: mpsc::Sender<Signal>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reporter {
    /// Starts reporting `log`, the session log of the engine's run `engine_run`.
    pub fn start(link: Link, engine_run: String, log: PathBuf) -> Reporter {
        let (signal, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("crucible-report".into())
            .spawn(move || {
                Tail {
                    link,
                    engine_run,
                    log,
                    rx,
                    deadline: None,
                    last: Instant::now(),
                }
                .run()
            })
            .ok();
        Reporter { signal, thread }
    }

    /// The log may have grown: look now rather than at the next tick.
    pub fn wake(&self) {
        let _ = self.signal.send(Signal::Wake);
    }

    /// The run ended: reports what is left for at most `grace`, then returns.
    pub fn finish(mut self, grace: Duration) {
        let _ = self.signal.send(Signal::Finish(Instant::now() + grace));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reporter's thread.
struct Tail {
    link: Link,
    engine_run: String,
    log: PathBuf,
    rx: mpsc::Receiver<Signal>,
    deadline: Option<Instant>,
    /// When the last exchange was tried.
    last: Instant,
}

/// How an exchange went.
enum Sent {
    /// The controller's acknowledged line count, and the engine run whose log it holds.
    Held(u64, Option<String>),
    /// The token is dead (the run ended, or was stopped on the controller, which stops the run
    /// too): nothing more to do.
    Dead,
    /// Refused for another reason: the acknowledged line is agreed again.
    Refused,
    /// Not reached, or a 429 or 5xx: tried again after a pause.
    Transient,
}

impl Tail {
    fn url(&self) -> String {
        format!("{}/v1/runs/{}/report", self.link.url, self.link.run)
    }

    fn exchange(&mut self, body: Option<&serde_json::Value>) -> Sent {
        self.last = Instant::now();
        let method = if body.is_some() { "POST" } else { "GET" };
        let timeout = match self.deadline {
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(100), EXCHANGE_TIMEOUT),
            None => EXCHANGE_TIMEOUT,
        };
        let a = match crucible_agent::http::send_json(
            method,
            &self.url(),
            Some(&self.link.token),
            body,
            timeout,
        ) {
            Ok(a) => a,
            Err(_) => return Sent::Transient,
        };
        match a.status {
            200..=299 => {
                let v: serde_json::Value = serde_json::from_str(&a.body).unwrap_or_default();
                match v["acknowledged"].as_u64() {
                    Some(n) => Sent::Held(n, v["engine_run"].as_str().map(str::to_string)),
                    None => Sent::Refused,
                }
            }
            401 => Sent::Dead,
            s if says_stopped(s, &a.body) => {
                stopped_by_controller();
                Sent::Dead
            }
            429 | 500..=599 => Sent::Transient,
            _ => Sent::Refused,
        }
    }

    /// Waits up to `pause` (never past the deadline), taking signals; false once the deadline
    /// has passed.
    fn wait(&mut self, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        loop {
            let now = Instant::now();
            if self.deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let end = self.deadline.map_or(until, |d| d.min(until));
            if now >= end {
                return true;
            }
            match self.rx.recv_timeout(end - now) {
                Ok(Signal::Wake) => {
                    if self.deadline.is_none() && pause == LOOK {
                        return true;
                    }
                }
                Ok(Signal::Finish(d)) => {
                    self.deadline = Some(d);
                    return true;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return true,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The engine is gone without finishing: report for a moment more.
                    self.deadline
                        .get_or_insert_with(|| Instant::now() + Duration::from_secs(5));
                }
            }
        }
    }

    fn run(mut self) {
        let mut held: Option<(u64, Option<u64>)> = None; // (acknowledged lines, their byte end)
        let (mut pause, mut refusals) = (FIRST_PAUSE, 0u32);
        loop {
            let (acked, end) = match held {
                Some(h) => h,
                None => match self.exchange(None) {
                    Sent::Held(n, run) => {
                        if run.is_some_and(|r| r != self.engine_run) {
                            return; // the controller holds another engine run's log
                        }
                        held = Some((n, None));
                        continue;
                    }
                    Sent::Dead | Sent::Refused => return,
                    Sent::Transient => {
                        if !self.wait(pause) {
                            return;
                        }
                        pause = (pause * 2).min(MAX_PAUSE);
                        continue;
                    }
                },
            };
            let (lines, next_end) = match read_lines(&self.log, acked, end) {
                Some(r) => r,
                None => return, // the controller holds more than the log has
            };
            if lines.is_empty() {
                if self.deadline.is_some() {
                    return;
                }
                // Quiet: asked now and then all the same, so a stop on the controller is heard.
                if self.last.elapsed() >= HEARTBEAT {
                    if let Sent::Dead = self.exchange(None) {
                        return;
                    }
                }
                if !self.wait(LOOK) {
                    return;
                }
                held = Some((acked, Some(next_end)));
                continue;
            }
            let body = serde_json::json!({
                "engine_run": self.engine_run,
                "from": acked,
                "lines": lines,
            });
            match self.exchange(Some(&body)) {
                Sent::Held(n, _) => {
                    let whole = n == acked + lines.len() as u64;
                    held = Some((n, whole.then_some(next_end)));
                    (pause, refusals) = (FIRST_PAUSE, 0);
                }
                Sent::Dead => return,
                Sent::Refused => {
                    refusals += 1;
                    if refusals >= MAX_REFUSALS {
                        return;
                    }
                    held = None;
                }
                Sent::Transient => {
                    if !self.wait(pause) {
                        return;
                    }
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }
}

/// The complete lines of `log` after its first `skip` (which end at byte `end`, when known),
/// as many as one report carries, and the byte where they end; `None` when the log has fewer
/// than `skip` lines. A last line not yet ended by its newline is left for later.
fn read_lines(log: &std::path::Path, skip: u64, end: Option<u64>) -> Option<(Vec<String>, u64)> {
    let Ok(f) = std::fs::File::open(log) else {
        return (skip == 0).then(|| (Vec::new(), 0));
    };
    let mut r = std::io::BufReader::new(f);
    let mut at = 0u64;
    let mut line = Vec::new();
    match end {
        Some(e) => at = r.seek(SeekFrom::Start(e)).ok()?,
        None => {
            for _ in 0..skip {
                line.clear();
                let n = r.read_until(b'\n', &mut line).ok()?;
                if n == 0 || line.last() != Some(&b'\n') {
                    return None;
                }
                at += n as u64;
            }
        }
    }
    let (mut lines, mut bytes) = (Vec::new(), 0usize);
    while lines.len() < MAX_BATCH_LINES {
        line.clear();
        let n = r.read_until(b'\n', &mut line).ok()?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        if !lines.is_empty() && bytes + n > MAX_BATCH_BYTES {
            break;
        }
        lines.push(String::from_utf8_lossy(&line[..n - 1]).into_owned());
        (bytes, at) = (bytes + n, at + n as u64);
    }
    Some((lines, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(set: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            set.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn all_three_or_none() {
        assert!(Link::from_vars(vars(&[])).unwrap().is_none());
        let err = Link::from_vars(vars(&[(CONTROLLER_URL_ENV, "http://c")])).unwrap_err();
        assert!(
            err.contains("CRUCIBLE_CONTROLLER_RUN, CRUCIBLE_RUN_TOKEN not set"),
            "{err}"
        );
        let link = Link::from_vars(vars(&[
            (CONTROLLER_URL_ENV, "http://c:1/"),
            (CONTROLLER_RUN_ENV, "0192-ab"),
            (RUN_TOKEN_ENV, "cru_x"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (link.url.as_str(), link.run.as_str()),
            ("http://c:1", "0192-ab")
        );
        assert!(
            !format!("{link:?}").contains("cru_x"),
            "the token is never printed"
        );
        let err = Link::from_vars(vars(&[
            (CONTROLLER_URL_ENV, "http://c"),
            (CONTROLLER_RUN_ENV, "../x"),
            (RUN_TOKEN_ENV, "t"),
        ]))
        .unwrap_err();
        assert!(err.contains("is not a run id"), "{err}");
    }
}
