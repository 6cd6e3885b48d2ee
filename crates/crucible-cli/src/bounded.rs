//! Every compile runs in a forked child under the memory limit (issue 11 item 5). An
//! evaluation step can allocate without bound (`"a" * (1 << 30)`, `x = x + x` forty times) and
//! Rust aborts the process when an allocation fails, so the limit is set on a child: the child
//! compiles under `RLIMIT_DATA` = `Limits::max_eval_memory` and sends its result back as JSON;
//! a child that dies instead (out of memory, or out of stack on a shape the nesting scan missed)
//! becomes a compile error naming the limit, and the CLI goes on.
//!
//! The fork is safe because every command compiles before it starts a second thread (the run's
//! runtime is built after the compile).

use crucible_dsl::diag::rules;
use crucible_dsl::{CompileRequest, Compiled, Diagnostic, Diagnostics};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// `crucible_dsl::compile(req)`, run in a child limited to `req.limits.max_eval_memory` bytes.
pub fn compile(req: &CompileRequest) -> Result<Compiled, Diagnostics> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a two-element array, as pipe(2) requires.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(failed(
            req,
            "cannot create a pipe to the compile process".into(),
        ));
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: the process has one thread here (see the module header), so the child may run
    // ordinary Rust code; it leaves only through `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(failed(req, "cannot fork the compile process".into()));
    }
    if pid == 0 {
        drop(read_end);
        child(req, write_end);
    }
    drop(write_end);
    let mut bytes = Vec::new();
    let _ = std::fs::File::from(read_end).read_to_end(&mut bytes);
    let mut status = 0;
    // SAFETY: `pid` is our own child; `status` is a valid out-pointer.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        if let Ok(result) = serde_json::from_slice::<Result<Compiled, Diagnostics>>(&bytes) {
            return result;
        }
    }
    let message = if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV {
        format!(
            "the compile ran out of stack: the source nests deeper than the compiler can follow (max_nesting = {})",
            req.limits.max_nesting
        )
    } else {
        format!(
            "the compile passes the limit max_eval_memory = {} bytes",
            req.limits.max_eval_memory
        )
    };
    Err(failed(req, message))
}

/// The child: limit, compile, send, exit without running the parent's exit handlers.
fn child(req: &CompileRequest, out: OwnedFd) -> ! {
    let limit = libc::rlimit {
        rlim_cur: req.limits.max_eval_memory,
        rlim_max: req.limits.max_eval_memory,
    };
    // The child's own failure (an allocation or stack abort) is reported by the parent as a
    // diagnostic: its panic text would only be noise on the operator's terminal.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: duplicates a descriptor we own onto stderr.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), libc::STDERR_FILENO) };
    }
    // SAFETY: `limit` is a valid rlimit for the calling process.
    let limited = unsafe { libc::setrlimit(libc::RLIMIT_DATA, &limit) } == 0;
    let code = if limited {
        let result = crucible_dsl::compile(req);
        let text = serde_json::to_vec(&result).expect("a compile result serializes");
        match std::fs::File::from(out).write_all(&text) {
            Ok(()) => 0,
            Err(_) => 1,
        }
    } else {
        1
    };
    // SAFETY: ends the child at once; it owns nothing the parent needs flushed.
    unsafe { libc::_exit(code) }
}

fn failed(req: &CompileRequest, message: String) -> Diagnostics {
    Diagnostics::from(Diagnostic {
        file: req.file.clone(),
        line: 1,
        col: 1,
        rule: rules::LIMIT.to_string(),
        message,
        fix: "build smaller values: the compile evaluates a static graph, not data".into(),
        source_line: None,
        did_you_mean: None,
    })
}
