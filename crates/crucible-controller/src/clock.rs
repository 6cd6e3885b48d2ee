//! The scheduler's clock (issue 13). In service it is the system clock, and a background loop
//! runs a scheduler pass every [`TICK`]. For tests only, `crucible serve --test-clock TIME`
//! (hidden) starts a controller whose clock stands still at `TIME` and runs no background loop:
//! a platform administrator moves it with `POST /v1/clock`, which runs one scheduler pass
//! synchronously and answers what it fired, so a test of schedules never sleeps on wall time.
//! Only scheduling decisions read this clock (firing times, the schedule cursor, the day of the
//! spend cap); what happened is stamped by the system clock, as every other record is.

use std::sync::Mutex;
use std::time::Duration;

/// How often the scheduler looks for due firings in service.
pub const TICK: Duration = Duration::from_secs(10);

pub struct Clock {
    /// The test clock's time (Unix millis), or `None` in service.
    test: Option<Mutex<i64>>,
}

impl Clock {
    pub fn system() -> Clock {
        Clock { test: None }
    }

    /// A clock standing at `start_ms` until it is set.
    pub fn test(start_ms: i64) -> Clock {
        Clock {
            test: Some(Mutex::new(start_ms)),
        }
    }

    pub fn is_test(&self) -> bool {
        self.test.is_some()
    }

    pub fn now_ms(&self) -> i64 {
        match &self.test {
            Some(t) => *t.lock().expect("test clock"),
            None => crate::db::now_ms(),
        }
    }

    /// Sets the test clock; false on the system clock, which cannot be set.
    pub fn set(&self, ms: i64) -> bool {
        match &self.test {
            Some(t) => {
                *t.lock().expect("test clock") = ms;
                true
            }
            None => false,
        }
    }
}

/// Parses an RFC 3339 time (`2026-12-01T09:00:00Z`) into Unix millis.
pub fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let t = humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("`{}` is not an RFC 3339 time: {e}", text.escape_debug()))?;
    let d = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("`{}` is before 1970", text.escape_debug()))?;
    Ok(d.as_millis() as i64)
}

/// Unix millis as RFC 3339 in UTC, to the millisecond.
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
