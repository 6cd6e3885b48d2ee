//! A small OCI distribution client (RFC-0002:C-PACK-PUBLISH): the six calls publication makes
//! (HEAD and GET a manifest, HEAD a blob, start and finish a blob upload, PUT a manifest) over
//! the blocking `ureq` client the workspace already builds, run on the blocking pool. It is a
//! client of one repository, `http[s]://HOST[:PORT]/NAME/SPACE`, with credentials or none:
//! sent as Basic, and to the token endpoint a registry names in a `WWW-Authenticate: Bearer`
//! challenge, whose token is then sent as Bearer (docs/decisions.md: why not `oci-client`).
//!
//! Every failure is classified as the clause does: a network error, 429 or any 5xx is
//! transient; any other answer is permanent.

use sha2::{Digest, Sha256};
use std::time::Duration;

/// The OCI image manifest's media type: sent as `Accept` on every manifest HEAD and GET (the
/// CNCF distribution 2.8 registry answers 404 for an existing OCI manifest without it).
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// What a manifest HEAD or GET accepts: every manifest kind a tag may name, so a tag naming
/// a Docker manifest or an index is seen (and never pushed over) too.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";
/// The OCI empty config: `{}`.
pub const EMPTY_CONFIG_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const EMPTY_CONFIG: &[u8] = b"{}";
/// Every layer's media type.
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// How a registry call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A network error, 429 or 5xx: retried with backoff.
    Transient(String),
    /// Any other registry answer: retried only when someone asks.
    Permanent(String),
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Transient(m) | Failure::Permanent(m) => m,
        }
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

/// `sha256:<hex>` of some bytes: an OCI content digest.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// One repository on one registry.
#[derive(Clone)]
pub struct Repository {
    /// `http://host:port` (no trailing slash).
    origin: String,
    /// The repository's name, e.g. `crucible/packs`.
    name: String,
    /// `Basic …`, from the credentials file.
    authorization: Option<String>,
    /// The last Bearer token a registry's token endpoint gave, sent instead of Basic.
    bearer: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    agent: ureq::Agent,
}

/// A call's answer, or ureq's failure to get one.
type Answer = std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>;

/// The parameters of a `WWW-Authenticate: Bearer k="v",…` challenge.
fn bearer_challenge(header: &str) -> Option<Vec<(String, String)>> {
    let rest = header.trim().strip_prefix("Bearer ")?;
    let mut out = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            value = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        out.push((key.trim().to_ascii_lowercase(), value));
    }
    Some(out)
}

/// Percent-encodes a query value.
fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

impl Repository {
    /// From the configured URL (`http://127.0.0.1:5000/crucible/packs`) and optional
    /// `USER:PASSWORD` credentials.
    pub fn new(url: &str, credentials: Option<&str>) -> anyhow::Result<Repository> {
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(s, _)| matches!(*s, "http" | "https"))
            .ok_or_else(|| {
                anyhow::anyhow!("the registry URL must start with http:// or https://")
            })?;
        let (host, name) = rest
            .split_once('/')
            .ok_or_else(|| anyhow::anyhow!("the registry URL must name a repository path"))?;
        let name = name.trim_end_matches('/');
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c);
        if host.is_empty() || name.is_empty() || !name.chars().all(ok) {
            anyhow::bail!("the registry URL must be http[s]://HOST[:PORT]/REPOSITORY (lowercase)");
        }
        let authorization = credentials.map(|c| {
            use base64::Engine;
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(c)
            )
        });
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(300)))
            .build()
            .into();
        Ok(Repository {
            origin: format!("{scheme}://{host}"),
            name: name.to_string(),
            authorization,
            bearer: Default::default(),
            agent,
        })
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.origin, self.name)
    }

    /// One request: the Bearer token when one was given, else the Basic credentials.
    fn send(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let auth = self
            .bearer
            .lock()
            .expect("token")
            .clone()
            .map(|t| format!("Bearer {t}"));
        let auth = auth.or_else(|| self.authorization.clone());
        fn with<B>(
            mut req: ureq::RequestBuilder<B>,
            headers: &[(&str, &str)],
            auth: &Option<String>,
        ) -> ureq::RequestBuilder<B> {
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            match auth {
                Some(a) => req.header("Authorization", a),
                None => req,
            }
        }
        match method {
            "HEAD" => with(self.agent.head(url), headers, &auth).call(),
            "GET" => with(self.agent.get(url), headers, &auth).call(),
            "POST" => with(self.agent.post(url), headers, &auth).send(body),
            _ => with(self.agent.put(url), headers, &auth).send(body),
        }
    }

    /// One request, answering a `WWW-Authenticate: Bearer` challenge once: a token from the
    /// realm it names (for its service and scope, with the Basic credentials), then the request
    /// again with it.
    fn call(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Answer> {
        let answer = self.send(method, url, headers, body);
        let challenge = match &answer {
            Ok(r) if r.status().as_u16() == 401 => {
                header(r, "WWW-Authenticate").and_then(|h| bearer_challenge(&h))
            }
            _ => None,
        };
        let Some(challenge) = challenge else {
            return Ok(answer);
        };
        let token = self.token(&challenge)?;
        *self.bearer.lock().expect("token") = Some(token);
        Ok(self.send(method, url, headers, body))
    }

    /// A token from the challenge's realm (the distribution token protocol).
    fn token(&self, challenge: &[(String, String)]) -> Result<String> {
        let param = |k: &str| {
            challenge
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        let realm = param("realm")
            .filter(|r| r.starts_with("http://") || r.starts_with("https://"))
            .ok_or_else(|| Failure::Permanent("a Bearer challenge without a realm URL".into()))?;
        let mut query = Vec::new();
        for k in ["service", "scope"] {
            if let Some(v) = param(k) {
                query.push(format!("{k}={}", query_value(v)));
            }
        }
        let sep = if realm.contains('?') { '&' } else { '?' };
        let url = format!("{realm}{sep}{}", query.join("&"));
        let mut req = self.agent.get(&url).header("Accept", "application/json");
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        let what = format!("getting a token from {realm}");
        let mut r = checked(req.call(), &what, &[])?;
        let bytes = r
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| Failure::Transient(format!("{what}: {e}")))?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        v["token"]
            .as_str()
            .or(v["access_token"].as_str())
            .map(str::to_string)
            .ok_or_else(|| Failure::Permanent(format!("{what}: the answer holds no token")))
    }

    /// The digest of the manifest `tag` names, or `None` when there is no such tag.
    pub fn manifest_digest(&self, tag: &str) -> Result<Option<String>> {
        let what = format!("HEAD manifest {tag}");
        let url = self.url(&format!("manifests/{tag}"));
        let r = self.call("HEAD", &url, &[("Accept", MANIFEST_ACCEPT)], &[])?;
        let r = checked(r, &what, &[404])?;
        if r.status().as_u16() == 404 {
            return Ok(None);
        }
        match header(&r, "Docker-Content-Digest") {
            Some(d) => Ok(Some(d)),
            None => Ok(Some(sha256(&self.manifest(tag)?))),
        }
    }

    /// The bytes of the manifest `reference` (a tag or digest) names.
    pub fn manifest(&self, reference: &str) -> Result<Vec<u8>> {
        let what = format!("GET manifest {reference}");
        let url = self.url(&format!("manifests/{reference}"));
        let r = self.call("GET", &url, &[("Accept", MANIFEST_ACCEPT)], &[])?;
        let mut r = checked(r, &what, &[])?;
        r.body_mut()
            .with_config()
            .limit(4 << 20)
            .read_to_vec()
            .map_err(|e| Failure::Transient(format!("{what}: {e}")))
    }

    /// Uploads a blob unless the repository already holds it.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<()> {
        let digest = sha256(bytes);
        let what = format!("HEAD blob {digest}");
        let head = self.call("HEAD", &self.url(&format!("blobs/{digest}")), &[], &[])?;
        if checked(head, &what, &[404])?.status().as_u16() != 404 {
            return Ok(());
        }
        let what = format!("starting the upload of {digest}");
        let start = self.call("POST", &self.url("blobs/uploads/"), &[], &[])?;
        let r = checked(start, &what, &[])?;
        let location = header(&r, "Location")
            .ok_or_else(|| Failure::Permanent(format!("{what}: no Location in the answer")))?;
        let location = if location.starts_with('/') {
            format!("{}{location}", self.origin)
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let what = format!("uploading {digest}");
        let url = format!("{location}{sep}digest={digest}");
        let put = self.call(
            "PUT",
            &url,
            &[("Content-Type", "application/octet-stream")],
            bytes,
        )?;
        checked(put, &what, &[])?;
        Ok(())
    }

    /// Puts a manifest under `tag`; the digest the registry gives it.
    pub fn put_manifest(&self, tag: &str, bytes: &[u8]) -> Result<String> {
        let what = format!("PUT manifest {tag}");
        let url = self.url(&format!("manifests/{tag}"));
        let put = self.call("PUT", &url, &[("Content-Type", MANIFEST_TYPE)], bytes)?;
        let r = checked(put, &what, &[])?;
        Ok(header(&r, "Docker-Content-Digest").unwrap_or_else(|| sha256(bytes)))
    }
}

fn header(r: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The answer when it succeeded (or is one of `allowed`), else the failure it is: a network
/// error, 429 and 5xx transient, anything else permanent, with the registry's error text.
fn checked(
    response: Answer,
    what: &str,
    allowed: &[u16],
) -> Result<ureq::http::Response<ureq::Body>> {
    let mut r = response.map_err(|e| Failure::Transient(format!("{what}: {e}")))?;
    let status = r.status().as_u16();
    if r.status().is_success() || allowed.contains(&status) {
        return Ok(r);
    }
    let body = r
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    let text: String = body.trim().chars().take(300).collect();
    let message = format!("{what}: the registry answered {status} {text}");
    if status == 429 || status >= 500 {
        Err(Failure::Transient(message))
    } else {
        Err(Failure::Permanent(message))
    }
}
