//! A runbook's gates decided at the terminal (issue 15): the controller's human decisions
//! (issue 14) are not built, so a gate is put to the person running `plan run`. The stage's
//! summary and its artifacts' hashes are shown on stderr and the answer read from stdin, so a
//! run can ask only when both are a terminal; otherwise admission refuses the gate before
//! dispatch (`check` says so too), and a gate is never passed silently. While a gate asks, the
//! live view holds its redraws ([`TERMINAL`]), and draws afresh below the exchange after.

use crucible_engine::runbook::{GateAsk, Gatekeeper};
use crucible_plan::terminal::escape;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Held while a gate asks: the live view does not draw meanwhile.
pub static TERMINAL: Mutex<()> = Mutex::new(());
/// How many gates have asked: the live view's frame above an exchange is not redrawn over it.
pub static ASKED: AtomicU64 = AtomicU64::new(0);

/// The terminal the run was launched on.
pub struct Terminal;

impl Terminal {
    /// The terminal gatekeeper, when stdin and stderr are both terminals.
    pub fn here() -> Option<Terminal> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal()).then_some(Terminal)
    }
}

impl Gatekeeper for Terminal {
    fn decide(&self, ask: &GateAsk) -> Result<bool, String> {
        let _held = TERMINAL.lock().unwrap_or_else(|e| e.into_inner());
        ASKED.fetch_add(1, Ordering::SeqCst);
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "\ngate {} of runbook {} (task {}): {}",
            escape(&ask.gate.id),
            escape(&ask.runbook),
            escape(&ask.task),
            escape(&ask.gate.prompt)
        );
        let _ = writeln!(
            err,
            "  stage {}: {}",
            escape(&ask.stage),
            escape(&ask.summary)
        );
        for a in &ask.artifacts {
            let seen = match (&a.sha256, a.bytes, &a.unhashed) {
                (Some(h), Some(b), _) => format!("sha256:{h} ({b} bytes)"),
                (_, _, Some(why)) => format!("not hashed: {why}"),
                _ => "not hashed".to_string(),
            };
            let _ = writeln!(err, "  artifact {}  {}", escape(&a.path), escape(&seen));
        }
        let mut stdin = std::io::stdin().lock();
        loop {
            let _ = write!(err, "approve? [y/n] ");
            let _ = err.flush();
            let mut line = String::new();
            match stdin.read_line(&mut line) {
                Ok(0) => return Err("the terminal closed".into()),
                Err(e) => return Err(format!("the terminal cannot be read: {e}")),
                Ok(_) => {}
            }
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Ok(true),
                "n" | "no" => return Ok(false),
                _ => {}
            }
        }
    }
}
