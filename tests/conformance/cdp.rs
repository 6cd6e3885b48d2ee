//! A small client of the Chrome DevTools protocol over a WebSocket, enough for the web UI's
//! browser tests: one headless Chromium per test binary (started on first use, killed when the
//! binary exits), an isolated browser context (its own cookies and storage) per signed-in
//! person, pages driven by `Runtime.evaluate`.
//!
//! Without Debian's `chromium` on the PATH the browser tests skip, saying so, unless
//! `CRUCIBLE_REQUIRE_CHROMIUM` is set (CI sets it), where they fail.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// The shared browser: its DevTools WebSocket URL.
pub(crate) struct Browser {
    ws: String,
    port: u16,
}

/// The browser, or `None` (the test then returns) when Chromium is not installed and not
/// required.
pub(crate) fn browser() -> Option<&'static Browser> {
    static BROWSER: OnceLock<Option<Browser>> = OnceLock::new();
    BROWSER
        .get_or_init(|| {
            let exe = ["chromium", "chromium-browser"].into_iter().find(|exe| {
                Command::new(exe)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            });
            let Some(exe) = exe else {
                assert!(
                    std::env::var_os("CRUCIBLE_REQUIRE_CHROMIUM").is_none(),
                    "CRUCIBLE_REQUIRE_CHROMIUM is set and no `chromium` is installed"
                );
                eprintln!("SKIPPED: the web UI's browser tests need Debian's `chromium` (apt-get install chromium)");
                return None;
            };
            Some(launch(exe))
        })
        .as_ref()
}

/// Starts Chromium from a thread that lives as long as the test binary: the browser gets
/// SIGKILL when that thread (so the binary) ends (PR_SET_PDEATHSIG).
fn launch(exe: &'static str) -> Browser {
    let profile = profile_dir();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--metrics-recording-only",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("starting chromium");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let ws = loop {
            let line = lines
                .next()
                .expect("chromium exited before it listened")
                .unwrap();
            if let Some(url) = line.strip_prefix("DevTools listening on ") {
                break url.trim().to_string();
            }
        };
        let port = ws
            .strip_prefix("ws://127.0.0.1:")
            .and_then(|r| r.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("a loopback DevTools port");
        tx.send(Browser { ws, port }).unwrap();
        // Keep reading so the browser never blocks on a full pipe; live as long as the binary.
        for _ in lines {}
        let _ = child.wait();
        loop {
            std::thread::park();
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("chromium did not start within a minute")
}

/// The browser's profile, `chromium-<pid>` under the target's scratch directory. The binary
/// exits with the browser still running, so no drop ever removes it: each launch removes those
/// of test binaries no longer alive instead (a profile is a few MB, a suite run leaves one).
fn profile_dir() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix("chromium-"));
        if pid.is_some_and(|pid| !std::path::Path::new("/proc").join(pid).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    // One of an earlier binary with this same pid would hold a lock naming a live process.
    let dir = root.join(format!("chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One DevTools connection: commands by id, events kept in order.
pub(crate) struct Conn {
    ws: WebSocket<TcpStream>,
    next: u64,
    pub(crate) events: Vec<Value>,
}

impl Conn {
    fn open(url: &str) -> Conn {
        let addr = url
            .strip_prefix("ws://")
            .and_then(|r| r.split('/').next())
            .unwrap();
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let (ws, _) = tungstenite::client(url, stream).expect("a DevTools WebSocket");
        Conn {
            ws,
            next: 0,
            events: Vec::new(),
        }
    }

    /// Sends a command and waits for its result; an error answer panics with the method.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let text = match self.ws.read().unwrap() {
                Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v["error"].is_null(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
            if v["method"].is_string() {
                self.events.push(v);
            }
        }
    }
}

impl Browser {
    /// A new isolated context (cookies, storage, permissions of its own) with one page in it;
    /// with `notifications`, that permission granted to `origin`.
    pub(crate) fn page(&self, origin: &str, notifications: bool) -> Page {
        let mut b = Conn::open(&self.ws);
        let ctx = b.call(
            "Target.createBrowserContext",
            json!({ "disposeOnDetach": false }),
        );
        let ctx = ctx["browserContextId"].as_str().unwrap().to_string();
        if notifications {
            b.call(
                "Browser.setPermission",
                json!({ "permission": { "name": "notifications" }, "setting": "granted",
                        "origin": origin, "browserContextId": ctx }),
            );
        }
        let t = b.call(
            "Target.createTarget",
            json!({ "url": "about:blank", "browserContextId": ctx }),
        );
        let target = t["targetId"].as_str().unwrap();
        let mut conn = Conn::open(&format!(
            "ws://127.0.0.1:{}/devtools/page/{target}",
            self.port
        ));
        conn.call("Page.enable", json!({}));
        conn.call("Runtime.enable", json!({}));
        // The browser connection stays open with the page: a permission granted through it
        // lasts only while it does.
        Page { conn, _browser: b }
    }
}

/// A page (tab) of its own context.
pub(crate) struct Page {
    pub(crate) conn: Conn,
    _browser: Conn,
}

impl Page {
    /// Runs `source` in every document of this page before its own scripts.
    pub(crate) fn before_each_document(&mut self, source: &str) {
        self.conn.call(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({ "source": source }),
        );
    }

    /// Navigates and waits for the document to be loaded.
    pub(crate) fn goto(&mut self, url: &str) {
        let r = self.conn.call("Page.navigate", json!({ "url": url }));
        assert!(r["errorText"].is_null(), "{url}: {}", r["errorText"]);
        self.wait_for(
            &format!(
                "document.readyState === 'complete' && location.href === {}",
                json!(url)
            ),
            "the page to load",
        );
    }

    /// The value of an expression (promises awaited), by value.
    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        let r = self.conn.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            r["exceptionDetails"].is_null(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits (at most 30 s) until `expr` is truthy; its value.
    pub(crate) fn wait_for(&mut self, expr: &str, what: &str) -> Value {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.conn.call(
                "Runtime.evaluate",
                json!({ "expression": format!("(() => {{ try {{ return {expr}; }} catch (e) {{ return null; }} }})()"),
                        "returnByValue": true, "awaitPromise": true }),
            );
            let v = r["result"]["value"].clone();
            if !(v.is_null() || v == false || v == 0 || v == "") {
                return v;
            }
            if Instant::now() >= until {
                let r = self.conn.call(
                    "Runtime.evaluate",
                    json!({ "expression": "location.href + ' ' + document.documentElement.outerHTML.slice(0, 3000)", "returnByValue": true }),
                );
                panic!(
                    "waited 30s for {what} ({expr}); the page: {}",
                    r["result"]["value"]
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The whole page as PNG bytes: the viewport is made as tall as the document first, since
    /// frames outside the viewport (the sandboxed evidence files) are not painted otherwise.
    pub(crate) fn screenshot(&mut self) -> Vec<u8> {
        let height = self.eval("document.documentElement.scrollHeight");
        self.conn.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        std::thread::sleep(Duration::from_millis(300));
        let r = self
            .conn
            .call("Page.captureScreenshot", json!({ "format": "png" }));
        self.conn
            .call("Emulation.clearDeviceMetricsOverride", json!({}));
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap()
    }

    /// A small picture of the blank page painted `colour`, in `format` (`png` or `jpeg`): a
    /// real image of that type for a test to hand a task.
    pub(crate) fn picture(&mut self, format: &str, colour: &str) -> Vec<u8> {
        self.eval(&format!(
            "document.documentElement.style.background = {}; true",
            json!(colour)
        ));
        let r = self.conn.call(
            "Page.captureScreenshot",
            json!({ "format": format, "clip": { "x": 0, "y": 0, "width": 6, "height": 4, "scale": 1 } }),
        );
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap()
    }
}
