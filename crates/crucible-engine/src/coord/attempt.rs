//! What a dispatched task does until it reports back to the coordinator: a command, evaluate or
//! agent attempt (its process, grading, repair turns, asks, declared files and git memory), a
//! route a decision model decides, and a report's delivery. Each runs on its own tokio task and
//! touches no coordinator state.

use super::{Agents, Ctx, Report};
use crate::asks;
use crate::decision::{self, DecideError};
use crate::files::StagedSet;
use crate::graph::route;
use crate::proc::{self, Abort, Deadline, Ended};
use crate::report;
use crate::taskio::{self, Graded};
use crucible_agent::decision::AskError;
use crucible_agent::harness::{Harness, HarnessKind, Progress, Session, Turn};
use crucible_agent::spawn::{Mount, Spawn};
use crucible_agent::{PromptParts, TurnSettings};
use crucible_plan::wire::{Repair, SessionAction, SessionTurns};
use crucible_plan::{duration, Stage, Status, Task, TaskKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

fn file_stem(i: usize, name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{i:04}-{safe}")
}

/// How the coordinator reaches a running attempt (its abort), and how the attempt reports what
/// its agent turns have spent so far, as it streams in (its key).
pub(super) struct Control {
    pub abort: watch::Receiver<Abort>,
    pub key: u64,
}

impl Control {
    fn spending(&self, ctx: &Ctx, usd: f64) {
        let _ = ctx.tx.send(super::Msg::Spending(self.key, usd));
    }
}

/// Runs one dispatched task: its attempts (transport failures retry twice), grading, the
/// reserved output fields, typed emits, and its git memory.
pub(super) async fn run(
    ctx: &Ctx,
    i: usize,
    task: &Task,
    set_name: &str,
    inputs: Value,
    sets: Vec<StagedSet>,
    ctl: Control,
) -> Report {
    let abort = &ctl.abort;
    let main = task.stage == Stage::Iteration;
    let began = Instant::now();
    let mut report = Report::empty();
    let stem = file_stem(i, &task.name);
    let inputs_text = serde_json::to_string(&inputs).expect("inputs serialize");
    let inputs_file = ctx.run_dir.join("inputs").join(format!("{stem}.json"));
    if let Err(e) = std::fs::write(&inputs_file, &inputs_text) {
        report.graded = Graded::fail(format!("cannot write the inputs file: {e}"), None);
        return report;
    }
    let mut contract: Vec<(String, String)> = vec![
        ("CRUCIBLE_TASK".into(), task.name.clone()),
        (
            "CRUCIBLE_INPUTS_FILE".into(),
            inputs_file.to_string_lossy().into_owned(),
        ),
    ];
    if inputs_text.len() <= crucible_plan::ceilings::INPUTS_ENV_MAX {
        contract.push(("CRUCIBLE_INPUTS".into(), inputs_text.clone()));
    }
    if let Some(dir) = &ctx.steering_dir {
        contract.push((
            "CRUCIBLE_STEERING_DIR".into(),
            dir.to_string_lossy().into_owned(),
        ));
    }
    let skill_dir = task.skill.as_ref().map(|dir| ctx.pack_dir.join(dir));
    if let Some(dir) = &skill_dir {
        contract.push((
            "CRUCIBLE_SKILL_DIR".into(),
            dir.to_string_lossy().into_owned(),
        ));
    }
    let only_secrets = (ctx.sandboxes.get(&task.name)).map(|n| n.secrets.as_slice());
    let mut env = ctx.task_env.for_task(&contract, only_secrets);
    let agent = if task.kind == TaskKind::Agent {
        let prompt = match crucible_agent::assemble_prompt(&PromptParts {
            goal: ctx.goal.as_deref(),
            task: &task.name,
            prompt: task.prompt.as_deref().unwrap_or_default(),
            inputs: &inputs,
            skill_dir: skill_dir.as_deref(),
            steering: &ctx.steering,
        }) {
            Ok(p) => p,
            Err(e) => {
                report.graded = Graded::fail(e.to_string(), None);
                return report;
            }
        };
        let prompt_file = ctx.run_dir.join("inputs").join(format!("{stem}.prompt.md"));
        let _ = std::fs::write(&prompt_file, &prompt);
        let settings = TurnSettings {
            harness: (ctx.launch_harness.as_ref())
                .or(task.harness.as_ref())
                .or(ctx.default_harness.as_ref())
                .cloned(),
            model: (ctx.launch_model.as_ref())
                .or(task.model.as_ref())
                .or(ctx.default_model.as_ref())
                .cloned(),
            effort: task.effort.clone().or_else(|| ctx.default_effort.clone()),
            tools: task.runbook.as_ref().and_then(|rb| rb.tools()),
        };
        let session = task.session.as_ref().map(|name| Session {
            name: name.clone(),
            id: format!("{}-{name}", ctx.run_id),
        });
        let harness = match &ctx.agents {
            Agents::Command(h) => h.clone(),
            Agents::Local(by_kind) => {
                let name = settings.harness.as_deref().unwrap_or_default();
                let kind = HarnessKind::parse(name).expect("admission parsed it");
                by_kind[&kind].clone()
            }
        };
        env.extend(ctx.agent_env.iter().cloned());
        Some((harness, prompt, prompt_file, settings, session))
    } else {
        None
    };
    let spends = task.can_spend();
    loop {
        report.attempts += 1;
        let mut checkout = None;
        let cwd = if task.isolated {
            let dir = ctx
                .run_dir
                .join("worktrees")
                .join(format!("{stem}-{}", report.attempts));
            let (memory, checkouts) = (ctx.memory.clone(), ctx.checkouts.clone());
            let made = tokio::task::spawn_blocking(move || checkouts.make(&memory, dir))
                .await
                .expect("checkout does not panic");
            match made {
                Ok(c) => checkout.insert(c).dir.clone(),
                Err(e) => {
                    report.graded =
                        Graded::fail(format!("cannot make the isolated worktree: {e}"), None);
                    break;
                }
            }
        } else {
            ctx.ws.clone()
        };
        let prepared = {
            let (files, root, t, sets) =
                (ctx.files.clone(), cwd.clone(), task.clone(), sets.clone());
            tokio::task::spawn_blocking(move || files.prepare(&root, &t, &sets))
                .await
                .expect("staging does not panic")
        };
        let prepared = match prepared {
            Ok(p) => p,
            Err(refused) => {
                report.staging_refused = Some(refused);
                cleanup(ctx, &cwd, checkout.take()).await;
                break;
            }
        };
        let deadline = deadline_of(ctx, task);
        // The conversation this attempt continues, once its turn has one.
        let mut conversation = None;
        // A staged runbook's checkpoints, as its stages recorded them (issue 15).
        let mut stages = Vec::new();
        let transport = match &agent {
            None => {
                let spawn = Spawn::shell(
                    task.run.as_deref().expect("admission requires run"),
                    &cwd,
                    env.clone(),
                );
                let jail = ctx.jail(task, &spawn);
                match proc::run(
                    &spawn,
                    jail.as_ref(),
                    deadline,
                    abort.clone(),
                    None,
                    &ctx.groups,
                )
                .await
                {
                    Err(e) => Some(TurnError::Spawn(e)),
                    Ok(f) => {
                        keep_log(ctx, &stem, (None, None), &f, &mut report);
                        report.graded = graded_turn(ctx, task, f, &mut report);
                        None
                    }
                }
            }
            Some((harness, prompt, prompt_file, settings, session)) => {
                let resume = session.as_ref().and_then(|s| {
                    let sessions = ctx.sessions.lock().expect("sessions");
                    sessions.get(&s.name).map(|(id, _)| id.clone())
                });
                let turn = Turn {
                    task: &task.name,
                    prompt,
                    prompt_file,
                    cwd: &cwd,
                    env: &env,
                    settings,
                    session: session.as_ref(),
                    resume: resume.as_deref(),
                    repair: None,
                };
                let ran = match task
                    .runbook
                    .as_ref()
                    .filter(|rb| !rb.checkpoints.is_empty())
                {
                    Some(rb) => {
                        let at = (task, stem.as_str(), set_name);
                        stage_turns(ctx, at, rb, harness.as_ref(), &turn, deadline, &ctl)
                            .run(&mut report, &mut stages)
                            .await
                    }
                    None => {
                        agent_turn(
                            ctx,
                            (task, &stem, (None, None)),
                            harness.as_ref(),
                            &turn,
                            deadline,
                            &ctl,
                            &mut report,
                        )
                        .await
                    }
                };
                match ran {
                    Err(e) => Some(e),
                    Ok(id) => {
                        conversation = id;
                        None
                    }
                }
            }
        };
        if let Some(e) = transport {
            let note = match e {
                TurnError::Spawn(e) => {
                    report.transport = Some(e.to_string());
                    format!("could not start the attempt: {e}")
                }
                TurnError::Transport(cause) => {
                    report.transport = Some(cause.clone());
                    cause
                }
            };
            report.graded = Graded {
                status: Status::Transport,
                note: Some(note),
                output: None,
            };
            let retry = report.attempts <= crucible_plan::ceilings::TRANSPORT_RETRIES
                && *abort.borrow() == Abort::None
                && !(spends && ctx.spend_blocked.load(Ordering::SeqCst));
            cleanup(ctx, &cwd, checkout.take()).await;
            if retry {
                continue;
            }
            break;
        }
        report.transport = None;
        // Repair turns (agent only): a passing turn whose result misses a declared field or file,
        // or breaks its type or schema, resumes its conversation with the masked notes and is
        // checked again, within the attempt's deadline. Not a retry: `attempts` is unchanged.
        let mut round = 0;
        while let Some((harness, _, _, settings, session)) = &agent {
            if report.graded.status != Status::Pass || round == task.repair {
                break;
            }
            let notes = contract_notes(task, &cwd, report.graded.output.as_ref()).await;
            if notes.is_empty() {
                break;
            }
            round += 1;
            let spent = report.cost_usd;
            let prompt = crucible_agent::repair_prompt(&task.name, &notes, round, task.repair);
            let file = ctx
                .run_dir
                .join("inputs")
                .join(format!("{stem}.repair-{round}.prompt.md"));
            let _ = std::fs::write(&file, &prompt);
            let turn = Turn {
                task: &task.name,
                prompt: &prompt,
                prompt_file: &file,
                cwd: &cwd,
                env: &env,
                settings,
                session: session.as_ref(),
                resume: conversation.as_deref(),
                repair: Some((round, task.repair)),
            };
            let ran = agent_turn(
                ctx,
                (task, &stem, (Some(round), None)),
                harness.as_ref(),
                &turn,
                deadline,
                &ctl,
                &mut report,
            )
            .await;
            match ran {
                Err(TurnError::Spawn(e)) => {
                    report.graded =
                        Graded::fail(format!("repair turn {round} could not start: {e}"), None)
                }
                Err(TurnError::Transport(cause)) => {
                    report.graded = Graded::fail(
                        format!("repair turn {round} failed in transport: {cause}"),
                        None,
                    )
                }
                Ok(id) => conversation = id.or(conversation),
            }
            report.repairs.push(Repair {
                label: format!("{} repair {round}/{}", task.name, task.repair),
                round,
                of: task.repair,
                cost_usd: report.cost_usd - spent,
                notes,
            });
        }
        if report.graded.status == Status::Pass {
            if let Some(out) = &report.graded.output {
                if let Err(note) = taskio::check_emits(task, out) {
                    report.graded = Graded::fail(note, report.graded.output.clone());
                }
            }
        }
        // Issue 15: the checkpoints the runbook's stages recorded (each hashed, and its gate
        // decided, when its stage ended), and its success predicates as the last turn left its
        // files; a claimed success with a failing predicate is a failure naming it.
        if let Some(rb) = &task.runbook {
            let (r, root) = (rb.clone(), cwd.clone());
            let stages = std::mem::take(&mut stages);
            let ledger =
                tokio::task::spawn_blocking(move || crate::runbook::ledger(&r, &root, stages))
                    .await
                    .expect("hashing does not panic");
            if report.graded.status == Status::Pass {
                if let Some(note) = crate::runbook::failed_predicate(&ledger) {
                    report.graded = Graded::fail(note, report.graded.output.clone());
                }
            }
            report.runbook = Some(ledger);
            // The attempt is over: a later one (a revise round) starts from the first stage,
            // also after a crash.
            if (ctx.stages.lock().expect("stages"))
                .remove(set_name)
                .is_some()
            {
                let closed = crucible_plan::wire::RunbookStagesClosed {
                    task: task.name.clone(),
                    set: set_name.to_string(),
                };
                let _ = ctx.tx.send(super::Msg::StagesClosed(closed));
            }
        }
        // RFC-0002:C-ASKS: only a passing attempt emits; a failing one's file goes with its
        // discarded changes.
        if report.graded.status == Status::Pass {
            let taken = asks::take(&cwd, ctx.asks.limit())
                .and_then(|a| a.map_or(Ok(Vec::new()), |a| ctx.asks.charge(a.len()).map(|()| a)));
            match taken {
                Ok(emitted) => report.asks = emitted,
                Err(note) => report.graded = Graded::fail(note, report.graded.output.clone()),
            }
        }
        if !report.stopped {
            // Before the root's changes are committed or discarded (RFC-0002:C-SETTLED-JOIN).
            let (files, root, t) = (ctx.files.clone(), cwd.clone(), task.clone());
            let set_name = set_name.to_string();
            let mut graded = std::mem::replace(&mut report.graded, Graded::fail("", None));
            let (published, graded) = tokio::task::spawn_blocking(move || {
                let published = files.capture(&root, &t, &set_name, &prepared, &mut graded);
                if prepared.staged() {
                    // Unstaged before the commit, which must not see them either.
                    let _ = crate::files::unstage(&root);
                }
                (published, graded)
            })
            .await
            .expect("capture does not panic");
            report.files = published;
            report.graded = graded;
        }
        declared_completion(task, main, &mut report);
        if !task.isolated && !report.stopped && report.graded.status == Status::Pass {
            let (memory, name) = (ctx.memory.clone(), task.name.clone());
            let committed = tokio::task::spawn_blocking(move || memory.commit_task(&name))
                .await
                .expect("commit does not panic");
            if let Err(e) = committed {
                report.fault = Some(format!(
                    "cannot commit task {}'s changes to the git memory: {e}",
                    task.name
                ));
                report.completion = None;
            }
        }
        // A passing shared task's changes are its commit; everything else is thrown away.
        if task.isolated
            || report.graded.status != Status::Pass
            || report.stopped
            || report.fault.is_some()
        {
            cleanup(ctx, &cwd, checkout.take()).await;
        }
        break;
    }
    report.secs = began.elapsed().as_secs_f64();
    report
}

/// A report (RFC-0002:C-REPORTS): `context` is what `Coord::report_context` built when it was
/// dispatched; rendering and delivery happen off the runtime, under the delivery's own timeout.
pub(super) async fn deliver_report(ctx: &Ctx, task: &Task, context: Value) -> Report {
    let began = Instant::now();
    let (t, config) = (task.clone(), ctx.reports.clone());
    let delivered = tokio::task::spawn_blocking(move || report::deliver(&t, &context, &config))
        .await
        .expect("delivery does not panic");
    let destination = task.report.as_ref().map_or("", |r| r.destination.as_str());
    let (status, note, output) = report::settled(destination, &delivered);
    let mut out = Report::empty();
    out.attempts = 1;
    out.graded = Graded {
        status,
        note,
        output: Some(output),
    };
    out.secs = began.elapsed().as_secs_f64();
    out
}

/// The deadline of an attempt of `task` starting now: its own limit, or the run's ceiling if
/// that falls first.
fn deadline_of(ctx: &Ctx, task: &Task) -> Deadline {
    let own = task
        .timeout_secs
        .map(|s| Instant::now() + Duration::from_secs(s))
        .filter(|at| *at < ctx.run_deadline);
    Deadline {
        at: own.unwrap_or(ctx.run_deadline),
        own_limit: own.is_some(),
    }
}

/// A route a decision model decides (RFC-0001 notes §5): its state (the inputs its join gives
/// it, and under `files` the declared JSON files it names, by dependency and path) is asked over
/// System One; the answer is checked against the questions and becomes the route's output.
/// Unreachable, 5xx and 429 are transport failures, retried like any attempt's.
pub(super) async fn decide_by_model(
    ctx: &Ctx,
    task: &Task,
    inputs: Value,
    sets: &[StagedSet],
    options: &route::Options,
    mut abort: watch::Receiver<Abort>,
) -> Report {
    let began = Instant::now();
    let mut report = Report::empty();
    let spec = task.route.as_ref().expect("a route task has a route");
    let binding = ctx
        .decision
        .clone()
        .expect("admission requires a decision binding");
    let state = match route_state(task, inputs, sets) {
        Ok(state) => state,
        Err(note) => {
            report.graded = Graded::fail(note, None);
            return report;
        }
    };
    let body = Arc::new(route::request_body(&binding.model, spec, state, options));
    let deadline = deadline_of(ctx, task);
    loop {
        report.attempts += 1;
        let timeout = deadline.at.saturating_duration_since(Instant::now());
        let (b, req, price) = (binding.clone(), body.clone(), ctx.decision_price);
        let call = tokio::task::spawn_blocking(move || {
            crucible_agent::decision::ask(&b, &req, timeout, &price)
        });
        let answer = tokio::select! {
            answer = call => answer.expect("the call does not panic"),
            _ = tokio::time::sleep_until(deadline.at) => {
                let ended = if deadline.own_limit { Ended::TimedOut } else { Ended::WallClock };
                report.graded = cut_short(ctx, task, ended, &mut report);
                break;
            }
            why = proc::wait_abort(&mut abort) => {
                report.graded = cut_short(ctx, task, proc::aborted(why), &mut report);
                break;
            }
        };
        report.graded = match answer {
            Ok(response) => {
                // An answered call was spent, whether or not its answer holds.
                report.cost_usd += response.cost_usd;
                match route::from_model(&task.name, spec, &response.body, options) {
                    Ok(answers) => Graded {
                        status: Status::Pass,
                        note: None,
                        output: Some(route::output(answers)),
                    },
                    Err(e) => Graded::fail(e.note(), None),
                }
            }
            Err(AskError::Failed(note)) => Graded::fail(note, None),
            Err(AskError::Transport(cause)) => {
                let retry = report.attempts <= crucible_plan::ceilings::TRANSPORT_RETRIES
                    && *abort.borrow() == Abort::None
                    && !ctx.spend_blocked.load(Ordering::SeqCst);
                if retry {
                    continue;
                }
                report.transport = Some(cause.clone());
                Graded {
                    status: Status::Transport,
                    note: Some(cause),
                    output: None,
                }
            }
        };
        break;
    }
    report.secs = began.elapsed().as_secs_f64();
    report
}

/// A route a person decides (RFC-0002:C-HUMAN-DECISION): opens `req` with the run's decider and
/// waits for its answer, spending nothing ([`await_decision`]). The answer becomes the route's
/// output; a request still open at its expiry (counted from its first open) records every
/// question `uncertain` and passes. The wait is bounded by the wall-clock ceiling and the
/// operator's stop (which withdraws the request).
pub(super) async fn decide_by_person(
    ctx: &Ctx,
    task: &Task,
    req: decision::Request,
    offered: BTreeMap<String, Vec<String>>,
    mut abort: watch::Receiver<Abort>,
) -> Report {
    let began = Instant::now();
    let mut report = Report::empty();
    report.attempts = 1;
    let spec = task.route.as_ref().expect("a route task has a route");
    let until = (ctx.run_deadline, false);
    let decided = match await_decision(ctx, req, until, &mut abort, &mut report.attempts).await {
        Ok(decided) => decided,
        Err(Unsettled::Cut(cut)) => {
            report.graded = cut_short(ctx, task, cut, &mut report);
            report.secs = began.elapsed().as_secs_f64();
            return report;
        }
        Err(Unsettled::Transport(cause)) => {
            report.transport = Some(cause.clone());
            report.graded = Graded {
                status: Status::Transport,
                note: Some(cause),
                output: None,
            };
            report.secs = began.elapsed().as_secs_f64();
            return report;
        }
    };
    let decided = decided.map(|d| match d {
        Decided::Answered(a) => route::HumanDecision::Answered {
            principal: a.principal,
            time: a.time,
            digest: a.digest,
            note: a.note,
            answers: a.answers,
        },
        Decided::Expired(digest) => route::HumanDecision::Expired {
            time: decision::rfc3339(SystemTime::now()),
            digest,
        },
    });
    report.graded = match decided
        .and_then(|d| route::human_output(&task.name, spec, &d, &offered).map_err(|e| e.note()))
    {
        Ok(output) => Graded {
            status: Status::Pass,
            note: None,
            output: Some(output),
        },
        Err(note) => Graded::fail(note, None),
    };
    report.secs = began.elapsed().as_secs_f64();
    report
}

/// What a person's decision came to.
enum Decided {
    /// An answer held to the request's rules ([`decision::check_answer`]).
    Answered(decision::Answer),
    /// The request expired unanswered, over the evidence of this digest.
    Expired(String),
}

/// Why a wait for a decision ended without one.
enum Unsettled {
    /// The deadline or the operator's stop fell first.
    Cut(Ended),
    /// The one answering could not be reached, retries spent.
    Transport(String),
}

/// Opens `req` with the run's decider and waits for its answer (or its expiry, counted from
/// its first open), spending nothing; every answer, from whoever gives it, is held to the
/// request's rules ([`decision::check_answer`]), and a refusal is the inner `Err`. The wait is
/// bounded by `until` (an instant, and whether it is the task's own limit) and the operator's
/// stop, which withdraws the request. A decider that cannot be reached is a transport failure,
/// retried (each retry counted in `retries`) with a growing pause; it neither answers nor
/// expires the request.
async fn await_decision(
    ctx: &Ctx,
    req: decision::Request,
    until: (Instant, bool),
    abort: &mut watch::Receiver<Abort>,
    retries: &mut u32,
) -> Result<Result<Decided, String>, Unsettled> {
    let decider = ctx
        .decider
        .clone()
        .expect("admission requires someone to answer a decision");
    let req = Arc::new(req);
    let mut expires = decision::parse_time(&req.expires_at).unwrap_or_else(SystemTime::now);
    let (mut opened, mut failures) = (false, 0u32);
    let decided = loop {
        let (d, r) = (decider.clone(), req.clone());
        let (first, pause) = (!opened, Duration::from_secs(u64::from(failures)));
        let poll_until = expires;
        let call = tokio::task::spawn_blocking(move || {
            std::thread::sleep(pause);
            match first {
                true => d.open(&r),
                false => d.poll(&r, poll_until),
            }
        });
        let got = tokio::select! {
            got = call => got.expect("a decider does not panic"),
            _ = tokio::time::sleep_until(until.0) => {
                close(&decider, &req, false).await;
                return Err(Unsettled::Cut(if until.1 { Ended::TimedOut } else { Ended::WallClock }));
            }
            why = proc::wait_abort(abort) => {
                close(&decider, &req, true).await;
                return Err(Unsettled::Cut(proc::aborted(why)));
            }
        };
        let polled = match got {
            Ok(p) => p,
            Err(DecideError::Refused(why)) => break Err(why),
            Err(DecideError::Transport(cause)) => {
                failures += 1;
                if failures > crucible_plan::ceilings::TRANSPORT_RETRIES {
                    close(&decider, &req, false).await;
                    return Err(Unsettled::Transport(cause));
                }
                *retries += 1;
                continue;
            }
        };
        (opened, failures) = (true, 0);
        // The request opened first holds: its digest and expiry, never a later one's.
        let digest = polled.digest;
        if let Some(at) = decision::parse_time(&polled.expires_at) {
            expires = expires.min(at);
        }
        match polled.state {
            decision::State::Answered(a) => {
                break decision::check_answer(&req, &digest, &a)
                    .map_err(|why| format!("human answer refused: {why}"))
                    .map(|()| Decided::Answered(a))
            }
            decision::State::Expired => break Ok(Decided::Expired(digest)),
            decision::State::Withdrawn => {
                break Err("the decision request was withdrawn".to_string())
            }
            // Still open once its expiry passed: it expired unanswered.
            decision::State::Open if SystemTime::now() >= expires => {
                break Ok(Decided::Expired(digest))
            }
            decision::State::Open => {}
        }
    };
    close(&decider, &req, false).await;
    Ok(decided)
}

/// Tells the decider the engine stopped waiting on `req` (withdrawing it on a stop), off the
/// runtime: a decider may block.
async fn close(decider: &Arc<dyn decision::Decider>, req: &Arc<decision::Request>, withdraw: bool) {
    let (d, r) = (decider.clone(), req.clone());
    let _ = tokio::task::spawn_blocking(move || d.close(&r, withdraw)).await;
}

/// What a decision model is asked about: the route's inputs, and under `files` each declared
/// JSON file the route names, read from its producer's captured set, by dependency and path.
fn route_state(task: &Task, inputs: Value, sets: &[StagedSet]) -> Result<Value, String> {
    let spec = task.route.as_ref().expect("a route task has a route");
    let mut state = match inputs {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    if spec.files.is_empty() {
        return Ok(Value::Object(state));
    }
    let mut files = serde_json::Map::new();
    for set in sets.iter().filter(|s| s.key.is_none()) {
        let mut held = serde_json::Map::new();
        for path in &spec.files {
            let file = set.source.join(path);
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue; // not this producer's file
            };
            let value = serde_json::from_str(&text).map_err(|e| {
                format!("declared file `{path}` of `{}` is not JSON: {e}", set.task)
            })?;
            held.insert(path.clone(), value);
        }
        if !held.is_empty() {
            files.insert(set.task.clone(), Value::Object(held));
        }
    }
    state.insert("files".into(), Value::Object(files));
    Ok(Value::Object(state))
}

/// Grades a command or evaluate attempt that ran: stopped, past a deadline, or exited on its own.
fn graded_turn(ctx: &Ctx, task: &Task, f: proc::Finished, report: &mut Report) -> Graded {
    match f.ended {
        Ended::Exited(status) => taskio::grade_exit(task, status.code(), &f.stdout, &f.stderr),
        cut => cut_short(ctx, task, cut, report),
    }
}

/// Which turn of an attempt a turn is: its repair round, and the runbook stage it runs.
type TurnPart<'a> = (Option<u32>, Option<&'a str>);

/// Keeps a turn's stdout and stderr in the task's log directory (the attempt's turn, its repair
/// turn, or its turn of a runbook stage: `attempt-1-stage-plan`), and names the directory on
/// the report.
fn keep_log(ctx: &Ctx, stem: &str, part: TurnPart<'_>, f: &proc::Finished, report: &mut Report) {
    let mut turn = crate::tasklog::turn_name(report.attempts, part.0);
    if let Some(stage) = part.1 {
        turn.push_str(&format!("-stage-{stage}"));
    }
    let streams = crate::tasklog::Streams {
        stdout: &f.stdout,
        stderr: &f.stderr,
    };
    report.log = ctx
        .logs
        .keep(stem, &turn, streams, &ctx.masker)
        .or(report.log.take());
}

/// Why an agent turn is a transport failure of its attempt.
enum TurnError {
    /// Its process could not be started.
    Spawn(std::io::Error),
    /// Its harness, stream or model API failed.
    Transport(String),
}

/// Puts the gate of a done stage (checkpoint `c`, recorded as `rec`) to a person as a human
/// decision (issue 15, RFC-0002:C-HUMAN-DECISION) through the run's decider, the same seam and
/// answer rules as a human route: one request per run, task and gate, over the stage's evidence
/// ([`crate::runbook::gate_evidence`]), logged `decision_opened` as it opens. A resumed run's
/// gate keeps the first open's times, so a resume never extends it. The decision is recorded
/// in `rec`; a gate not approved fails the task, with why (rejected, expired, no answer, or a
/// request that holds other evidence). The wait is bounded by the attempt's deadline and the
/// operator's stop like any attempt, and a gate cut short is never approved.
async fn gate(
    ctx: &Ctx,
    task: &Task,
    (rb, c, gate, cwd): (
        &crucible_plan::runbook::TaskRunbook,
        &crucible_plan::runbook::Checkpoint,
        &crucible_plan::runbook::Gate,
        &std::path::Path,
    ),
    rec: &mut crucible_plan::wire::CheckpointRecord,
    deadline: Deadline,
    abort: &watch::Receiver<Abort>,
) -> Result<Result<(), String>, Ended> {
    let mut abort = abort.clone();
    let route = crate::runbook::gate_route(&task.name, &gate.id);
    let fail = |why: String| {
        Ok(Err(format!(
            "runbook `{}`: gate `{}` {why}",
            rb.name, gate.id
        )))
    };
    let (name, r, cp, g, dir) = (
        task.name.clone(),
        rb.clone(),
        c.clone(),
        gate.clone(),
        cwd.to_path_buf(),
    );
    let bound = ctx.decision_bounds.evidence_bytes;
    let built = tokio::task::spawn_blocking(move || {
        crate::runbook::gate_evidence(&name, &r, &cp, &g, &dir, bound)
    })
    .await
    .expect("reading evidence does not panic");
    let (evidence, digest) = match built {
        Ok(held) => held,
        Err(why) => return fail(format!("cannot be put to a person: {why}")),
    };
    let folded = ctx.gates_opened.get(&route);
    let (opened_at, expires_at) = match folded {
        Some(o) => (o.opened_at.clone(), o.expires_at.clone()),
        None => {
            let now = SystemTime::now();
            let left = deadline.at.saturating_duration_since(Instant::now());
            (decision::rfc3339(now), decision::rfc3339(now + left))
        }
    };
    if folded.is_none_or(|o| o.digest != digest) {
        let file = (ctx.run_dir.join("decisions"))
            .join(format!("{}.json", crate::files::dir_name(&route, None)));
        let kept = std::fs::create_dir_all(file.parent().expect("a file has a parent"))
            .and_then(|()| std::fs::write(&file, crucible_plan::canonical::to_string(&evidence)));
        if let Err(e) = kept {
            return fail(format!("cannot keep its evidence: {e}"));
        }
        let _ = ctx.tx.send(super::Msg::GateOpened(
            crucible_plan::wire::DecisionOpened {
                task: task.name.clone(),
                gate: Some(gate.id.clone()),
                digest: digest.clone(),
                opened_at: opened_at.clone(),
                expires_at: expires_at.clone(),
                via: ctx.decider.as_ref().map_or("", |d| d.via()).to_string(),
            },
        ));
    }
    let req = decision::Request {
        run: ctx.run_id.clone(),
        route,
        questions: vec![crate::runbook::gate_question(gate)],
        evidence,
        digest: digest.clone(),
        opened_at,
        expires_at,
        max_note_bytes: ctx.decision_bounds.note_bytes,
    };
    let until = (deadline.at, deadline.own_limit);
    let decided = match await_decision(ctx, req, until, &mut abort, &mut 0).await {
        Ok(d) => d,
        Err(Unsettled::Cut(cut)) => return Err(cut),
        Err(Unsettled::Transport(cause)) => return fail(format!("got no decision: {cause}")),
    };
    let answer = match decided {
            Err(why) => return fail(format!("got no decision: {why}")),
            Ok(Decided::Expired(held)) | Ok(Decided::Answered(decision::Answer { digest: held, .. }))
                if held != digest =>
            {
                return fail(format!(
                    "has a request open over other evidence ({held}), from an earlier attempt; this turn's is {digest}"
                ))
            }
            Ok(Decided::Expired(_)) => None,
            Ok(Decided::Answered(a)) => Some(a),
        };
    let record = crate::runbook::gate_record(gate, &digest, answer.as_ref());
    let approved = record.approved;
    rec.gate = Some(record);
    match (approved, answer) {
        (true, _) => {}
        (false, Some(a)) => return fail(format!("was rejected by {}", a.principal)),
        (false, None) => {
            return fail("expired unanswered; it is never passed without a decision".into())
        }
    }
    Ok(Ok(()))
}

/// The stage turns of an attempt of a staged runbook task (issue 15).
struct StageTurns<'a> {
    ctx: &'a Ctx,
    task: &'a Task,
    stem: &'a str,
    /// The task's set name: what its stages are kept and logged by.
    set: &'a str,
    rb: &'a crucible_plan::runbook::TaskRunbook,
    harness: &'a dyn Harness,
    /// The task's turn: its prompt, settings, session and the conversation it continues.
    turn: &'a Turn<'a>,
    deadline: Deadline,
    ctl: &'a Control,
}

fn stage_turns<'a>(
    ctx: &'a Ctx,
    (task, stem, set): (&'a Task, &'a str, &'a str),
    rb: &'a crucible_plan::runbook::TaskRunbook,
    harness: &'a dyn Harness,
    turn: &'a Turn<'a>,
    deadline: Deadline,
    ctl: &'a Control,
) -> StageTurns<'a> {
    StageTurns {
        ctx,
        task,
        stem,
        set,
        rb,
        harness,
        turn,
        deadline,
        ctl,
    }
}

impl StageTurns<'_> {
    /// Runs the runbook as one turn per stage, in checkpoint order, within the attempt's one
    /// deadline, its spend counted across them all. Each turn's prompt is the task's with its
    /// stage and the stages done ([`crate::runbook::stage_prompt`]); it continues the
    /// conversation of the turn before it where the harness reports one (every CLI does; the
    /// command stand-in only in a session), else starts a fresh one. When a stage's turn passes
    /// its checkpoint is hashed into `records`, its artifacts kept beside the run and the stage
    /// logged `runbook_stage`; then its gate, if any, is put to a person before the next stage
    /// starts, and anything but an approval ends the task there. A stage an earlier attempt or
    /// an interrupted run did (all but the last: the last stage's result is the task's, kept
    /// only in its row) is not run again: its kept artifacts are put back, checked against
    /// their hashes, and only its gate is asked again if it was not approved. Returns the
    /// conversation the last turn was part of.
    async fn run(
        &self,
        report: &mut Report,
        records: &mut Vec<crucible_plan::wire::CheckpointRecord>,
    ) -> Result<Option<String>, TurnError> {
        let (ctx, task, rb) = (self.ctx, self.task, self.rb);
        let last = rb.checkpoints.len() - 1;
        let done: Vec<_> = (ctx.stages.lock().expect("stages"))
            .get(self.set)
            .cloned()
            .unwrap_or_default();
        records.clear();
        for (c, st) in rb.checkpoints[..last].iter().zip(&done) {
            if st.checkpoint.stage != c.stage {
                break;
            }
            let dir = crate::runbook::stage_dir(&ctx.run_dir, self.set, &c.stage);
            let (rec, cwd) = (st.checkpoint.clone(), self.turn.cwd.to_path_buf());
            let back = tokio::task::spawn_blocking(move || {
                crate::runbook::restore_stage(&rec, &dir, &cwd)
            })
            .await
            .expect("restoring does not panic");
            if back.is_err() {
                break; // the stage runs again
            }
            records.push(st.checkpoint.clone());
        }
        let kept = records.len();
        if report.attempts == 1 && kept > 0 {
            // Done by an interrupted run: what it spent on them is this attempt's too (a
            // retried attempt has counted it already).
            report.cost_usd += done[kept - 1].cost_usd;
        }
        if let Some(held) = ctx.stages.lock().expect("stages").get_mut(self.set) {
            held.truncate(kept);
        }
        let mut conversation = self.turn.resume.map(str::to_string);
        for (k, c) in rb.checkpoints.iter().enumerate() {
            if k >= kept {
                let id = self
                    .turn_of(k, conversation.as_deref(), records, report)
                    .await?;
                conversation = id.or(conversation);
                if report.graded.status != Status::Pass {
                    // Failure stays recordable: what the failed stage left, neither kept nor
                    // logged (nothing resumes a failed task).
                    let (cp, cwd) = (c.clone(), self.turn.cwd.to_path_buf());
                    let rec =
                        tokio::task::spawn_blocking(move || crate::runbook::checkpoint(&cp, &cwd))
                            .await
                            .expect("hashing does not panic");
                    records.push(rec);
                    return Ok(conversation);
                }
                let (cp, cwd) = (c.clone(), self.turn.cwd.to_path_buf());
                let dir = crate::runbook::stage_dir(&ctx.run_dir, self.set, &c.stage);
                let hashed = tokio::task::spawn_blocking(move || {
                    let rec = crate::runbook::checkpoint(&cp, &cwd);
                    crate::runbook::keep_stage(&rec, &cwd, &dir).map(|()| rec)
                })
                .await
                .expect("hashing does not panic");
                match hashed {
                    Ok(rec) => records.push(rec),
                    Err(e) => {
                        report.graded = Graded::fail(
                            format!(
                                "runbook `{}`: the artifacts of stage `{}` cannot be kept: {e}",
                                rb.name, c.stage
                            ),
                            report.graded.output.clone(),
                        );
                        return Ok(conversation);
                    }
                }
                self.log(&records[k], report.cost_usd);
            }
            let Some(g) = &c.gate else { continue };
            if records[k].gate.as_ref().is_some_and(|g| g.approved) {
                continue;
            }
            let at = (rb, c, g, self.turn.cwd);
            let decided = gate(
                ctx,
                task,
                at,
                &mut records[k],
                self.deadline,
                &self.ctl.abort,
            )
            .await;
            match decided {
                Ok(Ok(())) => self.log(&records[k], report.cost_usd),
                Ok(Err(note)) => {
                    report.graded = Graded::fail(note, report.graded.output.clone());
                    return Ok(conversation);
                }
                Err(cut) => {
                    report.graded = cut_short(ctx, task, cut, report);
                    return Ok(conversation);
                }
            }
        }
        Ok(conversation)
    }

    /// The turn of stage `k`, continuing `conversation` when there is one.
    async fn turn_of(
        &self,
        k: usize,
        conversation: Option<&str>,
        done: &[crucible_plan::wire::CheckpointRecord],
        report: &mut Report,
    ) -> Result<Option<String>, TurnError> {
        let stage = &self.rb.checkpoints[k].stage;
        let prompt = crate::runbook::stage_prompt(self.turn.prompt, self.rb, k, done);
        let file = (self.ctx.run_dir.join("inputs"))
            .join(format!("{}.stage-{stage}.prompt.md", self.stem));
        let _ = std::fs::write(&file, &prompt);
        let mut env = self.turn.env.to_vec();
        env.push(("CRUCIBLE_RUNBOOK_STAGE".into(), stage.clone()));
        let turn = Turn {
            prompt: &prompt,
            prompt_file: &file,
            env: &env,
            resume: conversation,
            ..*self.turn
        };
        let at = (self.task, self.stem, (None, Some(stage.as_str())));
        agent_turn(
            self.ctx,
            at,
            self.harness,
            &turn,
            self.deadline,
            self.ctl,
            report,
        )
        .await
    }

    /// Logs a stage's record (`runbook_stage`) and keeps it for a later attempt.
    fn log(&self, rec: &crucible_plan::wire::CheckpointRecord, cost_usd: f64) {
        let line = crucible_plan::wire::RunbookStage {
            task: self.task.name.clone(),
            set: self.set.to_string(),
            checkpoint: rec.clone(),
            cost_usd,
        };
        let mut stages = self.ctx.stages.lock().expect("stages");
        let held = stages.entry(self.set.to_string()).or_default();
        match (held.iter_mut()).find(|s| s.checkpoint.stage == rec.stage) {
            Some(s) => *s = line.clone(),
            None => held.push(line.clone()),
        }
        let _ = self.ctx.tx.send(super::Msg::StageDone(line));
    }
}

/// Runs one agent turn through its harness, reading its stream as it arrives, and grades it
/// into `report` (its spend counted, also when it was cut short). Returns the conversation the
/// turn is part of, recorded as its session's when it has one.
async fn agent_turn(
    ctx: &Ctx,
    (task, stem, part): (&Task, &str, TurnPart<'_>),
    harness: &dyn Harness,
    turn: &Turn<'_>,
    deadline: Deadline,
    ctl: &Control,
    report: &mut Report,
) -> Result<Option<String>, TurnError> {
    crucible_agent::clear_result(turn.cwd);
    let result_file = turn.cwd.join(crucible_agent::RESULT_FILE);
    // A read-only working directory (a runbook without `filesystem.write`) keeps one file
    // writable, the result: it must exist to be bound so.
    let read_only = ctx.sandbox.is_some() && crate::sandbox::Bounds::of(task, false).read_only;
    if read_only {
        if let Err(e) = std::fs::write(&result_file, "") {
            report.graded = Graded::fail(format!("cannot make the result file: {e}"), None);
            return Ok(None);
        }
    }
    let mut spawn = harness.spawn(turn);
    // A skill's files are the turn's to read (the pack is otherwise hidden from it), never
    // to change.
    if let Some(dir) = &task.skill {
        spawn.mounts.push(Mount {
            path: ctx.pack_dir.join(dir),
            writable: false,
        });
    }
    let jail = ctx.jail(task, &spawn);
    let (lines, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut progress = Progress::default();
    // What the attempt's earlier turns spent, under this one's streamed spend.
    let before = report.cost_usd;
    let read = async {
        while let Some(line) = rx.recv().await {
            let was = progress.spent_usd;
            harness.read_line(turn, &line, &mut progress);
            if progress.spent_usd != was {
                ctl.spending(ctx, before + progress.spent_usd);
            }
        }
    };
    let (ran, ()) = tokio::join!(
        proc::run(
            &spawn,
            jail.as_ref(),
            deadline,
            ctl.abort.clone(),
            Some(lines),
            &ctx.groups
        ),
        read
    );
    if read_only && std::fs::metadata(&result_file).is_ok_and(|m| m.len() == 0) {
        // Still as the engine made it: the turn wrote no result.
        crucible_agent::clear_result(turn.cwd);
    }
    let f = ran.map_err(TurnError::Spawn)?;
    keep_log(ctx, stem, part, &f, report);
    let conversation = match f.ended {
        Ended::Exited(status) => {
            let outcome = harness.finish(turn, progress, status.code());
            report.cost_usd += outcome.spent_usd;
            if let Some(cause) = outcome.transport {
                return Err(TurnError::Transport(cause));
            }
            report.graded = grade_agent(status.code(), &f.stderr, outcome.result);
            outcome.session_id
        }
        cut => {
            // What streamed in before the cut was spent all the same.
            report.cost_usd += progress.spent_usd;
            report.graded = cut_short(ctx, task, cut, report);
            progress.session_id
        }
    };
    if let (Some(session), Some(id)) = (turn.session, &conversation) {
        let mut sessions = ctx.sessions.lock().expect("sessions");
        let held = (sessions.entry(session.name.clone())).or_insert_with(|| (id.clone(), 0));
        *held = (id.clone(), held.1 + 1);
        let action = match turn.resume {
            Some(_) => SessionAction::Resumed,
            None => SessionAction::Started,
        };
        let record = report.session.get_or_insert_with(|| SessionTurns {
            name: session.name.clone(),
            id: id.clone(),
            action,
            turns: 0,
        });
        record.id = id.clone();
        record.turns = held.1;
    }
    Ok(conversation)
}

/// The failure of an attempt that did not end on its own: an operator stop, the run's
/// wall-clock ceiling, or the task's own deadline.
fn cut_short(ctx: &Ctx, task: &Task, ended: Ended, report: &mut Report) -> Graded {
    match ended {
        Ended::Stopped => {
            report.stopped = true;
            Graded::fail("stopped by the operator", None)
        }
        Ended::WallClock => {
            report.ceiling_killed = true;
            Graded::fail(
                format!(
                    "wall-clock ceiling reached: the run ran past its {} limit",
                    duration::format(ctx.max_secs)
                ),
                None,
            )
        }
        Ended::TimedOut | Ended::Exited(_) => Graded::fail(
            format!(
                "timed out: the task ran past its {} limit",
                duration::format(task.timeout_secs.unwrap_or(ctx.max_secs))
            ),
            None,
        ),
    }
}

/// What a passing turn's result owes and misses, as masked notes: its declared output fields and
/// its declared files (present, confined, admitted by their schemas). Empty when it owes nothing.
async fn contract_notes(task: &Task, cwd: &std::path::Path, output: Option<&Value>) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(Err(note)) = output.map(|out| taskio::check_emits(task, out)) {
        notes.push(note);
    }
    if !task.emits_files.is_empty() {
        let (root, decls) = (cwd.to_path_buf(), task.emits_files.clone());
        let checked = tokio::task::spawn_blocking(move || crate::files::precheck(&root, &decls))
            .await
            .expect("the check does not panic");
        match checked {
            Ok(Some(failure)) => notes.extend(failure.notes()),
            Ok(None) => {}
            // The capture that follows meets the same error and reports it.
            Err(_) => {}
        }
    }
    notes
}

/// Grades an agent turn that exited on its own with `code`, from its result file.
fn grade_agent(
    code: Option<i32>,
    stderr: &[u8],
    result: Result<crucible_agent::TurnResult, crucible_agent::AgentError>,
) -> Graded {
    let output = result.as_ref().ok().map(|r| r.output.clone());
    if code != Some(0) {
        let status = code.map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
        let tail = taskio::stderr_tail(stderr);
        let note = if tail.is_empty() {
            status
        } else {
            format!("{status}: {tail}")
        };
        let g = Graded::fail(note, output.clone());
        return taskio::apply_status_field(g, output.as_ref());
    }
    match result {
        Err(e) => Graded::fail(e.to_string(), None),
        Ok(r) => {
            let g = Graded {
                status: Status::Pass,
                note: None,
                output: Some(r.output.clone()),
            };
            taskio::apply_status_field(g, Some(&r.output))
        }
    }
}

/// RFC-0002:C-PLAYBOOK-LANE: early completion is honoured from a passing main-graph command or
/// evaluate task only; from any other task it is refused on the row and the run goes on.
pub(super) fn declared_completion(task: &Task, main: bool, report: &mut Report) {
    let Some(out) = &report.graded.output else {
        return;
    };
    if out.get("complete").and_then(Value::as_bool) != Some(true) {
        return;
    }
    let from_command = matches!(task.kind, TaskKind::Command | TaskKind::Evaluate);
    if from_command && main {
        if report.graded.status == Status::Pass {
            let reason = out
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string);
            report.completion = Some(reason);
        }
    } else if from_command {
        report.refused = Some(
            "early completion refused: an epilogue task runs after the main graph and cannot end it early".into(),
        );
    } else {
        report.refused = Some(format!(
            "early completion refused: a {} task's output is written by a model, so only a command or evaluate task may end the run early",
            task.kind
        ));
    }
}

/// Discards a shared task's uncommitted changes (before the next shared task may start), or
/// removes an isolated task's checkout (`checkout`), its files off the critical path (`finish`
/// sweeps what is left).
async fn cleanup(ctx: &Ctx, cwd: &std::path::Path, checkout: Option<crate::checkout::Checkout>) {
    let memory = ctx.memory.clone();
    // Sealed staged inputs first: neither the reset nor the removal may trip over them.
    let root = cwd.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || crate::files::unstage(&root)).await;
    match checkout {
        Some(c) => drop(tokio::task::spawn_blocking(c.unmount())),
        None => {
            let _ = tokio::task::spawn_blocking(move || memory.discard()).await;
        }
    }
}
