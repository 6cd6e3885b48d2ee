//! The controller as the one who answers (RFC-0002:C-HUMAN-DECISION): the engine opens each
//! request with a POST and polls it with GETs, so the controller never connects to the run;
//! a stop withdraws it with a DELETE. The wire protocol is in docs/decisions.md ("Human
//! decisions: the controller's polling protocol"). `crucible serve` serves it to the engines of
//! the runs it recorded for executing elsewhere, which reach it through their link
//! ([`crate::link`]): [`Controller::linked`].

use super::{Answer, DecideError, Decider, Polled, Request, State};
use serde::Deserialize;
use std::time::{Duration, SystemTime};

/// The controller's base URL for decision requests.
pub const URL_ENV: &str = "CRUCIBLE_DECISIONS_URL";
/// The bearer token the engine presents, where the controller wants one.
pub const TOKEN_ENV: &str = "CRUCIBLE_DECISIONS_TOKEN";
/// How often an open request is polled, in milliseconds.
pub const POLL_MS_ENV: &str = "CRUCIBLE_DECISIONS_POLL_MS";
pub const DEFAULT_POLL_MS: u64 = 2000;
/// Each exchange's own deadline.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Controller {
    /// Without a trailing slash.
    base: String,
    token: Option<String>,
    interval: Duration,
    /// The controller's id of the run, which its request paths name, when the engine is linked
    /// to the controller that recorded its run; otherwise they name the engine's own run id.
    run: Option<String>,
}

/// A request as the controller returns it.
#[derive(Deserialize)]
struct Record {
    digest: String,
    expires_at: String,
    state: String,
    #[serde(default)]
    answer: Option<Answer>,
}

impl Controller {
    pub fn new(base: &str, token: Option<String>, interval: Duration) -> Controller {
        Controller {
            base: base.trim_end_matches('/').to_string(),
            token,
            interval,
            run: None,
        }
    }

    /// The controller a linked engine's run was recorded by: its URL, the run's token, and its
    /// id of the run in every request path.
    pub fn linked(link: &crate::link::Link, interval: Duration) -> Controller {
        Controller {
            run: Some(link.run.clone()),
            ..Controller::new(&link.url, Some(link.token.clone()), interval)
        }
    }

    fn url(&self, req: Option<&Request>) -> String {
        match req {
            Some(r) => format!(
                "{}/v1/decisions/{}/{}",
                self.base,
                self.run.as_deref().unwrap_or(&r.run),
                r.route
            ),
            None => format!("{}/v1/decisions", self.base),
        }
    }

    /// One exchange: a 2xx is the request, a 5xx, a 429 or no answer a transport failure, any
    /// other status a refusal with what the controller said.
    fn exchange(&self, method: &str, req: &Request) -> Result<Polled, DecideError> {
        let (url, body) = match method {
            "POST" => (
                self.url(None),
                Some(serde_json::to_value(req).expect("a request serializes")),
            ),
            _ => (self.url(Some(req)), None),
        };
        let a = crucible_agent::http::send_json(
            method,
            &url,
            self.token.as_deref(),
            body.as_ref(),
            EXCHANGE_TIMEOUT,
        )
        .map_err(|e| DecideError::Transport(format!("the controller cannot be reached: {e}")))?;
        match a.status {
            200..=299 => parse(&a.body),
            429 | 500..=599 => Err(DecideError::Transport(format!(
                "the controller answered HTTP {}",
                a.status
            ))),
            // The linked controller stopped the run: it stops as on SIGTERM, which withdraws
            // this request; meanwhile the exchange reads as failed, never as a refusal.
            s if self.run.is_some() && crate::link::says_stopped(s, &a.body) => {
                crate::link::stopped_by_controller();
                Err(DecideError::Transport(
                    "the run was stopped on the controller".into(),
                ))
            }
            s => {
                // The controller's reason, bounded: it reaches the route's note.
                let said: String = a.body.trim().chars().take(500).collect();
                Err(DecideError::Refused(format!(
                    "the controller refused the request (HTTP {s}): {}",
                    crucible_plan::terminal::escape(&said)
                )))
            }
        }
    }
}

fn parse(body: &str) -> Result<Polled, DecideError> {
    let r: Record = serde_json::from_str(body).map_err(|e| {
        DecideError::Refused(format!(
            "the controller's request record does not parse: {e}"
        ))
    })?;
    let state = match (r.state.as_str(), r.answer) {
        ("open", _) => State::Open,
        ("answered", Some(a)) => State::Answered(a),
        ("expired", _) => State::Expired,
        ("withdrawn", _) => State::Withdrawn,
        (other, _) => {
            return Err(DecideError::Refused(format!(
                "the controller's request record has state {other:?} without what it needs"
            )))
        }
    };
    Ok(Polled {
        state,
        digest: r.digest,
        expires_at: r.expires_at,
    })
}

impl Decider for Controller {
    fn via(&self) -> &'static str {
        "controller"
    }

    fn describe(&self) -> String {
        match &self.run {
            Some(run) => format!(
                "the controller at {} (run {run}, {})",
                self.base,
                crate::link::CONTROLLER_URL_ENV
            ),
            None => format!("the controller at {} ({URL_ENV})", self.base),
        }
    }

    fn open(&self, req: &Request) -> Result<Polled, DecideError> {
        self.exchange("POST", req)
    }

    fn poll(&self, req: &Request, until: SystemTime) -> Result<Polled, DecideError> {
        let wait = until
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .min(self.interval);
        std::thread::sleep(wait);
        self.exchange("GET", req)
    }

    fn close(&self, req: &Request, withdraw: bool) {
        if withdraw {
            // Best effort: a controller that cannot be reached withdraws it when the run ends.
            let _ = self.exchange("DELETE", req);
        }
    }
}
