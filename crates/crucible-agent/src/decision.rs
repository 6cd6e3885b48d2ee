//! Asking a decision model over System One (RFC-0001 notes §5): the request body is POSTed to the
//! decision binding's URL with its bearer key, within a deadline, and the answer comes back as
//! JSON for the engine to check against the route's questions. Only the wire is here; what the
//! questions are and what an answer means belong to the engine.

use std::time::Duration;

use serde_json::Value;

use crate::http;
use crate::inference::{Binding, Protocol};
use crate::prices::Price;

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

/// A decision model's answer, and what asking it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub body: Value,
    pub cost_usd: f64,
}

/// What a call cost at `price`: the tokens the answer's `usage` reports
/// (`{"input_tokens", "output_tokens"}`), else an estimate of one token per 4 bytes of the
/// request and of the answer. System One reports no money, and a call that counted nothing
/// would never reach the cost ceiling (docs/decisions.md, "What a decision model's call costs").
pub fn cost(price: &Price, request: &[u8], answer: &str, body: &Value) -> f64 {
    let tokens = |bytes: usize| bytes.div_ceil(4) as u64;
    let usage = &body["usage"];
    let reported = |k: &str| usage[k].as_u64();
    match (reported("input_tokens"), reported("output_tokens")) {
        (Some(input), Some(output)) => price.cost(input, 0, output),
        _ => price.cost(tokens(request.len()), 0, tokens(answer.len())),
    }
}

/// POST `body` to the binding's URL and return the answer, priced at `price`; at most
/// `timeout` (and never more than [`CALL_TIMEOUT`]) for the whole exchange.
pub fn ask(
    binding: &Binding,
    body: &Value,
    timeout: Duration,
    price: &Price,
) -> Result<Answer, AskError> {
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
    let parsed: Value = serde_json::from_str(&answer.body)
        .map_err(|e| AskError::Failed(format!("the decision model's answer is not JSON: {e}")))?;
    let request = serde_json::to_vec(body).expect("JSON always serializes");
    Ok(Answer {
        cost_usd: cost(price, &request, &answer.body, &parsed),
        body: parsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PRICE: Price = Price {
        input: 2.0,
        cached_input: 2.0,
        output: 10.0,
    };

    #[test]
    fn a_call_costs_its_reported_usage_else_an_estimate_from_its_size() {
        let usage = json!({"answers": {}, "usage": {"input_tokens": 1000, "output_tokens": 100}});
        assert_eq!(cost(&PRICE, b"", "", &usage), (2000.0 + 1000.0) / 1e6);
        // 400 bytes out, 40 back: 100 and 10 tokens.
        let request = vec![b'x'; 400];
        let answer = "y".repeat(40);
        let want = (100.0 * 2.0 + 10.0 * 10.0) / 1e6;
        assert_eq!(cost(&PRICE, &request, &answer, &json!({})), want);
    }
}
