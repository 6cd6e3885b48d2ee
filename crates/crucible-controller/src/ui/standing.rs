//! Standing launches (issue 13) in the web UI: the list of the subject's teams, and one with its
//! schedule, policies and firings, each firing linking to its run. Read through the API's own
//! handlers, so another team's standing launch is "not found" here as there.

use super::pages::{read, seg, text};
use super::render::esc;
use super::{page, PageResult, Signed};
use crate::{standing, App};
use axum::extract::{Path, State};
use serde_json::Value;

/// Its schedule in words: the cron line and zone, or "by hand".
fn schedule(s: &Value) -> String {
    match s["schedule"].as_str() {
        Some(cron) => format!(
            "<code>{}</code> ({})",
            esc(cron),
            esc(s["timezone"].as_str().unwrap_or("UTC"))
        ),
        None => "fired by hand".into(),
    }
}

fn ceilings(s: &Value) -> String {
    let daily = match s["daily_max_cost"].as_f64() {
        Some(d) => format!(", ${d} a day"),
        None => String::new(),
    };
    format!(
        "${} · {}{}",
        s["max_cost"],
        esc(text(&s["max_time"])),
        esc(&daily)
    )
}

/// `/ui/standing`: the standing launches of the subject's teams.
pub(crate) async fn list(State(app): State<App>, Signed(c): Signed) -> PageResult {
    let v = read(&c, standing::list(State(app), c.clone()).await)?;
    let all = v["standing"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    if all.is_empty() {
        out.push_str("<p>No standing launch in your teams.</p>");
    } else {
        out.push_str(
            "<table class=\"standing\"><tr><th>name</th><th>team</th><th>pack</th><th>schedule</th>\
             <th>next</th><th>ceilings</th></tr>",
        );
        for s in &all {
            out.push_str(&format!(
                "<tr data-standing=\"{}\"><td><a href=\"/ui/standing/{}\">{}</a></td><td>{}</td>\
                 <td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(text(&s["id"])),
                seg(text(&s["id"])),
                esc(text(&s["name"])),
                esc(text(&s["team"])),
                esc(text(&s["pack"])),
                schedule(s),
                next(s),
                ceilings(s),
            ));
        }
        out.push_str("</table>");
    }
    Ok(page(Some(&c), "Standing launches", &out))
}

fn next(s: &Value) -> String {
    match (s["paused"].as_bool(), s["next_at"].as_str()) {
        (Some(true), _) => "paused".into(),
        (_, Some(at)) => esc(at),
        _ => String::new(),
    }
}

/// `/ui/standing/{id}`: one, with its firings, newest first.
pub(crate) async fn show(
    State(app): State<App>,
    Signed(c): Signed,
    Path(id): Path<String>,
) -> PageResult {
    let s = read(&c, standing::show(State(app), c.clone(), Path(id)).await)?;
    let mut out = format!(
        "<dl class=\"summary\"><dt>team</dt><dd>{}</dd><dt>owner</dt><dd>{}</dd>\
         <dt>pack</dt><dd><code>{}</code></dd><dt>schedule</dt><dd>{}</dd><dt>next</dt><dd>{}</dd>\
         <dt>ceilings</dt><dd>{}</dd></dl><h2>Firings</h2>",
        esc(text(&s["team"])),
        esc(text(&s["owner"])),
        esc(text(&s["pack"])),
        schedule(&s),
        next(&s),
        ceilings(&s),
    );
    let firings = s["firings"].as_array().cloned().unwrap_or_default();
    if firings.is_empty() {
        out.push_str("<p>It has not fired yet.</p>");
    } else {
        out.push_str(
            "<table class=\"firings\"><tr><th>at</th><th>trigger</th><th>scheduled for</th>\
             <th>result</th><th>run or reason</th></tr>",
        );
        for f in &firings {
            let what = match f["run"].as_str() {
                Some(run) => format!("<a href=\"/ui/runs/{}\">{}</a>", seg(run), esc(run)),
                None => esc(text(&f["reason"])),
            };
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{what}</td></tr>",
                esc(text(&f["at"])),
                esc(text(&f["trigger"])),
                esc(text(&f["scheduled_for"])),
                esc(text(&f["result"])),
            ));
        }
        out.push_str("</table>");
    }
    Ok(page(
        Some(&c),
        &format!("Standing launch {}", text(&s["name"])),
        &out,
    ))
}
