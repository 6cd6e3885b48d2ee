//! A remote service on loopback, standing in for a paid or external one (a System One decision
//! model, a Slack webhook): a real HTTP/1.1 server that records every request (its path, bearer
//! key and JSON body) and answers from a list of canned replies, the last one repeating.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request the model received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub authorization: Option<String>,
    pub path: String,
    pub body: Value,
}

pub struct HttpDouble {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl HttpDouble {
    /// Serve `replies` (HTTP status, body) in order, repeating the last.
    pub fn start(replies: Vec<(u16, String)>) -> HttpDouble {
        let n = std::sync::atomic::AtomicUsize::new(0);
        HttpDouble::scripted(move |_| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            replies[i.min(replies.len() - 1)].clone()
        })
    }

    /// Serve each request with what `reply` answers it: a stateful endpoint speaking a protocol
    /// (the controller's decision requests).
    pub fn scripted(reply: impl Fn(&Seen) -> (u16, String) + Send + 'static) -> HttpDouble {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                if let Some(req) = serve(stream, &reply) {
                    log.lock().unwrap().push(req);
                }
            }
        });
        HttpDouble { port, seen }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Read one request (headers, then a `Content-Length` body) and write the reply.
fn serve(stream: TcpStream, reply: &dyn Fn(&Seen) -> (u16, String)) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let method = line.split_whitespace().next()?.to_string();
    let path = line.split_whitespace().nth(1)?.to_string();
    let (mut length, mut authorization) = (0, None);
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "authorization" => authorization = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut raw = vec![0; length];
    reader.read_exact(&mut raw).ok()?;
    let seen = Seen {
        method,
        authorization,
        path,
        body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
    };
    let (status, body) = reply(&seen);
    let mut out = stream;
    let _ = write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    Some(seen)
}
