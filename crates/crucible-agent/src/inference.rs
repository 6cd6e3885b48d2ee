//! The model bindings a run is given in `CRUCIBLE_INFERENCE` (RFC-0001 notes §5, C-INFERENCE):
//! `{"version": 1, "bindings": [{"role", "protocol", "url"?, "model", "key_env"?}]}`. Anything
//! the contract does not define is refused before any work, so a typo cannot silently leave a
//! run without the binding it was launched with.

use serde::Deserialize;

/// The environment variable holding the bindings.
pub const INFERENCE_ENV: &str = "CRUCIBLE_INFERENCE";

/// What a binding serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Agent,
    Decision,
}

/// The wire protocol a binding speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Messages,
    ChatCompletions,
    Responses,
    SystemOne,
    Decisions,
}

impl Protocol {
    fn fits(self, role: Role) -> bool {
        match role {
            Role::Agent => matches!(
                self,
                Protocol::Messages | Protocol::ChatCompletions | Protocol::Responses
            ),
            Role::Decision => matches!(self, Protocol::SystemOne | Protocol::Decisions),
        }
    }
}

/// One model binding.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub role: Role,
    pub protocol: Protocol,
    #[serde(default)]
    pub url: Option<String>,
    pub model: String,
    /// The environment variable holding the bearer key, if the endpoint wants one.
    #[serde(default)]
    pub key_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    version: u32,
    bindings: Vec<Binding>,
}

/// The bindings of a run, at most one per role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inference {
    pub agent: Option<Binding>,
    pub decision: Option<Binding>,
}

const URL_MAX: usize = 512;
const NAME_MAX: usize = 128;

/// Parse and check `CRUCIBLE_INFERENCE`'s text; the error names the rule broken.
pub fn parse(text: &str) -> Result<Inference, String> {
    let doc: Document = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if doc.version != 1 {
        return Err(format!("version {} is not 1", doc.version));
    }
    let mut out = Inference::default();
    for b in doc.bindings {
        let role = match b.role {
            Role::Agent => "agent",
            Role::Decision => "decision",
        };
        if !b.protocol.fits(b.role) {
            return Err(format!("a {role} binding cannot speak {:?}", b.protocol));
        }
        if b.model.is_empty() || b.model.len() > NAME_MAX || b.model.contains(char::is_whitespace) {
            return Err(format!(
                "the {role} binding's model must be 1 to {NAME_MAX} characters without whitespace"
            ));
        }
        match &b.url {
            Some(url) => check_url(url).map_err(|e| format!("the {role} binding's url {e}"))?,
            None if b.protocol == Protocol::SystemOne => {
                return Err("a system_one binding needs a url".into())
            }
            None => {}
        }
        if let Some(k) = &b.key_env {
            let valid = !k.is_empty()
                && k.len() <= NAME_MAX
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
            if !valid || k == INFERENCE_ENV {
                return Err(format!(
                    "the {role} binding's key_env `{k}` is not an environment variable name it may use"
                ));
            }
        }
        let slot = match b.role {
            Role::Agent => &mut out.agent,
            Role::Decision => &mut out.decision,
        };
        if slot.replace(b).is_some() {
            return Err(format!("more than one {role} binding"));
        }
    }
    Ok(out)
}

/// An absolute http(s) URL with a host, no credentials in it, at most [`URL_MAX`] characters.
fn check_url(url: &str) -> Result<(), String> {
    if url.len() > URL_MAX {
        return Err(format!("is longer than {URL_MAX} characters"));
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("is not an absolute http(s) URL")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("carries credentials; name them with key_env".into());
    }
    let host = authority
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(authority, |(host, _)| host);
    if host.is_empty() || url.contains(char::is_whitespace) {
        return Err("has no host".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(binding: &str) -> Result<Inference, String> {
        parse(&format!(r#"{{"version": 1, "bindings": [{binding}]}}"#))
    }

    #[test]
    fn a_decision_binding_is_read() {
        let inf = one(
            r#"{"role": "decision", "protocol": "system_one", "url": "http://127.0.0.1:9/v1/systemone", "model": "s1-small", "key_env": "S1_KEY"}"#,
        )
        .unwrap();
        let d = inf.decision.unwrap();
        assert_eq!(d.protocol, Protocol::SystemOne);
        assert_eq!(d.model, "s1-small");
        assert_eq!(d.key_env.as_deref(), Some("S1_KEY"));
        assert!(inf.agent.is_none());
    }

    #[test]
    fn everything_the_contract_does_not_define_is_refused() {
        for (doc, why) in [
            (r#"{"version": 2, "bindings": []}"#, "version 2"),
            (
                r#"{"version": 1, "bindings": [], "extra": 1}"#,
                "unknown field",
            ),
        ] {
            let e = parse(doc).unwrap_err();
            assert!(e.contains(why), "{doc}: {e}");
        }
        for (b, why) in [
            (
                r#"{"role": "decision", "protocol": "system_one", "model": "m"}"#,
                "needs a url",
            ),
            (
                r#"{"role": "decision", "protocol": "messages", "url": "https://x", "model": "m"}"#,
                "cannot speak",
            ),
            (
                r#"{"role": "agent", "protocol": "system_one", "url": "https://x", "model": "m"}"#,
                "cannot speak",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "ftp://x", "model": "m"}"#,
                "not an absolute http(s) URL",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "https://u:p@x", "model": "m"}"#,
                "credentials",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "https://:80/", "model": "m"}"#,
                "no host",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "https://x", "model": "a b"}"#,
                "without whitespace",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "https://x", "model": "m", "key_env": "CRUCIBLE_INFERENCE"}"#,
                "key_env",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "https://x", "model": "m", "key_env": "1X"}"#,
                "key_env",
            ),
            (
                r#"{"role": "decision", "protocol": "system_one", "url": "https://x", "model": "m", "temperature": 1}"#,
                "unknown field",
            ),
        ] {
            let e = one(b).unwrap_err();
            assert!(e.contains(why), "{b}: {e}");
        }
        let two =
            r#"{"role": "decision", "protocol": "system_one", "url": "https://x", "model": "m"}"#;
        let e = one(&format!("{two}, {two}")).unwrap_err();
        assert!(e.contains("more than one decision binding"), "{e}");
    }
}
