//! A decision request's evidence page (RFC-0002:C-DECISION-EVIDENCE): every part of the
//! evidence on one page, with the answer controls for a subject who may answer (each question's
//! options the only choices, multiple-choice marked). JSON outputs are trees keeping each
//! value's type; files are shown inline by media type (PNG, JPEG, GIF, SVG, Markdown, CSV as a
//! table, JSON as a tree, HTML as an interactive document), anything else, or a file whose
//! inline view fails, offered for download; the review is rendered from CommonMark with raw
//! HTML shown as text.
//!
//! Evidence is untrusted: SVG and HTML files are served from their own URL into an iframe whose
//! `sandbox` lacks `allow-same-origin` (an opaque origin: no cookies, no storage, no API, no
//! navigating the top page), and their response carries a CSP with `default-src 'none'` and
//! the same `sandbox`, so not one request leaves the frame, even opened on its own.

use super::pages::{evidence_url, seg};
use super::render::{csv_table, esc, json_tree, markdown};
use super::{as_attachment, failure, form_pairs, page, same_origin, untrusted, PageResult, Signed};
use crate::identity::{Caller, Role};
use crate::{decisions, runs, App};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use base64::Engine;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// How a file is shown, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    Image(&'static str),
    Svg,
    Html,
    Markdown,
    Csv,
    Json,
    Other,
}

impl Media {
    fn of(path: &str) -> Media {
        let ext = path
            .rsplit_once('.')
            .map(|(_, e)| e.to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "png" => Media::Image("image/png"),
            "jpg" | "jpeg" => Media::Image("image/jpeg"),
            "gif" => Media::Image("image/gif"),
            "svg" => Media::Svg,
            "html" | "htm" => Media::Html,
            "md" | "markdown" => Media::Markdown,
            "csv" => Media::Csv,
            "json" => Media::Json,
            _ => Media::Other,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Media::Image(m) => m.trim_start_matches("image/"),
            Media::Svg => "svg",
            Media::Html => "html",
            Media::Markdown => "markdown",
            Media::Csv => "csv",
            Media::Json => "json",
            Media::Other => "other",
        }
    }

    /// The policy the file's own response carries: nothing may be fetched, and the document is
    /// sandboxed in an opaque origin wherever it is opened; an HTML document may run its own
    /// inline script there (it is an interactive document), nothing else may.
    fn csp(self) -> &'static str {
        match self {
            Media::Html => {
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 img-src data:; sandbox allow-scripts"
            }
            Media::Svg => "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox",
            _ => "default-src 'none'; sandbox",
        }
    }
}

/// Each evidence file in page order: producer, and the file's entry (path, bytes, sha256, and
/// its content as `text` or `base64`).
fn files(evidence: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    if let Some(map) = evidence["files"].as_object() {
        for (producer, list) in map {
            for f in list.as_array().into_iter().flatten() {
                out.push((producer.clone(), f.clone()));
            }
        }
    }
    out
}

/// A file's bytes.
fn bytes(f: &Value) -> Option<Vec<u8>> {
    match (f["text"].as_str(), f["base64"].as_str()) {
        (Some(t), _) => Some(t.as_bytes().to_vec()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD.decode(b).ok(),
        _ => None,
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The request, when the subject may read its run (else "not found", as the API says), and
/// whether the subject may answer it.
async fn request(app: &App, c: &Caller, run: &str, route: &str) -> Result<(Value, bool), Response> {
    let Json(held) = decisions::show(
        State(app.clone()),
        c.clone(),
        Path((run.to_string(), route.to_string())),
    )
    .await
    .map_err(|e| failure(Some(c), e))?;
    let (team_id, _) = runs::readable_team(app, c, run)
        .await
        .map_err(|e| failure(Some(c), e))?;
    Ok((held, c.role_in(&team_id) >= Some(Role::Approver)))
}

/// `/ui/runs/{id}/decisions/{route}`: the request, its evidence and the answer controls.
pub(crate) async fn show(
    State(app): State<App>,
    Signed(c): Signed,
    Path((run, route)): Path<(String, String)>,
) -> PageResult {
    let (held, approver) = request(&app, &c, &run, &route).await?;
    let ev = &held["evidence"];
    let base = evidence_url(&run, &route);
    let state = text(&held["state"]);
    let mut out = format!(
        "<dl class=\"summary\"><dt>run</dt><dd><a href=\"/ui/runs/{}\">{}</a></dd>\
         <dt>route</dt><dd>{}</dd><dt>state</dt><dd id=\"decision-state\" class=\"state\">{}</dd>\
         <dt>opened</dt><dd>{}</dd><dt>expires</dt><dd>{}</dd>\
         <dt>evidence digest</dt><dd><code>{}</code></dd></dl>",
        seg(&run),
        esc(&run),
        esc(&route),
        esc(state),
        esc(text(&held["opened_at"])),
        esc(text(&held["expires_at"])),
        esc(text(&held["digest"])),
    );
    if let Some(a) = held["answer"].as_object() {
        out.push_str(&format!(
            "<h2>Answer</h2><p>By {} at {}</p>{}",
            esc(text(&a["principal"])),
            esc(text(&a["time"])),
            json_tree(&a["answers"]),
        ));
        if let Some(note) = a["note"].as_str() {
            out.push_str(&format!("<p class=\"note\">{}</p>", esc(note)));
        }
    }
    if state == "open" && approver {
        out.push_str(&answer_form(&held, &base));
    } else if state == "open" {
        out.push_str("<p class=\"readonly\">You may read this request; answering it needs the approver role in the run's team.</p>");
    }
    out.push_str(&evidence_html(ev, &base));
    Ok(page(Some(&c), &format!("Decision: {route}"), &out))
}

/// The answer controls: each question's options, and only those; radio buttons for a question
/// that takes one answer, check boxes marked "multiple choice" for one that takes several.
fn answer_form(held: &Value, base: &str) -> String {
    let mut out = format!(
        "<h2>Your answer</h2><form method=\"post\" action=\"{base}/answer\" id=\"answer\">\
         <input type=\"hidden\" name=\"digest\" value=\"{}\">",
        esc(text(&held["digest"]))
    );
    for q in held["questions"].as_array().into_iter().flatten() {
        let id = text(&q["id"]);
        let multiple = q["multiple"].as_bool() == Some(true);
        out.push_str(&format!(
            "<fieldset class=\"question\" data-question=\"{}\" data-multiple=\"{multiple}\"><legend>{} <small>({})</small>",
            esc(id),
            esc(text(&q["ask"])),
            esc(text(&q["kind"])),
        ));
        if multiple {
            out.push_str(" <span class=\"multiple\">multiple choice: choose one or more</span>");
        }
        out.push_str("</legend>");
        let kind = if multiple { "checkbox" } else { "radio" };
        let required = if multiple { "" } else { " required" };
        for o in q["options"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "<label><input type=\"{kind}\" name=\"q:{}\" value=\"{}\"{required}> {}</label>",
                esc(id),
                esc(text(o)),
                esc(text(o)),
            ));
        }
        out.push_str("</fieldset>");
    }
    out.push_str(&format!(
        "<label class=\"note\">Note (optional, at most {} bytes; reaches prompts only as marked \
         external input)<br><textarea name=\"note\" rows=\"3\"></textarea></label>\
         <p><button type=\"submit\">Answer</button></p></form>",
        held["max_note_bytes"].as_u64().unwrap_or(0)
    ));
    out
}

/// Every part of the evidence: the review, the run, the dependencies with their outputs, the
/// files, the tasks the answer starts, and the pick values.
fn evidence_html(ev: &Value, base: &str) -> String {
    let mut out = String::new();
    if let Some(review) = ev["review"].as_str() {
        out.push_str(&format!(
            "<h2>Review</h2><section class=\"review\">{}</section>",
            markdown(review)
        ));
    }
    let r = &ev["run"];
    out.push_str(&format!(
        "<h2>Run</h2><dl class=\"summary\"><dt>spent / cost ceiling</dt><dd>${:.4} / ${}</dd>\
         <dt>elapsed / time ceiling</dt><dd>{:.1}s / {}s</dd></dl>",
        r["spent_usd"].as_f64().unwrap_or(0.0),
        r["max_cost_usd"],
        r["elapsed_secs"].as_f64().unwrap_or(0.0),
        r["max_secs"],
    ));
    out.push_str("<h2>Dependencies</h2>");
    for (name, input) in ev["inputs"].as_object().into_iter().flatten() {
        out.push_str(&format!(
            "<section class=\"input\" data-input=\"{}\"><h3>{} <span class=\"status {}\">{}</span></h3>{}</section>",
            esc(name),
            esc(name),
            esc(text(&input["status"])),
            esc(text(&input["status"])),
            json_tree(&input["output"]),
        ));
    }
    let all = files(ev);
    if !all.is_empty() {
        out.push_str("<h2>Files</h2>");
    }
    for (n, (producer, f)) in all.iter().enumerate() {
        out.push_str(&file_html(n, producer, f, base));
    }
    if let Some(gated) = ev["gated"].as_array().filter(|g| !g.is_empty()) {
        out.push_str(
            "<h2>What the answer starts</h2><table class=\"gated\"><tr><th>task</th><th>kind</th>\
             <th>question</th><th>starts on</th></tr>",
        );
        for g in gated {
            let labels: Vec<String> = g["labels"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| esc(text(l)))
                .collect();
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(text(&g["task"])),
                esc(text(&g["kind"])),
                esc(text(&g["question"])),
                labels.join(", ")
            ));
        }
        out.push_str("</table>");
    }
    if let Some(picks) = ev["picks"].as_object().filter(|p| !p.is_empty()) {
        out.push_str("<h2>Pick values</h2>");
        for (q, values) in picks {
            out.push_str(&format!("<h3>{}</h3>{}", esc(q), json_tree(values)));
        }
    }
    out
}

/// One file: its path, size and SHA-256, shown inline by its media type where it can be, and
/// always offered for download. A file that cannot be shown is marked `failed` (the page's
/// script marks an image that does not decode the same way) and shows why.
fn file_html(n: usize, producer: &str, f: &Value, base: &str) -> String {
    let path = text(&f["path"]);
    let media = Media::of(path);
    let url = format!("{base}/files/{n}");
    let content = bytes(f);
    let utf8 = f["text"].as_str();
    let inline: Option<String> = match media {
        Media::Image(mime) => content.map(|b| {
            format!(
                "<img class=\"evidence\" alt=\"{}\" src=\"data:{mime};base64,{}\">",
                esc(path),
                base64::engine::general_purpose::STANDARD.encode(b)
            )
        }),
        Media::Svg => Some(format!(
            "<iframe class=\"evidence svg\" sandbox=\"\" referrerpolicy=\"no-referrer\" title=\"{}\" src=\"{url}\"></iframe>",
            esc(path)
        )),
        Media::Html => Some(format!(
            "<iframe class=\"evidence html\" sandbox=\"allow-scripts\" referrerpolicy=\"no-referrer\" title=\"{}\" src=\"{url}\"></iframe>",
            esc(path)
        )),
        Media::Markdown => utf8.map(|t| format!("<div class=\"markdown\">{}</div>", markdown(t))),
        Media::Csv => utf8.and_then(csv_table),
        Media::Json => utf8
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .map(|v| json_tree(&v)),
        Media::Other => None,
    };
    let class = if inline.is_some() {
        "file"
    } else {
        "file failed"
    };
    format!(
        "<div class=\"{class}\" data-path=\"{}\" data-media=\"{}\"><h3><code>{}</code> \
         <small>from {} · {} bytes · sha256 {}</small></h3><div class=\"inline\">{}</div>\
         <p class=\"fallback\">This file is not shown here: download it to look at it.</p>\
         <a class=\"download\" href=\"{url}?download=1\" download=\"{}\">Download {}</a></div>",
        esc(path),
        media.name(),
        esc(path),
        esc(producer),
        f["bytes"],
        esc(text(&f["sha256"])),
        inline.unwrap_or_default(),
        esc(path.rsplit('/').next().unwrap_or(path)),
        esc(path),
    )
}

/// `/ui/runs/{id}/decisions/{route}/files/{n}`: one evidence file, to a subject who may read
/// the run, with its sandboxing policy; `?download=1` as an attachment.
pub(crate) async fn file(
    State(app): State<App>,
    Signed(c): Signed,
    Path((run, route, n)): Path<(String, String, usize)>,
    Query(query): Query<HashMap<String, String>>,
) -> PageResult {
    let (held, _) = request(&app, &c, &run, &route).await?;
    let all = files(&held["evidence"]);
    let Some((_, f)) = all.get(n) else {
        return Err(failure(
            Some(&c),
            crate::error::ApiError::NotFound(format!("evidence file {n}")),
        )
        .into());
    };
    let path = text(&f["path"]);
    let media = Media::of(path);
    let body = bytes(f).unwrap_or_default();
    let download = query.contains_key("download");
    let mime = match (download, media) {
        (true, _) | (_, Media::Other) => "application/octet-stream",
        (_, Media::Image(m)) => m,
        (_, Media::Svg) => "image/svg+xml",
        (_, Media::Html) => "text/html; charset=utf-8",
        (_, Media::Markdown) => "text/markdown; charset=utf-8",
        (_, Media::Csv) => "text/csv; charset=utf-8",
        (_, Media::Json) => "application/json",
    };
    let mut r = untrusted(body, mime, media.csp());
    if download {
        as_attachment(&mut r, path);
    }
    Ok(r)
}

/// `POST /ui/runs/{id}/decisions/{route}/answer`: the form's answer, given to the API's own
/// handler, which accepts it or says why not.
pub(crate) async fn answer(
    State(app): State<App>,
    Signed(c): Signed,
    headers: HeaderMap,
    Path((run, route)): Path<(String, String)>,
    body: String,
) -> PageResult {
    same_origin(&headers)?;
    let mut digest = String::new();
    let mut note = None;
    let mut answers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in form_pairs(&body) {
        match (k.as_str(), k.strip_prefix("q:")) {
            ("digest", _) => digest = v,
            ("note", _) => note = Some(v).filter(|n| !n.trim().is_empty()),
            (_, Some(q)) => answers.entry(q.to_string()).or_default().push(v),
            _ => {}
        }
    }
    let posted = decisions::Posted {
        digest,
        answers,
        note,
    };
    let Json(done) = decisions::answer(
        State(app.clone()),
        c.clone(),
        Path((run.clone(), route.clone())),
        Json(posted),
    )
    .await
    .map_err(|e| failure(Some(&c), e))?;
    let said = match done["acknowledged"].as_bool() {
        Some(true) => "This answer was already given: acknowledged, nothing changed.",
        _ => "Your answer is accepted: the run goes on.",
    };
    Ok(page(
        Some(&c),
        "Answer accepted",
        &format!(
            "<p id=\"accepted\">{said}</p><p><a href=\"/ui/runs/{}\">Back to the run</a> · \
             <a href=\"{}\">The request</a></p>",
            seg(&run),
            evidence_url(&run, &route)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn media_by_extension() {
        assert_eq!(Media::of("a/B.PNG"), Media::Image("image/png"));
        assert_eq!(Media::of("x.jpeg"), Media::Image("image/jpeg"));
        assert_eq!(Media::of("x.htm"), Media::Html);
        assert_eq!(Media::of("x.tar.gz"), Media::Other);
        assert_eq!(Media::of("noext"), Media::Other);
        assert!(Media::Html.csp().contains("default-src 'none'"));
        assert!(!Media::Html.csp().contains("allow-same-origin"));
    }

    #[test]
    fn a_file_not_shown_inline_is_offered_for_download() {
        let f = json!({"path": "d/x.bin", "bytes": 1, "sha256": "s", "base64": "AA=="});
        let html = file_html(3, "scan", &f, "/ui/runs/r/decisions/g");
        assert!(html.contains("class=\"file failed\""), "{html}");
        assert!(
            html.contains("href=\"/ui/runs/r/decisions/g/files/3?download=1\""),
            "{html}"
        );
        let bad = json!({"path": "x.json", "bytes": 1, "sha256": "s", "text": "{nope"});
        assert!(file_html(0, "scan", &bad, "/b").contains("file failed"));
        let csv = json!({"path": "x.csv", "bytes": 1, "sha256": "s", "text": "a\n1\n"});
        assert!(file_html(0, "scan", &csv, "/b").contains("<table class=\"csv\">"));
    }
}
