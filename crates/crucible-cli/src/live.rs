//! What `plan run` shows while the run goes (issue 19). On a pipe or a file: plain lines, each
//! starting with its RFC 3339 time. On a terminal: settled rows scroll above, their status
//! coloured unless `NO_COLOR` is set; below, one line per running task, a revise loop's member
//! with its current round and a mapped task once with its instances, then a footer with the
//! done/total count and spend and time against the ceilings. Every name is a task's text, so
//! each is escaped. While a runbook gate asks at the terminal (`crate::gate`), nothing is drawn.

use crate::inspect::{split_part, Part, Parts};
use crate::run::row_line;
use crucible_engine::Observer;
use crucible_plan::terminal::escape;
use crucible_plan::wire::TaskResult;
use crucible_plan::Status;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Whether the terminal view colours: `NO_COLOR` set to anything non-empty turns it off
/// (no-color.org).
pub fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Plain, stable lines for a pipe or a file, each with its time.
pub struct Plain;

impl Plain {
    fn line(text: &str) {
        println!("{} {text}", crucible_engine::now_ts());
    }
}

impl Observer for Plain {
    fn run_started(&mut self, run_id: &str, _: &Path) {
        Plain::line(&format!("run {}", escape(run_id)));
    }
    fn task_started(&mut self, task: &str) {
        Plain::line(&format!("started {}", escape(task)));
    }
    fn task_settled(&mut self, row: &TaskResult) {
        Plain::line(&format!(
            "settled {} {} {:.2}s",
            escape(&row.task),
            row.status,
            row.secs
        ));
    }
}

/// One line of the in-flight list: a task, or every running instance or round of one.
struct Running {
    task: String,
    since: Instant,
    /// Its attempts in flight now (a mapped task's instances).
    count: u32,
}

/// The terminal view.
pub struct Live {
    running: Vec<Running>,
    /// The instances and rounds settled so far, by task.
    parts: Parts,
    done: usize,
    total: usize,
    colour: bool,
    drawn: usize,
    max_cost: Option<f64>,
    max_secs: Option<u64>,
    /// Spend and elapsed time as the engine last reported them (a resumed run's elapsed time
    /// includes the time before the resumption).
    spent: f64,
    elapsed: Duration,
    /// Where the run keeps its rows' logs, once it started.
    run_dir: PathBuf,
    /// Settled lines not yet shown: a runbook gate was asking at the terminal.
    pending: Vec<String>,
    /// How many gates had asked when the frame was last drawn.
    asked: u64,
}

/// The task an attempt or row belongs to: `name` for `name[key]` and `name[round-N]`.
fn base(task: &str) -> &str {
    split_part(task).map_or(task, |(b, _, _)| b)
}

impl Live {
    pub fn new(max_cost: Option<f64>, max_secs: Option<u64>, total: usize, colour: bool) -> Live {
        Live {
            running: Vec::new(),
            parts: Parts::default(),
            done: 0,
            total,
            colour,
            drawn: 0,
            max_cost,
            max_secs,
            spent: 0.0,
            elapsed: Duration::ZERO,
            run_dir: PathBuf::new(),
            pending: Vec::new(),
            asked: 0,
        }
    }

    /// Shows `line` (a settled row) above a fresh frame, unless a gate is asking at the terminal
    /// (`crate::gate`): then the line waits, and nothing is drawn over the exchange. The frame
    /// left above an exchange stays; the next one is drawn below it.
    fn show(&mut self, line: Option<String>) {
        self.pending.extend(line);
        let Ok(_held) = crate::decide::TERMINAL.try_lock() else {
            return;
        };
        let asked = crate::decide::ASKED.load(std::sync::atomic::Ordering::SeqCst);
        if asked != self.asked {
            self.asked = asked;
            self.drawn = 0;
        }
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        for line in self.pending.drain(..) {
            let _ = writeln!(out, "{line}");
        }
        self.draw(&mut out);
    }

    fn clear(&mut self, out: &mut impl Write) {
        if self.drawn > 0 {
            let _ = write!(out, "\x1b[{}A\x1b[J", self.drawn);
        }
        self.drawn = 0;
    }

    /// The in-flight lines and the footer, as drawn below the settled rows.
    fn frame(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .running
            .iter()
            .map(|r| {
                let part = match (self.parts.get(&r.task), r.count) {
                    (Some((Part::Round, n)), _) => format!(" round {}", n + 1),
                    (Some((Part::Instance, n)), c) => {
                        format!(" {c} instance(s) running, {n} settled")
                    }
                    (None, 1) => String::new(),
                    (None, c) => format!(" {c} instance(s) running"),
                };
                format!(
                    "  ▶ {}{part}  {:.1}s",
                    escape(&r.task),
                    r.since.elapsed().as_secs_f64()
                )
            })
            .collect();
        lines.push(format!(
            "  {}/{} done · spent ${:.2} of ${:.2} · {:.1}s of {}",
            self.done,
            self.total,
            self.spent,
            self.max_cost.unwrap_or(0.0),
            self.elapsed.as_secs_f64(),
            self.max_secs
                .map_or("-".to_string(), crucible_plan::duration::format)
        ));
        lines
    }

    fn draw(&mut self, out: &mut impl Write) {
        // Lines are cut to the terminal's width: a wrapped line would break the redraw.
        let width = terminal_width().saturating_sub(1).max(20);
        let lines = self.frame();
        for line in &lines {
            let _ = writeln!(out, "{}", cut(line, width));
        }
        self.drawn = lines.len();
        let _ = out.flush();
    }

    /// A settled row's line with its status token coloured (green passed, red failed, yellow
    /// otherwise) when colour is on.
    fn settled_line(&self, row: &TaskResult) -> String {
        let line = row_line(&row.task, Some(row), &Parts::default(), &self.run_dir);
        if !self.colour {
            return line;
        }
        let code = match row.status {
            Status::Pass => "32",
            Status::Fail | Status::Transport | Status::Truncated => "31",
            Status::Skipped | Status::NotTaken | Status::Blocked => "33",
        };
        // The line is `<name> <status> …`: the token right after the (escaped) name.
        let name = escape(&row.task);
        match line
            .strip_prefix(name.as_ref())
            .and_then(|rest| rest.strip_prefix(&format!(" {}", row.status)))
        {
            Some(rest) => format!("{name} \x1b[{code}m{}\x1b[0m{rest}", row.status),
            None => line,
        }
    }
}

fn cut(line: &str, width: usize) -> String {
    line.chars().take(width).collect()
}

/// The terminal's column count, or 80 when it cannot be read.
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize struct we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; stdout is a terminal whenever this view is in use.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}

impl Observer for Live {
    fn run_started(&mut self, run_id: &str, run_dir: &Path) {
        self.run_dir = run_dir.to_path_buf();
        println!("run {}", escape(run_id));
    }
    fn task_started(&mut self, task: &str) {
        // A loop's rounds and a map's instances share their task's one line.
        let task = base(task);
        match self.running.iter_mut().find(|r| r.task == task) {
            Some(r) => r.count += 1,
            None => self.running.push(Running {
                task: task.to_string(),
                since: Instant::now(),
                count: 1,
            }),
        }
        self.show(None);
    }
    fn task_settled(&mut self, row: &TaskResult) {
        // Spend comes from the engine's tick: rolled-up rows (a fan-out node, a loop's final
        // rows) repeat spend their instances and rounds already counted. A rolled-up row ends
        // nothing in flight; an attempt's row ends one of its task's.
        let task = base(&row.task);
        if let Some(at) = self.running.iter().position(|r| r.task == task) {
            self.running[at].count -= 1;
            if self.running[at].count == 0 {
                self.running.remove(at);
            }
        }
        match split_part(&row.task) {
            Some(_) => self.parts.add(&row.task),
            None => self.done += 1,
        }
        let line = self.settled_line(row);
        self.show(Some(line));
    }
    fn tick_interval(&self) -> Option<Duration> {
        Some(Duration::from_millis(250))
    }
    fn tick(&mut self, spent: f64, elapsed: Duration) {
        self.spent = spent;
        self.elapsed = elapsed;
        self.show(None);
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        for line in self.pending.drain(..) {
            let _ = writeln!(out, "{line}");
        }
    }
}
