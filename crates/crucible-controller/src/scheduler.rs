//! The scheduler (issue 13): when a standing launch fires, what a firing decides, and the
//! history of a launch series (RFC-0002:C-RUN-HISTORY).
//!
//! A firing is decided under the series' lock, in this order, and always recorded (`firings`):
//! 1. **No overlap**: while a run of the series is recorded `running`, the firing is `skipped`.
//! 2. **Daily spend cap**: when the series' runs fired today (the calendar day of the firing in
//!    the schedule's time zone) spent the cap, the firing is `skipped`; otherwise the run's own
//!    cost ceiling is lowered to what is left of the cap, so the series cannot pass it.
//! 3. **A scheduled firing acts for its owner**, who must still hold the editor role in the team;
//!    otherwise it is `refused`.
//! 4. The launch goes through the one admission path of `POST /v1/launches`
//!    ([`crate::launches::admit`]) with the series' history: `launched` with its run, or
//!    `refused` with the launch's reason.
//!
//! A scheduler pass looks, for each standing launch with a schedule, at the scheduled times
//! after its cursor up to now. None: nothing happens. One or more: the cursor moves to now
//! (claimed with a compare-and-set, so two passes never both fire it) and the standing launch
//! fires once, for the latest of them: after downtime that is one `catch-up` firing standing for
//! every time missed, never a burst. A paused standing launch only has its cursor moved: the
//! times it was paused over are never fired.

use crate::clock::rfc3339;
use crate::db::new_id;
use crate::error::{ApiError, ApiResult};
use crate::identity::Role;
use crate::launches::{admit, LaunchRequest, Launcher};
use crate::standing::Standing;
use crate::App;
use chrono::{TimeZone, Utc};
use chrono_tz::Tz;
use crucible_engine::history::{History, Record, RecordEntry};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A scheduled time fired this long after it came is still on schedule; later, it is a
/// catch-up (the controller was down, or busy, over it).
const GRACE_MS: i64 = 2 * 60 * 1000;

/// The most scheduled times one catch-up counts; past it the count says "at least".
const MAX_COUNTED: u32 = 10_000;

/// One async lock per standing launch.
#[derive(Default)]
pub struct SeriesLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl SeriesLocks {
    fn of(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.0
            .lock()
            .expect("series locks")
            .entry(id.to_string())
            .or_default()
            .clone()
    }
}

/// What made a standing launch fire.
#[derive(Clone, Copy, Debug)]
pub enum Trigger {
    /// A scheduled time, fired on time.
    Schedule { at: i64 },
    /// One firing for `missed` scheduled times that passed unfired, the latest `at`.
    CatchUp { at: i64, missed: u32 },
    /// An editor's `POST /v1/standing/{id}/fire`.
    Manual,
}

impl Trigger {
    fn kind(self) -> &'static str {
        match self {
            Trigger::Schedule { .. } => "schedule",
            Trigger::CatchUp { .. } => "catch-up",
            Trigger::Manual => "manual",
        }
    }

    fn scheduled_for(self) -> Option<i64> {
        match self {
            Trigger::Schedule { at } | Trigger::CatchUp { at, .. } => Some(at),
            Trigger::Manual => None,
        }
    }

    fn missed(self) -> u32 {
        match self {
            Trigger::Schedule { .. } => 1,
            Trigger::CatchUp { missed, .. } => missed,
            Trigger::Manual => 0,
        }
    }
}

/// A parsed schedule: a five-field cron expression in an IANA time zone.
#[derive(Debug)]
pub struct Schedule {
    cron: croner::Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses a schedule as a standing launch stores it; the refusal says what is wrong.
    pub fn parse(cron: &str, timezone: &str) -> Result<Schedule, String> {
        use croner::parser::{CronParser, Seconds, Year};
        let parsed = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| {
                format!(
                    "the schedule `{}` is not a five-field cron expression (minute hour \
                     day-of-month month day-of-week): {e}",
                    cron.escape_debug()
                )
            })?;
        let tz: Tz = timezone.parse().map_err(|_| {
            format!(
                "the time zone `{}` is not an IANA time zone name such as `Europe/Paris` or \
                 `UTC`",
                timezone.escape_debug()
            )
        })?;
        Ok(Schedule { cron: parsed, tz })
    }

    /// The first scheduled time strictly after `after_ms`, in Unix millis.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = Utc
            .timestamp_millis_opt(after_ms)
            .single()?
            .with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&after, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The scheduled times in `(after_ms, until_ms]`: how many (at most [`MAX_COUNTED`]) and
    /// the latest.
    fn due(&self, after_ms: i64, until_ms: i64) -> Option<(u32, i64)> {
        let first = self.next_after(after_ms).filter(|t| *t <= until_ms)?;
        let mut count = 1;
        let mut latest = first;
        while count < MAX_COUNTED {
            match self.next_after(latest) {
                Some(t) if t <= until_ms => {
                    latest = t;
                    count += 1;
                }
                _ => return Some((count, latest)),
            }
        }
        // Too many to count one by one: the latest is the last one before `until`.
        let latest = self
            .cron
            .find_previous_occurrence(
                &Utc.timestamp_millis_opt(until_ms)
                    .single()?
                    .with_timezone(&self.tz),
                true,
            )
            .map_or(latest, |t| t.timestamp_millis());
        Some((count, latest))
    }

    /// The calendar day of `ms` in the schedule's time zone.
    fn day(&self, ms: i64) -> Option<chrono::NaiveDate> {
        Some(
            Utc.timestamp_millis_opt(ms)
                .single()?
                .with_timezone(&self.tz)
                .date_naive(),
        )
    }
}

/// In service: a scheduler pass every [`crate::clock::TICK`], for as long as the controller runs.
pub async fn tick_loop(app: App) {
    let mut tick = tokio::time::interval(crate::clock::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = pass(&app).await {
            eprintln!("controller: scheduler pass: {e:#}");
        }
    }
}

/// One scheduler pass at the clock's time: fires each standing launch that has scheduled times
/// due (once, whatever their number); answers the firings it recorded.
pub async fn pass(app: &App) -> ApiResult<Vec<Value>> {
    let now = app.clock.now_ms();
    let due = crate::standing::scheduled(app).await?;
    let mut fired = Vec::new();
    for s in due {
        let Some(schedule) = s.schedule()? else {
            continue;
        };
        let Some((missed, at)) = schedule.due(s.cursor_at, now) else {
            continue;
        };
        let claimed = sqlx::query(
            "UPDATE standing SET cursor_at = $1 WHERE id = $2 AND cursor_at = $3 \
             AND deleted_at IS NULL",
        )
        .bind(now)
        .bind(&s.id)
        .bind(s.cursor_at)
        .execute(&app.db)
        .await?
        .rows_affected()
            == 1;
        if !claimed || s.paused {
            continue;
        }
        let trigger = if missed == 1 && now - at <= GRACE_MS {
            Trigger::Schedule { at }
        } else {
            Trigger::CatchUp { at, missed }
        };
        fired.push(fire(app, &s, trigger, None).await?);
    }
    Ok(fired)
}

/// Fires a standing launch: decides, launches or not, and records the firing; answers it.
/// `by` is the editor who fired it by hand; a scheduled firing acts for the standing launch's
/// owner.
pub async fn fire(app: &App, s: &Standing, trigger: Trigger, by: Option<&str>) -> ApiResult<Value> {
    let lock = app.series_locks.of(&s.id);
    let _held = lock.lock().await;
    let at = app.clock.now_ms();
    let decided = decide(app, s, at, by).await;
    let (result, run, reason) = match decided {
        Ok(Decision::Launched(run)) => ("launched", Some(run), None),
        Ok(Decision::Skipped(why)) => ("skipped", None, Some(why)),
        Err(ApiError::Internal(e)) => {
            // Recorded like any refusal, so the firing is not lost; the detail is the
            // operator's.
            eprintln!("controller: firing standing launch {}: {e:#}", s.id);
            ("refused", None, Some("internal error".to_string()))
        }
        Err(refused) => ("refused", None, Some(refused.to_string())),
    };
    let id = new_id();
    sqlx::query(
        "INSERT INTO firings (id, standing_id, at, trigger_kind, scheduled_for, missed, result, \
         run_id, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&id)
    .bind(&s.id)
    .bind(at)
    .bind(trigger.kind())
    .bind(trigger.scheduled_for())
    .bind(i64::from(trigger.missed()))
    .bind(result)
    .bind(&run)
    .bind(&reason)
    .execute(&app.db)
    .await?;
    Ok(firing_json(
        &id,
        &s.id,
        at,
        trigger.kind(),
        trigger.scheduled_for(),
        i64::from(trigger.missed()),
        result,
        run.as_deref(),
        reason.as_deref(),
    ))
}

/// A firing as the API shows it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn firing_json(
    id: &str,
    standing: &str,
    at: i64,
    trigger: &str,
    scheduled_for: Option<i64>,
    missed: i64,
    result: &str,
    run: Option<&str>,
    reason: Option<&str>,
) -> Value {
    json!({
        "id": id,
        "standing": standing,
        "at": rfc3339(at),
        "trigger": trigger,
        "scheduled_for": scheduled_for.map(rfc3339),
        "missed": missed,
        "result": result,
        "run": run,
        "reason": reason,
    })
}

enum Decision {
    Launched(String),
    Skipped(String),
}

async fn decide(app: &App, s: &Standing, at: i64, by: Option<&str>) -> ApiResult<Decision> {
    // No overlapping runs of one series.
    let running: Option<String> = sqlx::query_scalar(
        "SELECT id FROM runs WHERE series_id = $1 AND state = 'running' ORDER BY id LIMIT 1",
    )
    .bind(&s.id)
    .fetch_optional(&app.db)
    .await?;
    if let Some(run) = running {
        return Ok(Decision::Skipped(format!(
            "run {run} of this series is still running"
        )));
    }
    let mut req: LaunchRequest = s.request.clone();
    // The daily spend cap, on top of the run's own ceiling.
    if let Some(cap) = s.daily_max_cost {
        let spent = spent_on_day(app, s, at).await?;
        let left = cap - spent;
        if left <= 1e-9 {
            return Ok(Decision::Skipped(format!(
                "the series spent ${spent:.4} today ({}), its daily cap is ${cap:.4}",
                s.timezone
            )));
        }
        req.max_cost = Some(req.max_cost.map_or(left, |c| c.min(left)));
    }
    let subject = match by {
        Some(editor) => editor.to_string(),
        None => {
            // A scheduled firing acts for its owner, who must still be an editor of the team.
            let role: Option<String> = sqlx::query_scalar(
                "SELECT role FROM memberships WHERE team_id = $1 AND user_id = $2",
            )
            .bind(&s.team_id)
            .bind(&s.subject_id)
            .fetch_optional(&app.db)
            .await?;
            let editor = role
                .as_deref()
                .and_then(Role::parse)
                .is_some_and(|r| r >= Role::Editor);
            if !editor {
                return Err(ApiError::Refused(format!(
                    "the standing launch's owner `{}` no longer has the editor role in team `{}`",
                    s.owner, s.team
                )));
            }
            s.subject_id.clone()
        }
    };
    let history = series_history(app, &s.id).await?;
    let launcher = Launcher {
        subject: &subject,
        team_id: &s.team_id,
        team: &s.team,
        series: Some(&s.id),
        source: None,
    };
    let launched = admit(app, &launcher, &req, history).await?;
    let run = launched["id"].as_str().unwrap_or_default().to_string();
    Ok(Decision::Launched(run))
}

/// What the series' runs launched on the calendar day of `at` (the schedule's time zone; UTC
/// for a standing launch fired by hand only) spent, in USD, as their session logs say.
async fn spent_on_day(app: &App, s: &Standing, at: i64) -> ApiResult<f64> {
    let schedule = Schedule::parse(s.cron.as_deref().unwrap_or("0 0 * * *"), &s.timezone)
        .map_err(|e| anyhow::anyhow!("the stored schedule: {e}"))?;
    let today = schedule.day(at);
    // Two days back in millis covers every time zone's calendar day.
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT at, run_id FROM firings WHERE standing_id = $1 AND result = 'launched' \
         AND at > $2 AND run_id IS NOT NULL",
    )
    .bind(&s.id)
    .bind(at - 2 * 86_400_000)
    .fetch_all(&app.db)
    .await?;
    Ok(rows
        .iter()
        .filter(|(when, _)| schedule.day(*when) == today)
        .map(|(_, run)| crate::runs::spent_usd(app, run))
        .sum())
}

/// RFC-0002:C-RUN-HISTORY: the series' most recent terminal runs by end time, at most 30, as
/// its next run is handed them. A run is terminal once this controller recorded that it ended,
/// whatever its engine wrote: one that never wrote a shutdown has a null outcome and verdict.
/// A running run is never in it.
pub async fn series_history(app: &App, series: &str) -> ApiResult<History> {
    let records = series_records(app, series).await?;
    History::of_records(records, app.config.engine.history_max_bytes)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("the series history: {e}")))
}

/// The records of [`series_history`], oldest first by end time.
pub async fn series_records(app: &App, series: &str) -> ApiResult<Vec<Record>> {
    let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT id, digest, created_at, ended_at FROM runs WHERE series_id = $1 \
         AND state <> 'running' AND ended_at IS NOT NULL ORDER BY ended_at DESC, id DESC LIMIT $2",
    )
    .bind(series)
    .bind(i64::from(crucible_plan::ceilings::MAX_HISTORY))
    .fetch_all(&app.db)
    .await?;
    let mut records = Vec::with_capacity(rows.len());
    for (id, digest, created_at, ended_at) in rows {
        let link = app.run_link(&id);
        let engine = crate::runs::engine_dir(app, &id)
            .and_then(|dir| crucible_engine::series::record(&dir, link.clone()));
        let mut record = engine.unwrap_or_else(|| Record {
            // The run never reached its engine (refused at dispatch): it ran nothing and
            // recorded nothing but that it ended.
            run: id.clone(),
            started_at: rfc3339(created_at),
            ended_at: rfc3339(ended_at),
            outcome: None,
            verdict: None,
            revision: digest.clone(),
            link: link.clone(),
            entry: RecordEntry {
                task: String::new(),
                status: None,
                output: None,
            },
        });
        // The run as this controller names it, ended when this controller recorded it ended.
        record.run = id;
        record.ended_at = rfc3339(ended_at);
        record.revision = digest;
        record.link = link;
        records.push(record);
    }
    records.reverse();
    Ok(records)
}

/// The times a schedule fires next after `after_ms`, for display.
pub fn upcoming(schedule: &Schedule, after_ms: i64, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let mut t = after_ms;
    while out.len() < n {
        match schedule.next_after(t) {
            Some(next) => {
                out.push(rfc3339(next));
                t = next;
            }
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: &str) -> i64 {
        crate::clock::parse_rfc3339(t).unwrap()
    }

    // Issue 13: five-field cron in a time zone; seconds and years refused; an unknown zone
    // refused by name.
    #[test]
    fn a_schedule_is_five_fields_in_an_iana_zone() {
        let s = Schedule::parse("0 9 * * *", "Europe/Paris").unwrap();
        // 09:00 in Paris in December is 08:00 UTC.
        assert_eq!(
            s.next_after(ms("2026-12-01T07:00:00Z")),
            Some(ms("2026-12-01T08:00:00Z"))
        );
        assert!(Schedule::parse("@daily", "UTC").is_ok());
        assert!(Schedule::parse("0 0 9 * * *", "UTC")
            .unwrap_err()
            .contains("five-field"));
        assert!(Schedule::parse("0 9 * * *", "Mars/Olympus")
            .unwrap_err()
            .contains("Mars/Olympus"));
    }

    // Issue 13: the times due after a cursor are counted, the latest named: one catch-up
    // stands for all of them.
    #[test]
    fn due_counts_the_missed_times_and_names_the_latest() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let from = ms("2026-12-01T00:00:00Z");
        assert_eq!(s.due(from, ms("2026-12-01T00:59:00Z")), None);
        assert_eq!(
            s.due(from, ms("2026-12-01T05:30:00Z")),
            Some((5, ms("2026-12-01T05:00:00Z")))
        );
        let every_minute = Schedule::parse("* * * * *", "UTC").unwrap();
        let (n, latest) = every_minute.due(from, from + 30 * 86_400_000).unwrap();
        assert_eq!(n, MAX_COUNTED);
        assert_eq!(latest, from + 30 * 86_400_000);
    }
}
