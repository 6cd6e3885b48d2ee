//! The `crucible` binary: argument parsing, dispatch and exit codes only. Every command's work
//! lives in the library crates; each module here turns arguments into a call and prints.
//!
//! Exit codes (ARCHITECTURE.md): `plan run`/`rerun` exit 0 when the verdict is valid, 3 for any
//! other verdict, 1 when refused before any dispatch; `check` and the `plan` inspectors exit 0
//! when clean and 1 on findings (as do the `runbook` commands); a bad command line exits 2 (clap's own code).

mod args;
mod bounded;
mod compile;
mod decide;
mod init;
mod inspect;
mod live;
mod remote;
mod remote_pack;
mod run;
mod runbook;

use args::{
    Cli, Command, PackCommand, PlanCommand, RemoteCommand, RemoteDraftCommand, RemotePackCommand,
    RunbookCommand,
};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    ignore_sigxfsz();
    let cli = Cli::parse();
    // A run and the controller keep SIGPIPE ignored: a closed stdout must never kill either.
    let long_lived = matches!(&cli.command, Command::Serve(_))
        || matches!(&cli.command, Command::Plan(p) if matches!(**p, PlanCommand::Run(_) | PlanCommand::Rerun(_)));
    if long_lived {
        // Before any thread starts, or that thread would keep the host's mounts: the isolated
        // checkouts' overlays go in the engine's own namespace (crucible_engine::sandbox::overlay).
        crucible_engine::sandbox::overlay::own_mount_namespace();
    } else {
        restore_sigpipe();
    }
    let result = match cli.command {
        Command::Plan(plan) => match *plan {
            PlanCommand::Compile(a) => compile::compile(&a),
            PlanCommand::Params(a) => compile::params(&a),
            PlanCommand::Show(a) => compile::show(&a),
            PlanCommand::Run(a) => run::plan_run(&a),
            PlanCommand::Rerun(a) => run::plan_rerun(&a),
        },
        Command::Init(a) => init::init(&a),
        Command::Check(a) => compile::check(&a),
        Command::Runs(a) => inspect::runs(&a),
        Command::Logs(a) => inspect::logs(&a),
        Command::Pack(PackCommand::Digest(a)) => compile::pack_digest(&a),
        Command::Runbook(cmd) => match cmd {
            RunbookCommand::Validate(a) => runbook::validate(&a),
            RunbookCommand::Seal(a) => runbook::seal(&a),
            RunbookCommand::FromSkill(a) => runbook::from_skill(&a),
            RunbookCommand::ToSkill(a) => runbook::to_skill(&a),
            RunbookCommand::Select(a) => runbook::select(&a),
        },
        Command::Serve(a) => remote::serve(a),
        Command::LaunchPlan(a) => compile::launch_plan(&a),
        Command::Remote(r) => match &r.command {
            RemoteCommand::Pack(RemotePackCommand::Push(a)) => remote::pack_push(&r, a),
            RemoteCommand::Pack(RemotePackCommand::Show(a)) => remote_pack::show(&r, a),
            RemoteCommand::Pack(RemotePackCommand::Share(a)) => remote_pack::share(&r, a, true),
            RemoteCommand::Pack(RemotePackCommand::Unshare(a)) => remote_pack::share(&r, a, false),
            RemoteCommand::Draft(RemoteDraftCommand::Save(a)) => remote::draft_save(&r, a),
            RemoteCommand::Launch(a) => remote::launch(&r, a),
            RemoteCommand::Render(a) => remote_pack::render(&r, a),
            RemoteCommand::Runs(a) => remote::runs(&r, a),
            RemoteCommand::Logs(a) => remote::logs(&r, a),
            RemoteCommand::Stop(a) => remote::stop(&r, a),
            RemoteCommand::Standing(c) => remote::standing(&r, c),
            RemoteCommand::Target(c) => remote_pack::target(&r, c),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "error: {}",
                crucible_plan::terminal::escape_lines(&format!("{e:#}"))
            );
            ExitCode::from(1)
        }
    }
}

/// Under a file-size limit (`ulimit -f`) a write past it raises SIGXFSZ, which kills by
/// default: the engine would die mid-run with no shutdown line. Ignored, the write fails with
/// EFBIG instead and the engine reports it like any other failed write (issue 11 item 6).
/// Tasks inherit the disposition, so their own writes past the limit fail the same way.
fn ignore_sigxfsz() {
    // SAFETY: called once at start-up, before any other thread exists; SIG_IGN is a valid
    // disposition for SIGXFSZ.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The inspectors print and exit: `crucible plan show | head` should end quietly, as any Unix
/// filter does, rather than panic on a closed pipe. A run keeps Rust's default (SIGPIPE
/// ignored), so a closed stdout can never kill it before it writes its shutdown.
fn restore_sigpipe() {
    // SAFETY: called once at start-up, before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
