//! Asking a decision model over System One (RFC-0001 notes §5): the request body is POSTed to the
//! decision binding's URL with its bearer key, within a deadline, and the answer comes back as
//! JSON for the engine to check against the route's questions. Only the wire is here; what the
//! questions are and what an answer means belong to the engine.

use std::time::Duration;

use serde_json::Value;

use crate::http;
use crate::inference::{Binding, Protocol};

/// The longest one System One call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call gave no answer to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AskError {
    /// Unreachable, timed out, HTTP 5xx or 429: the infrastructure failed, and a retry may help.
    Transport(String),
    /// Any other refusal, or an answer that is not JSON: a measured failure.
    Failed(String),
}

/// Why a binding cannot be asked at all; checked before any dispatch.
pub fn unusable(binding: &Binding) -> Option<String> {
    if binding.protocol != Protocol::SystemOne {
        return Some(format!(
            "its decision binding speaks {:?}, and this engine speaks only system_one",
            binding.protocol
        ));
    }
    match &binding.key_env {
        Some(k) if std::env::var_os(k).is_none() => Some(format!(
            "its decision binding's key variable `{k}` is not set"
        )),
        _ => None,
    }
}

/// POST `body` to the binding's URL and return the answer; at most `timeout` (and never more
/// than [`CALL_TIMEOUT`]) for the whole exchange.
pub fn ask(binding: &Binding, body: &Value, timeout: Duration) -> Result<Value, AskError> {
    let url = binding
        .url
        .as_deref()
        .ok_or_else(|| AskError::Failed("the decision binding has no url".into()))?;
    let key = match &binding.key_env {
        Some(var) => Some(
            std::env::var(var)
                .map_err(|_| AskError::Failed(format!("the key variable `{var}` is not set")))?,
        ),
        None => None,
    };
    let answer = http::post_json(url, key.as_deref(), body, timeout.min(CALL_TIMEOUT))
        .map_err(|e| AskError::Transport(format!("the decision model is unreachable: {e}")))?;
    let status = answer.status;
    if status == 429 || status >= 500 {
        return Err(AskError::Transport(format!(
            "the decision model answered HTTP {status}"
        )));
    }
    if !(200..300).contains(&status) {
        return Err(AskError::Failed(format!(
            "the decision model answered HTTP {status}"
        )));
    }
    serde_json::from_str(&answer.body)
        .map_err(|e| AskError::Failed(format!("the decision model's answer is not JSON: {e}")))
}
