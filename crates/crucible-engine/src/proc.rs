//! Attempts as process groups (ARCHITECTURE.md, "Process groups").
//!
//! Every attempt runs its [`Spawn`] (a command's `sh -c`, a harness turn's argv) as the leader
//! of its own process group, with exactly the environment the spawn carries. A deadline, the wall-clock
//! ceiling or an operator stop kills the whole group: TERM, a short grace, then KILL, so
//! grandchildren a task left in the background die with it (a sandboxed attempt's group is
//! killed at once: its leader is PID 1 of its namespace, which ignores TERM unless it handles it,
//! and its exit kills everything in the namespace). When the leader exits on its own,
//! whatever it left running in its group is killed too: the attempt is over.
//!
//! Groups are tracked per run ([`ProcessGroups`], owned by the run and passed to each attempt),
//! never process-wide, so the controller can run many runs in one process.

use crucible_agent::spawn::Spawn;
use std::collections::HashSet;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How much of a stream an attempt keeps: only its end matters (the result is the last stdout
/// line, the note the stderr tail), and a chatty task must not grow the engine without bound.
const STDOUT_KEEP: usize = 1 << 20;
const STDERR_KEEP: usize = 256 << 10;

/// The longest stdout line sent live: a longer one is skipped (its tail is still kept).
const LINE_MAX: usize = 8 << 20;

/// Reads a stream to its end, keeping at most its last `keep` bytes, and sends each complete
/// line (without its newline) to `lines` as it arrives.
async fn read_tail(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
    keep: usize,
    lines: Option<mpsc::UnboundedSender<Vec<u8>>>,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    // The line being read, and whether it already ran past LINE_MAX.
    let (mut line, mut overlong) = (Vec::new(), false);
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(tx) = &lines {
                    for piece in chunk[..n].split_inclusive(|b| *b == b'\n') {
                        if !overlong {
                            line.extend_from_slice(piece);
                            overlong = line.len() > LINE_MAX;
                        }
                        if piece.ends_with(b"\n") {
                            if !overlong {
                                line.pop();
                                let _ = tx.send(std::mem::take(&mut line));
                            }
                            (line, overlong) = (Vec::new(), false);
                        }
                    }
                }
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > 2 * keep {
                    buf.drain(..buf.len() - keep);
                }
            }
        }
    }
    if let Some(tx) = lines.filter(|_| !line.is_empty() && !overlong) {
        let _ = tx.send(line);
    }
    if buf.len() > keep {
        buf.drain(..buf.len() - keep);
    }
    buf
}

/// How long a group gets between TERM and KILL.
const GRACE: Duration = Duration::from_millis(500);

/// One run's live attempt groups (ARCHITECTURE.md, "Embeddable"): owned by the run, handed to
/// every attempt it starts, so many runs in one process each kill only their own. Live groups
/// are also recorded on disk (`runs/<id>/groups/`), one file per group named by its id and
/// holding its leader's start time: a resume reads it to kill what an engine that died
/// (SIGKILL, a crash) left running, which would otherwise work and spend outside every ceiling.
#[derive(Debug, Default)]
pub struct ProcessGroups {
    live: Mutex<HashSet<i32>>,
    /// Where groups are recorded, once the run has a directory.
    record_dir: Mutex<Option<PathBuf>>,
}

impl ProcessGroups {
    /// Records live groups under `dir` from now on.
    pub(crate) fn record_in(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        *self.record_dir.lock().expect("group dir") = Some(dir.to_path_buf());
        Ok(())
    }

    fn register(&self, pgid: i32) {
        self.live.lock().expect("group registry").insert(pgid);
        if let (Some(dir), Some(start)) = (
            self.record_dir.lock().expect("group dir").as_ref(),
            start_time(pgid),
        ) {
            // Best effort: a failed record only loses the clean-up after a crash.
            let _ = std::fs::write(dir.join(pgid.to_string()), start.to_string());
        }
    }

    fn unregister(&self, pgid: i32) {
        self.live.lock().expect("group registry").remove(&pgid);
        if let Some(dir) = self.record_dir.lock().expect("group dir").as_ref() {
            let _ = std::fs::remove_file(dir.join(pgid.to_string()));
        }
    }

    /// Kills every live attempt group of this run with KILL, for an immediate exit.
    pub fn kill_all_now(&self) {
        for pgid in self.live.lock().expect("group registry").iter() {
            // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// A process's start time (clock ticks since boot, `/proc/<pid>/stat` field 22): with the pid,
/// it names one process across pid reuse.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    // Fields after the command: state is field 3, so start time (22) is the 20th here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// RFC-0002:C-PLAYBOOK-RESUME: kills, with KILL, every attempt group an interrupted engine
/// recorded under `dir` whose leader is still the same process, and forgets every record.
/// Returns how many groups were killed.
pub fn kill_recorded_groups(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut killed = 0;
    for e in entries.flatten() {
        let path = e.path();
        let pgid = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
        let recorded = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        if let (Some(pgid), Some(start)) = (pgid, recorded) {
            // Only the very process that led the group: a reused pid is someone else's.
            if pgid > 0 && start_time(pgid) == Some(start) {
                // SAFETY: kill(2) on a process group this run created, checked above.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                killed += 1;
            }
        }
        let _ = std::fs::remove_file(path);
    }
    killed
}

/// Why the engine wants every attempt in flight to end now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abort {
    None,
    WallClock,
    Stop,
}

/// How an attempt's process ended.
#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    /// The task's own limit fell first.
    TimedOut,
    /// The run's wall-clock ceiling fell (by deadline or by the coordinator's abort).
    WallClock,
    Stopped,
}

#[derive(Debug)]
pub struct Finished {
    pub ended: Ended,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The deadline an attempt runs under: the earlier of its task's limit and the run's ceiling.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    pub at: Instant,
    /// Whether `at` is the task's own limit (true) or the run's ceiling (false).
    pub own_limit: bool,
}

/// Descriptors the launcher left open without close-on-exec would reach every attempt, through
/// the sandbox too (a task could read or write whatever they name): marked close-on-exec once,
/// before the first spawn. The engine's own descriptors are close-on-exec already.
fn seal_inherited_fds() {
    static SEALED: std::sync::Once = std::sync::Once::new();
    SEALED.call_once(|| {
        // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors 3 and up.
        let sealed = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        } == 0;
        if sealed {
            return;
        }
        // Kernels before 5.11: one descriptor at a time.
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        for fd in dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        {
            if fd >= 3 {
                // SAFETY: F_SETFD on a descriptor number; a stale one fails with EBADF, harmlessly.
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
    });
}

/// Runs `spawn` as its own process group of the run's `groups`, with only the spawn's
/// environment, in `jail` when sandboxed, until it exits, its deadline falls, or `abort` says so;
/// each stdout line goes to `lines` as it arrives. An `Err` is a spawn failure: a transport
/// failure of the attempt.
pub async fn run(
    spawn: &Spawn,
    jail: Option<&crate::sandbox::Jail>,
    deadline: Deadline,
    mut abort: watch::Receiver<Abort>,
    lines: Option<mpsc::UnboundedSender<Vec<u8>>>,
    groups: &ProcessGroups,
) -> io::Result<Finished> {
    seal_inherited_fds();
    let (mut child, mut out, mut err) = match jail {
        Some(jail) => Child::jailed(jail.spawn(&spawn.argv, &spawn.env)?)?,
        None => Child::plain(spawn)?,
    };
    let (pgid, init) = (child.pid(), matches!(child, Child::Jailed(_)));
    groups.register(pgid);
    let read_out = tokio::spawn(async move { read_tail(&mut out, STDOUT_KEEP, lines).await });
    let read_err = tokio::spawn(async move { read_tail(&mut err, STDERR_KEEP, None).await });
    let current = *abort.borrow();
    let ended = if current != Abort::None {
        kill_group(pgid, init).await;
        let _ = child.wait().await;
        aborted(current)
    } else {
        tokio::select! {
            status = child.wait() => Ended::Exited(status?),
            _ = tokio::time::sleep_until(deadline.at) => {
                kill_group(pgid, init).await;
                let _ = child.wait().await;
                if deadline.own_limit { Ended::TimedOut } else { Ended::WallClock }
            }
            why = wait_abort(&mut abort) => {
                kill_group(pgid, init).await;
                let _ = child.wait().await;
                aborted(why)
            }
        }
    };
    // Whatever the attempt left running in its group dies with it, so its pipes close too.
    if group_alive(pgid) {
        kill_group(pgid, init).await;
    }
    groups.unregister(pgid);
    let stdout = read_out.await.unwrap_or_default();
    let stderr = read_err.await.unwrap_or_default();
    Ok(Finished {
        ended,
        stdout,
        stderr,
    })
}

/// A stream of the attempt's output.
type Output = Box<dyn AsyncRead + Unpin + Send>;

/// An attempt's process: std's child (unsandboxed), or the sandboxed task the engine started
/// itself (`sandbox::Jail::spawn`).
enum Child {
    Plain(tokio::process::Child),
    Jailed(Jailed),
}

impl Child {
    fn plain(spawn: &Spawn) -> io::Result<(Child, Output, Output)> {
        let Some((program, args)) = spawn.argv.split_first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty argv"));
        };
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(&spawn.cwd)
            .env_clear()
            .envs(spawn.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let out = Box::new(child.stdout.take().expect("piped stdout"));
        let err = Box::new(child.stderr.take().expect("piped stderr"));
        Ok((Child::Plain(child), out, err))
    }

    fn jailed(task: crate::sandbox::Jailed) -> io::Result<(Child, Output, Output)> {
        use tokio::net::unix::pipe::Receiver;
        let pid = task.pid;
        let adopt = move || -> io::Result<(Child, Output, Output)> {
            let out = Box::new(Receiver::from_owned_fd(task.stdout)?);
            let err = Box::new(Receiver::from_owned_fd(task.stderr)?);
            // SAFETY: an OwnedFd's descriptor stays open and the same until the AsyncFd drops it.
            let pidfd = unsafe {
                AsyncFd::register_with_interest(task.pidfd, tokio::io::Interest::READABLE)
            }
            .map_err(io::Error::from)?;
            let child = Jailed {
                pid,
                pidfd,
                status: None,
                mount_ns: task.mount_ns,
            };
            Ok((Child::Jailed(child), out, err))
        };
        adopt().inspect_err(|_| {
            // The task runs but cannot be watched: it ends here, reaped.
            // SAFETY: kill(2) and waitpid(2) of our own unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut 0, 0);
            }
        })
    }

    fn pid(&self) -> i32 {
        match self {
            Child::Plain(c) => c.id().map_or(0, |p| p as i32),
            Child::Jailed(j) => j.pid,
        }
    }

    /// Waits for the process to exit (cancel-safe: waiting again after a cancelled wait is fine).
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            Child::Plain(c) => c.wait().await,
            Child::Jailed(j) => j.wait().await,
        }
    }
}

/// A sandboxed task, reaped by its pid once its pidfd says it exited.
struct Jailed {
    pid: i32,
    pidfd: AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
    /// Dropped off the attempt's path once it is reaped (`sandbox::Jailed::mount_ns`).
    mount_ns: Option<OwnedFd>,
}

impl Jailed {
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let mut ready = self.pidfd.readable().await?;
            let mut raw = 0;
            // SAFETY: reaps our own child without blocking.
            match unsafe { libc::waitpid(self.pid, &mut raw, libc::WNOHANG) } {
                0 => ready.clear_ready(),
                r if r == self.pid => {
                    self.status = Some(ExitStatus::from_raw(raw));
                    self.release_namespace();
                }
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Drops the attempt's mount namespace on a blocking thread: the close tears it down.
    fn release_namespace(&mut self) {
        if let Some(ns) = self.mount_ns.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(move || drop(ns))),
                Err(_) => drop(ns),
            }
        }
    }
}

impl Drop for Jailed {
    /// An attempt dropped before its task was reaped (its future was cancelled): the task is
    /// killed and reaped off this thread, so it neither runs on nor stays a zombie.
    fn drop(&mut self) {
        if self.status.is_none() {
            let pid = self.pid;
            // SAFETY: kill(2) of our own unreaped child (its pid cannot be reused before it is reaped).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            std::thread::spawn(move || {
                let mut raw = 0;
                // SAFETY: reaps our own child.
                unsafe { libc::waitpid(pid, &mut raw, 0) };
            });
        }
        self.release_namespace();
    }
}

pub(crate) fn aborted(why: Abort) -> Ended {
    match why {
        Abort::Stop => Ended::Stopped,
        _ => Ended::WallClock,
    }
}

pub(crate) async fn wait_abort(abort: &mut watch::Receiver<Abort>) -> Abort {
    loop {
        if abort.changed().await.is_err() {
            // The coordinator is gone; nothing will ever abort this attempt.
            std::future::pending::<()>().await;
        }
        let v = *abort.borrow();
        if v != Abort::None {
            return v;
        }
    }
}

fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pgid > 0 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// TERM, a short grace, then KILL, to the whole group; KILL at once when its leader is the
/// init of a sandbox's PID namespace (`init`), which TERM would not reach.
async fn kill_group(pgid: i32, init: bool) {
    if pgid <= 0 {
        return;
    }
    if init {
        // SAFETY: kill(2) on a process group we created.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        return;
    }
    // SAFETY: kill(2) on a process group we created.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let until = Instant::now() + GRACE;
    // Polled from 1 ms up to 20 ms: most groups are gone within a millisecond of TERM (a
    // sandboxed attempt's namespace init is still exiting when its leader has exited), and a
    // fixed 20 ms first pause would add that to every such attempt.
    let mut pause = Duration::from_millis(1);
    while Instant::now() < until && group_has_live_member(pgid) {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Whether any member of the group is still running (zombies awaiting a reaper do not count:
/// some init processes never reap, and a zombie has already released everything).
fn group_has_live_member(pgid: i32) -> bool {
    if !group_alive(pgid) {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state ppid pgrp ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let _ppid = f.next();
        let pgrp = f.next().and_then(|s| s.parse::<i32>().ok()).unwrap_or(0);
        if pgrp == pgid && state != "Z" && state != "X" {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(command: &str, env: &[(&str, &str)]) -> Spawn {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Spawn::shell(command, Path::new("."), env.collect())
    }

    /// An attempt outside any sandbox, tracked in a process-group set of its own.
    async fn plain(
        spawn: &Spawn,
        deadline: Deadline,
        abort: watch::Receiver<Abort>,
    ) -> io::Result<Finished> {
        run(
            spawn,
            None,
            deadline,
            abort,
            None,
            &ProcessGroups::default(),
        )
        .await
    }

    fn far() -> Deadline {
        Deadline {
            at: Instant::now() + Duration::from_secs(30),
            own_limit: true,
        }
    }

    #[tokio::test]
    async fn captures_output_and_status() {
        let (_tx, rx) = watch::channel(Abort::None);
        let s = sh("echo $X; echo err >&2; exit 3", &[("X", "7")]);
        let f = plain(&s, far(), rx).await.unwrap();
        assert!(matches!(f.ended, Ended::Exited(s) if s.code() == Some(3)));
        assert_eq!(f.stdout, b"7\n");
        assert_eq!(f.stderr, b"err\n");
    }

    // RFC-0002:C-PLAYBOOK-BUDGET: at its limit the whole group dies, grandchildren included.
    #[tokio::test]
    async fn deadline_kills_the_group() {
        let (_tx, rx) = watch::channel(Abort::None);
        let d = Deadline {
            at: Instant::now() + Duration::from_millis(300),
            own_limit: true,
        };
        let f = plain(&sh("sleep 30 & echo $!; wait", &[]), d, rx)
            .await
            .unwrap();
        assert!(matches!(f.ended, Ended::TimedOut));
        let pid: u32 = String::from_utf8_lossy(&f.stdout).trim().parse().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().chars().next());
        assert!(stat.is_empty() || state == Some(Some('Z')), "{stat}");
    }

    #[tokio::test]
    async fn abort_stops_an_attempt() {
        let (tx, rx) = watch::channel(Abort::None);
        let h = tokio::spawn(async move { plain(&sh("sleep 30", &[]), far(), rx).await.unwrap() });
        // Whether the stop lands before or after the spawn, the attempt ends stopped.
        tx.send(Abort::Stop).unwrap();
        assert!(matches!(h.await.unwrap().ended, Ended::Stopped));
    }

    #[tokio::test]
    async fn long_output_keeps_its_end() {
        let (_tx, rx) = watch::channel(Abort::None);
        let cmd = "yes x | head -c 3000000; echo; echo '{\"last\": true}'";
        let f = plain(&sh(cmd, &[]), far(), rx).await.unwrap();
        assert!(f.stdout.len() <= STDOUT_KEEP);
        assert!(f.stdout.ends_with(b"{\"last\": true}\n"));
    }

    #[tokio::test]
    async fn spawn_failure_is_an_error() {
        let (_tx, rx) = watch::channel(Abort::None);
        let s = Spawn::shell("true", Path::new("/nonexistent-dir"), Vec::new());
        assert!(plain(&s, far(), rx).await.is_err());
    }

    // The spawn's environment is all the process gets: the engine's own is cleared.
    #[tokio::test]
    async fn only_the_spawns_environment_reaches_the_process() {
        let (_tx, rx) = watch::channel(Abort::None);
        let home = std::env::var("HOME").unwrap_or_default();
        let s = sh("env", &[("ONLY", "this")]);
        let f = plain(&s, far(), rx).await.unwrap();
        let text = String::from_utf8_lossy(&f.stdout);
        assert!(text.lines().any(|l| l == "ONLY=this"), "{text}");
        assert!(
            home.is_empty() || !text.contains(&format!("HOME={home}\n")),
            "{text}"
        );
    }

    // Lines reach the reader as they are printed, before the process ends, and the last one
    // without its newline too; the kept tail is unchanged.
    #[tokio::test]
    async fn stdout_lines_stream_live() {
        let (_tx, rx) = watch::channel(Abort::None);
        let (lines, mut got) = mpsc::unbounded_channel();
        let s = sh("echo one; echo two; sleep 1; printf three", &[]);
        let h = tokio::spawn(async move {
            run(&s, None, far(), rx, Some(lines), &ProcessGroups::default())
                .await
                .unwrap()
        });
        assert_eq!(got.recv().await.unwrap(), b"one");
        assert_eq!(got.recv().await.unwrap(), b"two");
        assert!(!h.is_finished(), "the lines came while the process ran");
        let f = h.await.unwrap();
        assert_eq!(got.recv().await.unwrap(), b"three");
        assert_eq!(f.stdout, b"one\ntwo\nthree");
    }

    // ARCHITECTURE.md "Embeddable": each run tracks its own groups; killing one run's attempts
    // leaves another run's attempt in the same process running.
    #[tokio::test]
    async fn each_run_kills_only_its_own_groups() {
        let (mine, theirs) = (
            std::sync::Arc::new(ProcessGroups::default()),
            std::sync::Arc::new(ProcessGroups::default()),
        );
        let (_tx1, rx1) = watch::channel(Abort::None);
        let (_tx2, rx2) = watch::channel(Abort::None);
        let (a, b) = (mine.clone(), theirs.clone());
        let h1 =
            tokio::spawn(
                async move { run(&sh("sleep 30", &[]), None, far(), rx1, None, &a).await },
            );
        let h2 =
            tokio::spawn(async move { run(&sh("sleep 1", &[]), None, far(), rx2, None, &b).await });
        while mine.live.lock().unwrap().is_empty() || theirs.live.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        mine.kill_all_now();
        let killed = h1.await.unwrap().unwrap();
        assert!(matches!(killed.ended, Ended::Exited(s) if s.code().is_none()));
        let other = h2.await.unwrap().unwrap();
        assert!(matches!(other.ended, Ended::Exited(s) if s.success()));
        assert!(mine.live.lock().unwrap().is_empty() && theirs.live.lock().unwrap().is_empty());
    }
}
