//! The web UI (issue 14), served by `crucible serve` under `/ui/`: server-rendered HTML pages
//! with one small script (`app.js`) and one style sheet, both embedded, so nothing is built and
//! nothing is fetched from a network. A person signs in with an API token, kept in an HttpOnly,
//! SameSite=Strict cookie; every page reads through the API's own handlers with the subject the
//! cookie names, so a page shows exactly what the API would answer that subject, and "not found"
//! for what it may not read. `pages` holds the runs, a run, packs and drafts and the open
//! decisions; `standing` the standing launches; `evidence` a decision request's evidence with
//! its answer controls, and the evidence files, served sandboxed.

mod evidence;
mod pages;
mod render;
mod standing;

use crate::error::ApiError;
use crate::identity::Caller;
use crate::App;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
pub(crate) use render::esc;
use std::path::Path;

/// The cookie that carries the signed-in subject's token.
const COOKIE: &str = "crucible_session";

/// Every page's policy: only this origin's script and style, images inline as data, frames only
/// from this origin (the sandboxed evidence files), and never framed by another page.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; frame-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

/// A page's outcome: the page, or the page that says why not.
type PageResult = Result<Response, Refused>;

/// The page that says why a request was refused, boxed: a response is large to carry in every
/// `Result` a page passes up.
pub(crate) struct Refused(Box<Response>);

impl From<Response> for Refused {
    fn from(r: Response) -> Refused {
        Refused(Box::new(r))
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        *self.0
    }
}

/// The run's plan as it runs, for its graph: written beside its delivered pack at every prepare.
pub(crate) fn save_plan(run_dir: &Path, plan: &crucible_plan::Plan) -> crate::error::ApiResult<()> {
    let text = serde_json::to_vec(plan).map_err(anyhow::Error::from)?;
    crucible_engine::state::write_atomic(&run_dir.join("plan.json"), &text)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("writing the run's plan: {e}")))
}

/// The UI's routes, on the controller's state.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/runs") }))
        .route(
            "/ui/static/app.js",
            get(|| async { asset("text/javascript", include_str!("app.js")) }),
        )
        .route(
            "/ui/static/app.css",
            get(|| async { asset("text/css", include_str!("app.css")) }),
        )
        .route("/ui/signin", get(pages::signin_form).post(pages::signin))
        .route("/ui/signout", post(pages::signout))
        .route("/ui/runs", get(pages::runs))
        .route("/ui/runs/table", get(pages::runs_table))
        .route("/ui/runs/{id}", get(pages::run))
        .route("/ui/runs/{id}/summary", get(pages::run_summary))
        .route("/ui/runs/{id}/graph", get(pages::run_graph))
        .route("/ui/runs/{id}/tasks", get(pages::run_tasks))
        .route("/ui/runs/{id}/events", get(pages::run_events))
        .route("/ui/runs/{id}/files", get(pages::task_file))
        .route("/ui/packs", get(pages::packs))
        .route("/ui/standing", get(standing::list))
        .route("/ui/standing/{id}", get(standing::show))
        .route("/ui/decisions", get(pages::decisions))
        .route("/ui/decisions/list", get(pages::decisions_list))
        .route("/ui/decisions.json", get(pages::decisions_json))
        .route("/ui/runs/{id}/decisions/{route}", get(evidence::show))
        .route(
            "/ui/runs/{id}/decisions/{route}/answer",
            post(evidence::answer),
        )
        .route(
            "/ui/runs/{id}/decisions/{route}/files/{n}",
            get(evidence::file),
        )
        .with_state(app)
}

fn asset(media: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, media),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text,
    )
        .into_response()
}

/// The signed-in subject: the API's caller for the token in the session cookie. Without a valid
/// one, a page sends the browser to sign in.
pub(crate) struct Signed(pub Caller);

impl FromRequestParts<App> for Signed {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Signed, Refused> {
        let token = cookie(&parts.headers, COOKIE).ok_or_else(to_signin)?;
        caller_of(app, &token).await.map(Signed)
    }
}

/// The caller a token names, through the API's own extractor; no valid token sends the browser
/// to sign in.
async fn caller_of(app: &App, token: &str) -> Result<Caller, Refused> {
    let request = axum::http::Request::builder()
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(())
        .map_err(|_| to_signin())?;
    let (mut parts, ()) = request.into_parts();
    match Caller::from_request_parts(&mut parts, app).await {
        Ok(c) => Ok(c),
        Err(ApiError::Unauthenticated) => Err(to_signin().into()),
        Err(e) => Err(failure(None, e).into()),
    }
}

fn to_signin() -> Response {
    Redirect::to("/ui/signin").into_response()
}

/// The value of a cookie in the request.
fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// A form post from another site is refused: the cookie is SameSite=Strict already, and an
/// `Origin` naming another host than the one addressed is refused as well.
fn same_origin(headers: &axum::http::HeaderMap) -> Result<(), Refused> {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match (origin, host) {
        (None, _) => Ok(()),
        (Some(o), Some(h)) if o.split_once("://").map(|(_, rest)| rest) == Some(h) => Ok(()),
        _ => Err(failure(
            None,
            ApiError::Forbidden("a form from another origin is refused".into()),
        )
        .into()),
    }
}

/// An HTML page with the controller's policy headers.
fn html(status: StatusCode, body: String) -> Response {
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
    // the page's own forms, which `same_origin` refuses.
    with_policy(
        (status, body).into_response(),
        "text/html; charset=utf-8",
        PAGE_CSP,
        "same-origin",
    )
}

/// `r` as `mime` under the policy `csp`: never sniffed, never cached, sending `referrer`.
fn with_policy(
    mut r: Response,
    mime: &'static str,
    csp: &'static str,
    referrer: &'static str,
) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static(referrer));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A file a task wrote, served as `mime` under `csp`: never sniffed, never sent on as a referrer,
/// never cached, and never readable by another origin.
pub(crate) fn untrusted(body: Vec<u8>, mime: &'static str, csp: &'static str) -> Response {
    let mut r = with_policy(body.into_response(), mime, csp, "no-referrer");
    r.headers_mut().insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    r
}

/// Marks `r` a download (`Content-Disposition: attachment`) named by the last segment of
/// `path`, every character but `A-Za-z0-9._-` replaced by `_`.
pub(crate) fn as_attachment(r: &mut Response, path: &str) {
    let name: String = path
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("file")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
}

/// A fragment a page's script swaps in.
fn fragment(body: String) -> Response {
    html(StatusCode::OK, body)
}

/// A whole page: the navigation, who is signed in, the body.
fn page(who: Option<&Caller>, title: &str, body: &str) -> Response {
    page_with(StatusCode::OK, who, title, body)
}

fn page_with(status: StatusCode, who: Option<&Caller>, title: &str, body: &str) -> Response {
    let nav = match who {
        Some(c) => format!(
            "<nav><a href=\"/ui/runs\">Runs</a> <a href=\"/ui/packs\">Packs and drafts</a> \
             <a href=\"/ui/standing\">Standing launches</a> <a href=\"/ui/decisions\">Decisions</a><span class=\"who\">{} \
             <form method=\"post\" action=\"/ui/signout\"><button>Sign out</button></form></span></nav>",
            esc(&c.name)
        ),
        None => "<nav><span>crucible</span></nav>".into(),
    };
    html(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{} · crucible</title><link rel=\"stylesheet\" href=\"/ui/static/app.css\">\
             <script src=\"/ui/static/app.js\" defer></script></head><body>{nav}<main>\
             <h1>{}</h1>{body}</main></body></html>",
            esc(title),
            esc(title)
        ),
    )
}

/// The page that says why a request was refused, with the API's status and reason: "not found"
/// alike for what is missing and what the subject may not read.
fn failure(who: Option<&Caller>, e: ApiError) -> Response {
    let reason = e.to_string();
    let status = e.into_response().status();
    page_with(
        status,
        who,
        status.canonical_reason().unwrap_or("Refused"),
        &format!("<p class=\"refused\">{}</p>", esc(&reason)),
    )
}

/// `application/x-www-form-urlencoded` pairs, in order, repeated names kept.
fn form_pairs(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (url_decode(k), url_decode(v))
        })
        .collect()
}

fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_pairs_decode_and_keep_repeats() {
        let pairs = form_pairs("q%3Ajobs=j1&q%3Ajobs=j2&note=two+words%21&bad=%zz&end=%4");
        assert_eq!(
            pairs,
            vec![
                ("q:jobs".into(), "j1".into()),
                ("q:jobs".into(), "j2".into()),
                ("note".into(), "two words!".into()),
                ("bad".into(), "%zz".into()),
                ("end".into(), "%4".into()),
            ]
        );
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; crucible_session=tok; b=2"),
        );
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("tok"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
