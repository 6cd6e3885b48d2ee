//! One JSON request to a remote service, under a deadline for the whole exchange: the decision
//! model's System One call, the engine's report delivery and its polls of a controller's
//! decision requests. A status is an answer, not an
//! error: each caller decides what a 429 or a 5xx means to it.

use std::time::Duration;

use serde_json::Value;

/// What the service answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// POST `body` to `url` with `bearer` as the bearer token, if any. `Err` is the cause when the
/// service could not be reached, the deadline passed, or the answer could not be read; it may
/// name the URL, so a caller whose URL is a credential must not pass it on.
pub fn post_json(
    url: &str,
    bearer: Option<&str>,
    body: &Value,
    timeout: Duration,
) -> Result<Answer, String> {
    send_json("POST", url, bearer, Some(body), timeout)
}

/// `method` (`GET`, `POST` or `DELETE`) on `url`, with `body` as JSON where given, as
/// [`post_json`] does it: the engine's polls of a controller's decision requests.
pub fn send_json(
    method: &str,
    url: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Answer, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let auth = bearer.map(|key| format!("Bearer {key}"));
    let sent = match (method, body) {
        ("POST", Some(body)) => {
            let mut request = agent.post(url).header("Content-Type", "application/json");
            if let Some(a) = &auth {
                request = request.header("Authorization", a);
            }
            let payload = serde_json::to_vec(body).expect("JSON always serializes");
            request.send(&payload[..])
        }
        ("GET", None) => {
            let mut request = agent.get(url);
            if let Some(a) = &auth {
                request = request.header("Authorization", a);
            }
            request.call()
        }
        ("DELETE", None) => {
            let mut request = agent.delete(url);
            if let Some(a) = &auth {
                request = request.header("Authorization", a);
            }
            request.call()
        }
        _ => {
            return Err(format!(
                "{method} with this body is not a request this client sends"
            ))
        }
    };
    let mut response = sent.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok(Answer { status, body })
}
