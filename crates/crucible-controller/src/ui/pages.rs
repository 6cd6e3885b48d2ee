//! Sign-in, the runs, a run (its graph coloured by task status, updated over its event stream;
//! each task's output, files and log), packs and drafts, and the open decisions the subject may
//! answer. Every read goes through the API handler that answers the same question, with the
//! signed-in subject as its caller.

use super::render::{esc, json_tree};
use super::{
    caller_of, failure, form_pairs, fragment, page, page_with, same_origin, PageResult, Refused,
    Signed, COOKIE,
};
use crate::error::ApiResult;
use crate::identity::Caller;
use crate::{decisions, drafts, packs, runs, App};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use crucible_plan::picture::{self, Colouring};
use crucible_plan::{Plan, Status};
use serde_json::Value;

/// A path segment, percent-encoded.
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The URL of a decision request's evidence page.
pub(crate) fn evidence_url(run: &str, route: &str) -> String {
    format!("/ui/runs/{}/decisions/{}", seg(run), seg(route))
}

/// An API answer, or the page that says why not.
pub(crate) fn read<T>(who: &Caller, r: ApiResult<Json<T>>) -> Result<T, Refused> {
    r.map(|Json(v)| v).map_err(|e| failure(Some(who), e).into())
}

/// One run as `GET /v1/runs/{id}` shows it to the signed-in subject (the API's own scoping).
async fn shown(app: &App, c: &Caller, id: &str) -> Result<Value, Refused> {
    read(
        c,
        runs::show(State(app.clone()), c.clone(), Path(id.to_string())).await,
    )
}

pub(crate) async fn signin_form() -> Response {
    page(
        None,
        "Sign in",
        "<form method=\"post\" action=\"/ui/signin\" class=\"signin\"><label>API token \
         <input type=\"password\" name=\"token\" autocomplete=\"off\" required></label> \
         <button>Sign in</button></form>\
         <p>Sign in with the token your team's admin gave you (<code>crucible remote</code> \
         takes the same token).</p>",
    )
}

/// `POST /ui/signin`: a valid token becomes the session cookie (HttpOnly, SameSite=Strict).
pub(crate) async fn signin(State(app): State<App>, headers: HeaderMap, body: String) -> PageResult {
    same_origin(&headers)?;
    let token = form_pairs(&body)
        .into_iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let refused = || {
        page_with(
            StatusCode::UNAUTHORIZED,
            None,
            "Sign in",
            "<p class=\"refused\">That token is not valid.</p>\
             <p><a href=\"/ui/signin\">Try again</a></p>",
        )
    };
    // Only a token's own characters reach the cookie header.
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(refused().into());
    }
    caller_of(&app, &token).await.map_err(|_| refused())?;
    let mut r = Redirect::to("/ui/runs").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        format!("{COOKIE}={token}; Path=/ui; HttpOnly; SameSite=Strict")
            .parse()
            .expect("a cookie of token characters"),
    );
    Ok(r)
}

pub(crate) async fn signout(headers: HeaderMap) -> PageResult {
    same_origin(&headers)?;
    let mut r = Redirect::to("/ui/signin").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0")
            .parse()
            .expect("a fixed cookie"),
    );
    Ok(r)
}

/// `/ui/runs`: every run the subject may read, newest first, refreshed every two seconds.
pub(crate) async fn runs(State(app): State<App>, Signed(c): Signed) -> PageResult {
    let table = runs_html(&app, &c).await?;
    Ok(page(
        Some(&c),
        "Runs",
        &format!("<div data-src=\"/ui/runs/table\" data-poll=\"2000\">{table}</div>"),
    ))
}

pub(crate) async fn runs_table(State(app): State<App>, Signed(c): Signed) -> PageResult {
    Ok(fragment(runs_html(&app, &c).await?))
}

/// The most runs the list shows.
const RUNS_SHOWN: usize = 100;

async fn runs_html(app: &App, c: &Caller) -> Result<String, Refused> {
    let listed = read(c, runs::list(State(app.clone()), c.clone()).await)?;
    let mut out = String::from(
        "<table class=\"runs\"><tr><th>run</th><th>team</th><th>state</th><th>verdict</th>\
         <th>spent / ceiling</th><th>time ceiling</th><th>launched</th></tr>",
    );
    let all = listed["runs"].as_array().cloned().unwrap_or_default();
    // The listing carries each run's launch and spend (its session log read only when it
    // changed), so no run is shown whole here.
    for run in all.iter().take(RUNS_SHOWN) {
        let id = run["id"].as_str().unwrap_or_default();
        out.push_str(&format!(
            "<tr data-run=\"{}\"><td><a href=\"/ui/runs/{}\">{}</a></td><td>{}</td>\
             <td class=\"state {}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(id),
            seg(id),
            esc(id),
            esc(text(&run["team"])),
            esc(text(&run["state"])),
            esc(&state_word(run)),
            esc(text(&run["verdict"])),
            spend(run),
            esc(text(&run["request"]["max_time"])),
            esc(&when(&run["created_at_ms"])),
        ));
    }
    out.push_str("</table>");
    if all.is_empty() {
        out.push_str("<p>No runs yet.</p>");
    } else if all.len() > RUNS_SHOWN {
        out.push_str(&format!(
            "<p>The newest {RUNS_SHOWN} of {} runs.</p>",
            all.len()
        ));
    }
    Ok(out)
}

pub(crate) fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// `running`, or how the run ended.
fn state_word(run: &Value) -> String {
    match (text(&run["state"]), text(&run["outcome"])) {
        (s, "") => s.to_string(),
        (s, o) => format!("{s} ({o})"),
    }
}

/// Spend against the cost ceiling, in US dollars.
fn spend(run: &Value) -> String {
    let spent = run["spent_usd"].as_f64().unwrap_or(0.0);
    match run["request"]["max_cost"].as_f64() {
        Some(max) => format!("${spent:.4} / ${max}"),
        None => format!("${spent:.4}"),
    }
}

/// Milliseconds since the epoch, as RFC 3339.
fn when(ms: &Value) -> String {
    match ms.as_i64() {
        Some(ms) if ms >= 0 => crucible_engine::decision::rfc3339(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64),
        ),
        _ => String::new(),
    }
}

/// `/ui/runs/{id}`: the run's summary, its decisions, its graph and its tasks, each refreshed
/// when the run's event stream says something happened.
pub(crate) async fn run(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
) -> PageResult {
    let show = shown(&app, &c, &id).await?;
    let summary = summary_html(&app, &c, &id, &show).await?;
    let graph = graph_html(&app, &id, &show);
    let tasks = tasks_html(&app, &c, &id, &show).await?;
    let base = format!("/ui/runs/{}", seg(&id));
    Ok(page(
        Some(&c),
        &format!("Run {id}"),
        &format!(
            "<div data-events=\"{base}/events\"></div>\
             <section data-src=\"{base}/summary\" data-live>{summary}</section>\
             <h2>Graph</h2><section class=\"graph\" data-src=\"{base}/graph\" data-live>{graph}</section>\
             <h2>Tasks</h2><section data-src=\"{base}/tasks\" data-live>{tasks}</section>"
        ),
    ))
}

pub(crate) async fn run_summary(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
) -> PageResult {
    let show = shown(&app, &c, &id).await?;
    Ok(fragment(summary_html(&app, &c, &id, &show).await?))
}

pub(crate) async fn run_graph(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
) -> PageResult {
    let show = shown(&app, &c, &id).await?;
    Ok(fragment(graph_html(&app, &id, &show)))
}

pub(crate) async fn run_tasks(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
) -> PageResult {
    let show = shown(&app, &c, &id).await?;
    Ok(fragment(tasks_html(&app, &c, &id, &show).await?))
}

/// `/ui/runs/{id}/events`: the API's event stream of the run, for the page's script.
pub(crate) async fn run_events(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
) -> PageResult {
    match runs::events(State(app), c.clone(), Path(id)).await {
        Ok(r) => Ok(r.into_response()),
        Err(e) => Err(failure(Some(&c), e).into()),
    }
}

async fn summary_html(app: &App, c: &Caller, id: &str, run: &Value) -> Result<String, Refused> {
    let elapsed = match (run["created_at_ms"].as_i64(), run["ended_at_ms"].as_i64()) {
        (Some(a), Some(b)) => format!("{:.1}s", (b - a) as f64 / 1000.0),
        (Some(a), None) => format!("{:.1}s so far", (crate::db::now_ms() - a) as f64 / 1000.0),
        _ => String::new(),
    };
    let mut out = format!(
        "<dl class=\"summary\"><dt>state</dt><dd class=\"state\" id=\"run-state\">{}</dd>\
         <dt>verdict</dt><dd>{}</dd><dt>spent / cost ceiling</dt><dd>{}</dd>\
         <dt>elapsed / time ceiling</dt><dd>{} / {}</dd><dt>team</dt><dd>{}</dd>\
         <dt>pack</dt><dd><code>{}</code> ({})</dd><dt>launched</dt><dd>{}</dd>",
        esc(&state_word(run)),
        esc(text(&run["verdict"])),
        spend(run),
        esc(&elapsed),
        esc(text(&run["request"]["max_time"])),
        esc(text(&run["team"])),
        esc(text(&run["digest"])),
        esc(text(&run["source"])),
        esc(&when(&run["created_at_ms"])),
    );
    if let Some(reason) = run["reason"].as_str() {
        out.push_str(&format!("<dt>reason</dt><dd>{}</dd>", esc(reason)));
    }
    out.push_str("</dl>");
    let held = decisions::of_run(&app.db, id)
        .await
        .map_err(|e| failure(Some(c), e.into()))?;
    if !held.is_empty() {
        out.push_str("<h2>Decisions</h2><ul class=\"decisions\">");
        for (route, state) in held {
            out.push_str(&format!(
                "<li><a href=\"{}\">{}</a>: {}</li>",
                evidence_url(id, &route),
                esc(&route),
                esc(&state)
            ));
        }
        out.push_str("</ul>");
    }
    Ok(out)
}

/// The run's graph as the CLI draws it (`plan show RUN --format svg`): each task coloured by
/// its status in the run so far: pending (white), running (blue, the rows the executor has in
/// flight), or how it settled.
fn graph_html(app: &App, id: &str, run: &Value) -> String {
    let plan: Option<Plan> = std::fs::read(app.runs_dir().join(id).join("plan.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(plan) = plan else {
        return "<p>The graph is drawn once the run's plan is compiled.</p>".into();
    };
    let rows: Vec<(String, Status)> = run["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                text(&r["task"]).to_string(),
                Status::parse(r["status"].as_str()?)?,
            ))
        })
        .collect();
    let settled = picture::node_statuses(rows.iter().map(|(t, s)| (t.as_str(), *s)));
    let running = picture::running_nodes(
        run["running"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str),
    );
    picture::svg(
        &plan,
        &Colouring::Run {
            settled: &settled,
            running: &running,
        },
    )
}

/// Each settled row: its status, attempts, time and spend, its note, output, files and log.
async fn tasks_html(app: &App, c: &Caller, id: &str, run: &Value) -> Result<String, Refused> {
    let logs = read(
        c,
        runs::task_logs(State(app.clone()), c.clone(), Path(id.to_string())).await,
    )?;
    let logs = logs["rows"].as_array().cloned().unwrap_or_default();
    let dir = runs::engine_dir(app, id);
    let rows = run["rows"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return Ok("<p>No task has settled yet.</p>".into());
    }
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let task = text(&r["task"]);
        out.push_str(&format!(
            "<details class=\"task\" data-task=\"{}\"><summary><b>{}</b> <span class=\"status {}\">{}</span> \
             · {} attempt(s) · {:.2}s · ${:.4}</summary>",
            esc(task),
            esc(task),
            esc(text(&r["status"])),
            esc(text(&r["status"])),
            r["attempts"].as_u64().unwrap_or(0),
            r["secs"].as_f64().unwrap_or(0.0),
            r["cost_usd"].as_f64().unwrap_or(0.0),
        ));
        if let Some(note) = r["note"].as_str() {
            out.push_str(&format!("<p class=\"note\">{}</p>", esc(note)));
        }
        if !r["output"].is_null() {
            out.push_str(&format!("<h4>output</h4>{}", json_tree(&r["output"])));
        }
        if r["files"].as_bool() == Some(true) {
            let files = dir
                .as_deref()
                .map(|d| set_files(&d.join("files").join(set_dir(task))))
                .unwrap_or_default();
            out.push_str("<h4>files</h4><ul class=\"files\">");
            for (path, size) in files {
                out.push_str(&format!(
                    "<li><a class=\"download\" href=\"/ui/runs/{}/files?task={}&amp;path={}\" \
                     download><code>{}</code></a> ({size} bytes)</li>",
                    seg(id),
                    seg(task),
                    seg(&path),
                    esc(&path)
                ));
            }
            out.push_str("</ul>");
        }
        if let Some(log) = logs.get(i).filter(|l| l["task"] == r["task"]) {
            for f in log["files"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "<h4>{}</h4><pre class=\"log\">{}</pre>",
                    esc(text(&f["file"])),
                    esc(text(&f["text"]))
                ));
            }
        }
        out.push_str("</details>");
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
pub(crate) struct FileQuery {
    /// The settled row (`task`, `task[key]`).
    task: String,
    /// The file's path in the row's published set.
    path: String,
}

/// `/ui/runs/{id}/files?task=ROW&path=P`: one file a settled row published, to a subject who may
/// read the run (the API's scoping: "not found" otherwise, as for a missing file), always as an
/// attachment of `application/octet-stream` under a sandboxing policy: a task wrote it, so the
/// controller's origin never renders it. Only a path the row's set lists is served.
pub(crate) async fn task_file(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<FileQuery>,
) -> PageResult {
    let run = shown(&app, &c, &id).await?;
    let not_found = || -> Refused {
        let what = format!(
            "file `{}` of task `{}` in this run",
            q.path.escape_debug(),
            q.task.escape_debug()
        );
        failure(Some(&c), crate::error::ApiError::NotFound(what)).into()
    };
    let published = run["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| text(&r["task"]) == q.task && r["files"].as_bool() == Some(true));
    let set = runs::engine_dir(&app, &id)
        .filter(|_| published)
        .map(|d| d.join("files").join(set_dir(&q.task)))
        .ok_or_else(not_found)?;
    // The listing walks the set without following a link, so a listed path is a regular file
    // inside it.
    if !set_files(&set).iter().any(|(p, _)| *p == q.path) {
        return Err(not_found());
    }
    let body = std::fs::read(set.join(&q.path)).map_err(|_| not_found())?;
    let mut r = super::untrusted(
        body,
        "application/octet-stream",
        "default-src 'none'; sandbox",
    );
    super::as_attachment(&mut r, &q.path);
    Ok(r)
}

/// The directory a row's declared files are published in: `task` or `task[key]`.
fn set_dir(row: &str) -> String {
    match row.split_once('[') {
        Some((base, rest)) if rest.ends_with(']') => {
            crucible_engine::files::dir_name(base, Some(&rest[..rest.len() - 1]))
        }
        _ => crucible_engine::files::dir_name(row, None),
    }
}

/// Each regular file under a published set, by path, with its size.
fn set_files(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push((e.path(), path)),
                Ok(t) if t.is_file() => {
                    out.push((path, e.metadata().map(|m| m.len()).unwrap_or(0)))
                }
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// `/ui/packs`: the packs and drafts of the subject's teams, and the packs shared with them.
pub(crate) async fn packs(State(app): State<App>, Signed(c): Signed) -> PageResult {
    let p = read(&c, packs::list(State(app.clone()), c.clone()).await)?;
    let d = read(&c, drafts::list(State(app.clone()), c.clone()).await)?;
    let mut out = String::from(
        "<h2>Packs</h2><table class=\"packs\"><tr><th>pack</th><th>team</th><th>current digest</th></tr>",
    );
    for pack in p["packs"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}{}</td><td><code>{}</code></td></tr>",
            esc(text(&pack["name"])),
            esc(text(&pack["team"])),
            if pack["shared"] == true {
                " (shared with your team)"
            } else {
                ""
            },
            esc(text(&pack["digest"]))
        ));
    }
    out.push_str(
        "</table><h2>Drafts</h2><table class=\"drafts\"><tr><th>draft</th><th>team</th><th>latest version</th></tr>",
    );
    for draft in d["drafts"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(text(&draft["name"])),
            esc(text(&draft["team"])),
            draft["latest"].as_i64().unwrap_or(0)
        ));
    }
    out.push_str("</table>");
    Ok(page(Some(&c), "Packs and drafts", &out))
}

/// `/ui/decisions`: the open requests the subject may answer; its script raises a browser
/// notification for each new one.
pub(crate) async fn decisions(State(app): State<App>, Signed(c): Signed) -> PageResult {
    let list = decisions_html(&app, &c).await?;
    Ok(page(
        Some(&c),
        "Open decisions",
        &format!(
            "<p><button id=\"notify\" type=\"button\">Notify me of new requests</button></p>\
             <section id=\"decisions\" data-decisions=\"/ui/decisions.json\" \
             data-src=\"/ui/decisions/list\">{list}</section>"
        ),
    ))
}

pub(crate) async fn decisions_list(State(app): State<App>, Signed(c): Signed) -> PageResult {
    Ok(fragment(decisions_html(&app, &c).await?))
}

/// The open requests the subject may answer, each with its evidence page's URL.
async fn open_requests(app: &App, c: &Caller) -> Result<Vec<Value>, Refused> {
    let v = read(c, decisions::list(State(app.clone()), c.clone()).await)?;
    let mut open = v["decisions"].as_array().cloned().unwrap_or_default();
    for d in &mut open {
        d["url"] = Value::String(evidence_url(text(&d["run"]), text(&d["route"])));
    }
    Ok(open)
}

pub(crate) async fn decisions_json(State(app): State<App>, Signed(c): Signed) -> PageResult {
    let open = open_requests(&app, &c).await?;
    Ok(Json(serde_json::json!({ "decisions": open })).into_response())
}

async fn decisions_html(app: &App, c: &Caller) -> Result<String, Refused> {
    let open = open_requests(app, c).await?;
    if open.is_empty() {
        return Ok("<p>No open decision waits for you.</p>".into());
    }
    let mut out = String::from(
        "<table class=\"open\"><tr><th>run</th><th>route</th><th>questions</th><th>expires</th></tr>",
    );
    for d in &open {
        let questions: Vec<String> = d["questions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|q| esc(text(&q["ask"])))
            .collect();
        out.push_str(&format!(
            "<tr data-key=\"{}/{}/{}\"><td>{}</td><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
            esc(text(&d["run"])),
            esc(text(&d["route"])),
            esc(text(&d["digest"])),
            esc(text(&d["run"])),
            esc(text(&d["url"])),
            esc(text(&d["route"])),
            questions.join("<br>"),
            esc(text(&d["expires_at"])),
        ));
    }
    out.push_str("</table>");
    Ok(out)
}
