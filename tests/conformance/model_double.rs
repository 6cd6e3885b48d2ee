//! A scripted model endpoint on loopback for the real agent CLIs (design/AGENT-HARNESSES.md):
//! a real HTTP/1.1 server speaking each wire protocol's streaming form (Anthropic Messages SSE
//! here), stateless, so resumes and the CLIs' side requests need no bookkeeping:
//!
//! - the task's prompt carries a script, `SCRIPT:{json}` on one line: `write` (files to write
//!   on a first turn, path → content), `repair` (the same, on a repair turn), `bash` (a command
//!   the first turn runs beside its writes), `final_delay_ms` (held before a turn's last
//!   answer, after its writes: the turn runs on with its first call's spend streamed), `fail`
//!   (an HTTP
//!   status every model call answers with), `delay_ms` (held before answering), `stages` (a
//!   script per runbook stage, followed in the turn of that stage);
//! - a write tool offered and a script found → one write call per file until they are all in
//!   the workspace ([`decide`]); anything else → a short text.
//!
//! Every model call is recorded (key header, body) for the test to read.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the model received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `x-api-key`, or the bearer of `authorization`.
    pub key: Option<String>,
    pub body: Value,
}

impl Seen {
    /// The conversation the call carries: Messages' and Chat Completions' `messages`,
    /// Responses' `input`, as JSON text.
    pub fn conversation(&self) -> String {
        (self.body.get("messages").or(self.body.get("input")))
            .map_or_else(String::new, Value::to_string)
    }
}

pub struct ModelDouble {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The script of a call whose prompt carries none (an example's real prompt).
    default: Option<Value>,
}

/// Input and output tokens every answer reports.
pub const USAGE: (u64, u64) = (1000, 50);

impl ModelDouble {
    pub fn start() -> ModelDouble {
        ModelDouble::serving(None)
    }

    /// A double whose calls without a script of their own follow `script`: for a pack whose
    /// prompts are written for a real model.
    pub fn with_default(script: Value) -> ModelDouble {
        ModelDouble::serving(Some(script))
    }

    fn serving(default: Option<Value>) -> ModelDouble {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let fallback = default.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (log, fallback) = (Arc::clone(&log), fallback.clone());
                std::thread::spawn(move || serve(stream, &log, fallback.as_ref()));
            }
        });
        ModelDouble {
            port,
            seen,
            default,
        }
    }

    /// The endpoint's base URL (with `/v1`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The model calls (not preflights or side requests) whose text carries a script.
    pub fn scripted_calls(&self) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|s| script(&s.body, self.default.as_ref()).is_some())
            .collect()
    }
}

/// The `SCRIPT:{...}` a request's messages carry, else the default script, if any. A script of
/// `stages` (stage name → script) follows the one of the runbook stage the conversation is in
/// last (its turn's prompt says `# Runbook stage `NAME``; issue 15).
pub fn script(body: &Value, default: Option<&Value>) -> Option<Value> {
    let s = own_script(body).or_else(|| default.cloned())?;
    let Some(stages) = s.get("stages") else {
        return Some(s);
    };
    let text = body.get("messages").or(body.get("input"))?.to_string();
    let marker = "# Runbook stage `";
    let at = text.rfind(marker)? + marker.len();
    let name = &text[at..at + text[at..].find('`')?];
    stages.get(name).cloned()
}

fn own_script(body: &Value) -> Option<Value> {
    let text = body.get("messages").or(body.get("input"))?.to_string();
    let at = text.rfind("SCRIPT:")? + "SCRIPT:".len();
    // The JSON is escaped inside the messages' JSON text: unescape one level by parsing.
    let rest = &text[at..];
    let end = rest.find("\\n").unwrap_or(rest.len());
    let raw: String = serde_json::from_str(&format!("\"{}\"", &rest[..end])).ok()?;
    serde_json::from_str(&raw).ok()
}

/// Serves requests on one connection until it closes.
fn serve(stream: TcpStream, log: &Mutex<Vec<Seen>>, default: Option<&Value>) {
    let Ok(read) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read);
    let mut out = stream;
    loop {
        let Some((method, path, key, raw)) = read_request(&mut reader) else {
            return;
        };
        if method == "HEAD" || method == "GET" {
            let _ = write!(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            continue;
        }
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        log.lock().unwrap().push(Seen {
            key,
            body: body.clone(),
        });
        let script = script(&body, default);
        if let Some(ms) = script.as_ref().and_then(|s| s["delay_ms"].as_u64()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if path.contains("count_tokens") {
            reply_json(&mut out, 200, &json!({"input_tokens": USAGE.0}));
            continue;
        }
        if let Some(status) = script.as_ref().and_then(|s| s["fail"].as_u64()) {
            let error = json!({"type": "error", "error": {"type": "api_error", "message": "scripted failure"}});
            reply_json(&mut out, status as u16, &error);
            return;
        }
        if path.starts_with("/v1/messages") {
            messages(&mut out, &body, script.as_ref());
        } else if path.starts_with("/v1/chat/completions") {
            chat(&mut out, &body, script.as_ref());
        } else if path.starts_with("/v1/responses") {
            responses(&mut out, &body, script.as_ref());
        } else {
            reply_json(&mut out, 404, &json!({"error": "not scripted"}));
        }
        return;
    }
}

/// Reads one request: method, path, key, body (by `Content-Length` or chunked).
fn read_request(
    reader: &mut BufReader<TcpStream>,
) -> Option<(String, String, Option<String>, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let (mut length, mut chunked, mut key) = (0, false, None);
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().ok()?,
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "x-api-key" => key = Some(value.to_string()),
            "authorization" => key = Some(value.trim_start_matches("Bearer ").to_string()),
            _ => {}
        }
    }
    let mut raw = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            raw.extend_from_slice(&chunk[..size]);
        }
    } else {
        raw.resize(length, 0);
        reader.read_exact(&mut raw).ok()?;
    }
    Some((method, path, key, raw))
}

fn reply_json(out: &mut TcpStream, status: u16, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// An SSE stream of `(event, data)` pairs; the connection closes after it.
fn reply_sse(out: &mut TcpStream, events: &[(&str, Value)]) {
    let mut text = String::new();
    for (event, data) in events {
        text.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    }
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n{text}"
    );
    let _ = out.flush();
}

/// A number no earlier answer used: call ids must differ across a resumed conversation.
fn fresh() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// What a model call should do.
enum Answer {
    Text(String),
    /// Write these files (path → content), and run this command.
    Work(Vec<(String, String)>, Option<String>),
}

/// The rule, stateless in the server: a turn is done once every file its script writes is in
/// the workspace with the scripted content (the engine takes the result file away after each
/// turn, so each new turn writes it again); until then it writes them, when a write tool is
/// offered. Anything else gets a short text. Histories are not read: the CLIs merge and reorder
/// them on resume.
fn decide(script: Option<&Value>, cwd: &str, repair: bool, can_write: bool) -> Answer {
    let Some(s) = script.filter(|_| can_write) else {
        return Answer::Text("Done.".into());
    };
    let files = &s[if repair { "repair" } else { "write" }];
    let files: Vec<(String, String)> = (files.as_object().into_iter().flatten())
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let done = files.iter().all(|(path, content)| {
        std::fs::read_to_string(std::path::Path::new(cwd).join(path))
            .ok()
            .as_deref()
            == Some(content.as_str())
    });
    let bash = s["bash"].as_str().filter(|_| !repair).map(str::to_string);
    if done {
        Answer::Text("Done.".into())
    } else {
        Answer::Work(files, bash)
    }
}

/// Anthropic Messages (`POST /v1/messages`, streamed).
fn messages(out: &mut TcpStream, body: &Value, script: Option<&Value>) {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let last = msgs.last().cloned().unwrap_or(Value::Null);
    let repair = last["content"].to_string().contains("# Repair");
    let can_write = (body["tools"].as_array().into_iter().flatten()).any(|t| t["name"] == "Write");
    // Write wants an absolute path: the workspace is in the system prompt.
    let system = body["system"].to_string();
    let cwd = system
        .find("Primary working directory: ")
        .map(|at| &system[at + "Primary working directory: ".len()..])
        .map(|rest| rest.split("\\n").next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let model = body["model"].as_str().unwrap_or("scripted").to_string();
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "usage": {"input_tokens": USAGE.0, "output_tokens": 1}}}),
    )];
    let stop = match decide(script, &cwd, repair, can_write) {
        Answer::Text(text) => {
            final_delay(script);
            events.push(("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
            events.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})));
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            "end_turn"
        }
        Answer::Work(files, bash) => {
            let calls = (files.iter())
                .map(|(path, content)| {
                    (
                        "Write",
                        json!({"file_path": format!("{cwd}/{path}"), "content": content}),
                    )
                })
                .chain(bash.map(|command| {
                    (
                        "Bash",
                        json!({"command": command, "description": "scripted"}),
                    )
                }));
            for (i, (tool, input)) in calls.enumerate() {
                events.push(("content_block_start", json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": format!("toolu_{}_{i}", fresh()), "name": tool, "input": {}}})));
                events.push(("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
                events.push((
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": i}),
                ));
            }
            "tool_use"
        }
    };
    events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": USAGE.1}})));
    events.push(("message_stop", json!({"type": "message_stop"})));
    reply_sse(out, &events);
}

/// The workspace a request's system prompt names after `label`.
fn cwd_after(body: &Value, label: &str) -> String {
    let text = body.to_string();
    text.find(label)
        .map(|at| &text[at + label.len()..])
        .map(|rest| {
            rest.split(['"', '\\'])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default()
}

/// Holds a turn's last answer when its script says so.
fn final_delay(script: Option<&Value>) {
    if let Some(ms) = script.and_then(|s| s["final_delay_ms"].as_u64()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// OpenAI Chat Completions (`POST /v1/chat/completions`, streamed, usage in a last chunk).
fn chat(out: &mut TcpStream, body: &Value, script: Option<&Value>) {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let last_user = msgs.iter().rev().find(|m| m["role"] == "user");
    let repair = last_user.is_some_and(|m| m["content"].to_string().contains("# Repair"));
    let can_write =
        (body["tools"].as_array().into_iter().flatten()).any(|t| t["function"]["name"] == "write");
    let cwd = cwd_after(body, "Current working directory: ");
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
               "model": body["model"], "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    match decide(script, &cwd, repair, can_write) {
        Answer::Text(text) => {
            final_delay(script);
            chunks.push(chunk(json!({"content": text}), Value::Null));
            chunks.push(chunk(json!({}), json!("stop")));
        }
        Answer::Work(files, bash) => {
            let calls = (files.iter())
                .map(|(path, content)| ("write", json!({"path": path, "content": content})))
                .chain(bash.map(|command| ("bash", json!({"command": command}))));
            for (i, (tool, args)) in calls.enumerate() {
                let call = json!({"index": i, "id": format!("call_{}_{i}", fresh()), "type": "function",
                                  "function": {"name": tool, "arguments": args.to_string()}});
                chunks.push(chunk(json!({"tool_calls": [call]}), Value::Null));
            }
            chunks.push(chunk(json!({}), json!("tool_calls")));
        }
    }
    chunks.push(json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
        "model": body["model"], "choices": [],
        "usage": {"prompt_tokens": USAGE.0, "completion_tokens": USAGE.1, "total_tokens": USAGE.0 + USAGE.1}}));
    let mut text = String::new();
    for c in chunks {
        text.push_str(&format!("data: {c}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n{text}"
    );
    let _ = out.flush();
}

/// A shell command writing `content` to `path` (its directory made first, as a write tool
/// does), single-quoted.
fn write_command(path: &str, content: &str) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let made = match path.rfind('/') {
        Some(at) => format!("mkdir -p {} && ", q(&path[..at])),
        None => String::new(),
    };
    format!("{made}printf '%s' {} > {}", q(content), q(path))
}

/// OpenAI Responses (`POST /v1/responses`, streamed): files are written with `exec_command`.
fn responses(out: &mut TcpStream, body: &Value, script: Option<&Value>) {
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let last_user = input.iter().rev().find(|m| m["role"] == "user");
    let repair = last_user.is_some_and(|m| m["content"].to_string().contains("# Repair"));
    let can_write =
        (body["tools"].as_array().into_iter().flatten()).any(|t| t["name"] == "exec_command");
    let text = body.to_string();
    let cwd = text
        .find("<cwd>")
        .map(|at| &text[at + "<cwd>".len()..])
        .and_then(|rest| rest.split("</cwd>").next())
        .unwrap_or_default()
        .to_string();
    let item = match decide(script, &cwd, repair, can_write) {
        Answer::Text(text) => {
            final_delay(script);
            json!({"type": "message", "id": format!("msg_{}", fresh()), "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]})
        }
        Answer::Work(files, bash) => {
            let mut cmds: Vec<String> = files.iter().map(|(p, c)| write_command(p, c)).collect();
            cmds.extend(bash);
            json!({"type": "function_call", "id": format!("fc_{}", fresh()), "call_id": format!("call_{}", fresh()),
                   "name": "exec_command", "arguments": json!({"cmd": cmds.join(" && ")}).to_string(), "status": "completed"})
        }
    };
    let id = format!("resp_{}", fresh());
    let usage = json!({"input_tokens": USAGE.0, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": USAGE.1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": USAGE.0 + USAGE.1});
    let events = [
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": id, "status": "completed", "output": [item], "usage": usage}}),
        ),
    ];
    reply_sse(out, &events);
}
