//! The sandbox made in the attempt's own process, between `clone` and `exec` (issue 11, item 1):
//! namespaces, mounts and capabilities by system calls, no helper program and no new root.
//!
//! The engine starts a sandboxed attempt itself ([`Jail::spawn`]), not through std's `Command`:
//! one `clone` with `CLONE_VM | CLONE_VFORK` (as `posix_spawn` does: the child runs on a stack of
//! its own in the engine's memory, and the calling thread waits until it has called `exec`, so
//! no page table is copied) that also makes the attempt's PID, mount and IPC namespaces (and, in
//! a named sandbox, its network namespace; and for an engine without `CAP_SYS_ADMIN`, a user
//! namespace mapping only its own ids). The child is the task: the engine's direct child and
//! PID 1 of its namespace, so when it exits or is killed the kernel kills everything left in
//! it (`setsid` survivors included), and it dies with the engine (`PR_SET_PDEATHSIG`). It leads
//! its own process group, as every attempt does. Measured against the shape it replaces (std's
//! `fork`, a second `fork` for PID 1, both copying the engine's page tables) in bench/README.md,
//! "The sandbox's cost".
//!
//! Until `exec` the child shares the engine's memory, so it only makes raw system calls on data
//! prepared before the `clone` ([`Launch`]): no allocation, no lock, no formatting, and every
//! signal handler reset before signals are unblocked. It builds the layout `super` describes:
//! every bind source captured from the host's tree first (`open_tree`), so hiding a directory
//! never hides what is bound from inside it; the whole tree read-only, `nosuid` and `nodev`,
//! applied recursively (`mount_setattr`); a minimal `/dev`, a fresh `/proc` (the host's would
//! reach the hidden directories through `/proc/<engine>/root`), a private `/tmp`; the binds and
//! the hidden directories' empty tmpfs mounts in the order `super` gives. Last it drops every
//! capability and sets `no_new_privs`. A step that fails writes which one and its errno to the
//! task's stderr and exits 126, so the attempt fails naming it.
//!
//! The engine holds the attempt's mount namespace ([`Jailed::mount_ns`]) until the attempt is
//! over: the process that drops the last reference to a mount namespace tears it down (every
//! mount released after an RCU grace period) before its exit is reported, which would otherwise
//! be paid at the end of every attempt; the engine drops it afterwards, off the attempt's path.

use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// A host path bound into the sandbox at the same path.
pub struct Bind {
    path: CString,
    /// Its ancestors, outermost first: created (where missing) as mount points.
    ancestors: Vec<CString>,
    writable: bool,
    /// Skipped, rather than failing the attempt, when the source is missing.
    optional: bool,
}

impl Bind {
    pub fn new(path: &Path, writable: bool, optional: bool) -> Bind {
        Bind {
            path: c_path(path),
            ancestors: ancestors(path),
            writable,
            optional,
        }
    }
}

/// One step of the layout after the host tree is read-only, in order.
pub enum Step {
    /// The bind at this index of [`Plan::binds`].
    Bind(usize),
    /// An empty, writable tmpfs over this directory (created where missing).
    Hide(CString, Vec<CString>),
}

/// Everything an attempt's sandbox needs, prepared before the `clone`.
pub struct Plan {
    pub binds: Vec<Bind>,
    pub steps: Vec<Step>,
    pub cwd: CString,
    pub no_network: bool,
    /// The `/proc/self/uid_map` and `gid_map` lines when the engine lacks `CAP_SYS_ADMIN` (not
    /// root): the namespaces are then made inside a new user namespace mapping only its ids.
    pub user_maps: Option<(CString, CString)>,
}

/// A prepared sandbox, cheap to clone.
#[derive(Clone)]
pub struct Jail(Arc<Plan>);

/// A sandboxed attempt's process, started by [`Jail::spawn`]: the caller waits for it through
/// `pidfd` and reaps it by `pid`.
pub struct Jailed {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The attempt's mount namespace, when it could be opened: drop it once the attempt is
    /// reaped, off the attempt's path (the module's header).
    pub mount_ns: Option<OwnedFd>,
}

/// What the cloned child reads in place (it shares the engine's memory until `exec`).
struct Launch<'a> {
    plan: &'a Plan,
    /// The bind sources' and device nodes' detached trees, filled in by the child.
    fds: &'a mut [libc::c_int],
    dev: [libc::c_int; DEV_NODES.len()],
    /// The task's stdin, stdout and stderr.
    stdio: [libc::c_int; 3],
    /// The program, its argv and its environment (null-terminated); no program: make the
    /// sandbox and exit 0 ([`Jail::try_make`]).
    program: Option<&'a CStr>,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    /// Set by the child when `exec` failed.
    errno: libc::c_int,
}

impl<'a> Launch<'a> {
    /// A launch that makes the sandbox and runs nothing; `spawn` sets the program.
    fn new(plan: &'a Plan, fds: &'a mut [libc::c_int], stdio: [libc::c_int; 3]) -> Launch<'a> {
        Launch {
            plan,
            fds,
            dev: [-1; DEV_NODES.len()],
            stdio,
            program: None,
            argv: &[],
            envp: &[],
            errno: 0,
        }
    }
}

impl Jail {
    pub fn new(plan: Plan) -> Jail {
        Jail(Arc::new(plan))
    }

    /// Starts `argv` with exactly `env` in this sandbox, in its working directory: stdin
    /// `/dev/null`, stdout and stderr piped. A program named without a `/` is looked up in
    /// `env`'s `PATH` first. `Err` when it could not be started (its `exec` failed): a transport
    /// failure of the attempt, as a failed spawn is.
    pub fn spawn(&self, argv: &[String], env: &[(String, String)]) -> io::Result<Jailed> {
        let Some(program) = argv.first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty argv"));
        };
        let program = resolve(program, env)?;
        let args = argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let vars = env
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let argv_ptrs = null_terminated(&args);
        let envp_ptrs = null_terminated(&vars);
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let null = std::fs::File::open("/dev/null")?;
        let mut fds = vec![-1; self.0.binds.len()];
        let stdio = [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        let mut launch = Launch::new(&self.0, &mut fds, stdio);
        launch.program = Some(&program);
        (launch.argv, launch.envp) = (&argv_ptrs, &envp_ptrs);
        let (pid, pidfd) = clone_task(&mut launch)?;
        let failed = launch.errno;
        drop((out_w, err_w, null));
        if failed != 0 {
            reap(pid);
            return Err(io::Error::from_raw_os_error(failed));
        }
        let mount_ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
            .ok()
            .map(OwnedFd::from);
        Ok(Jailed {
            pid,
            pidfd,
            stdout: out_r,
            stderr: err_r,
            mount_ns,
        })
    }

    /// Makes this sandbox in a child that exits at once instead of running a program: `Err`
    /// holds what the child wrote (the failed step) or how it ended.
    pub fn try_make(&self) -> Result<(), String> {
        let fail = |e: io::Error| e.to_string();
        let (err_r, err_w) = pipe().map_err(fail)?;
        let null = std::fs::File::open("/dev/null").map_err(fail)?;
        let mut fds = vec![-1; self.0.binds.len()];
        let stdio = [null.as_raw_fd(), null.as_raw_fd(), err_w.as_raw_fd()];
        let mut launch = Launch::new(&self.0, &mut fds, stdio);
        let (pid, _pidfd) = clone_task(&mut launch).map_err(fail)?;
        drop((err_w, null));
        let mut said = String::new();
        let _ = std::fs::File::from(err_r).read_to_string(&mut said);
        match reap(pid) {
            0 => Ok(()),
            _ if !said.trim().is_empty() => Err(said),
            status => Err(format!("the sandbox's child ended with status {status:#x}")),
        }
    }
}

/// Where `program` is: itself when it names a path, else the first executable file of that name
/// in `env`'s `PATH` (as `execvp` would search, done before the `clone`).
fn resolve(program: &str, env: &[(String, String)]) -> io::Result<CString> {
    if program.contains('/') {
        return cstring(program.as_bytes());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    let found = std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|c| is_executable(c.as_path()))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{program:?} is not in PATH"),
            )
        })?;
    cstring(found.as_os_str().as_bytes())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in an argument or the environment",
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain([std::ptr::null()])
        .collect()
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 fills the two descriptors it is given.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors, owned from here on.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// Waits for `pid` (a child of ours) and returns its wait status.
fn reap(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: waits for our own child; retried when a signal interrupts it.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
    status
}

/// A pidfd of the engine itself, opened once: the child checks through it that the engine is
/// still alive once its parent-death signal is set (-1 where the kernel has no pidfds).
fn engine_pidfd() -> libc::c_int {
    static FD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    FD.get_or_init(|| {
        // SAFETY: pidfd_open of our own pid; the descriptor is close-on-exec by definition.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        // SAFETY: a fresh descriptor, owned from here on.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    })
    .as_ref()
    .map_or(-1, AsRawFd::as_raw_fd)
}

/// The child's stack: the child runs only `task` and the system calls it makes.
const STACK: usize = 256 << 10;

/// Clones the task (see the module's header); returns once it has called `exec`, or exited.
fn clone_task(launch: &mut Launch) -> io::Result<(libc::pid_t, OwnedFd)> {
    let plan = launch.plan;
    let mut flags = libc::CLONE_VM
        | libc::CLONE_VFORK
        | libc::CLONE_PIDFD
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWIPC
        | libc::SIGCHLD;
    if plan.no_network {
        flags |= libc::CLONE_NEWNET;
    }
    if plan.user_maps.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    engine_pidfd();
    // SAFETY: an anonymous private mapping, unmapped below once the child no longer uses it.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut pidfd: libc::c_int = -1;
    // SAFETY: every signal is blocked around the clone, so no handler of the engine's runs on
    // the child's stack before the child has reset them all; with CLONE_VFORK the clone returns
    // once the child has called exec or exited, so `launch` and the stack outlive its use.
    let (pid, err) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            task,
            stack.cast::<u8>().add(STACK).cast(),
            flags,
            (launch as *mut Launch).cast(),
            &mut pidfd as *mut libc::c_int,
        );
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::munmap(stack, STACK);
        (pid, err)
    };
    if pid < 0 {
        return Err(err);
    }
    // SAFETY: CLONE_PIDFD stored a fresh descriptor for the child, ours to own.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd) }))
}

/// Whether the engine holds `CAP_SYS_ADMIN`: without it the namespaces need a user namespace.
pub fn may_mount() -> bool {
    let mut header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget(2) writes two data structs for version 3, both provided.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    r == 0 && data[0].effective & (1 << CAP_SYS_ADMIN) != 0
}

/// The user namespace maps for `may_mount() == false`: the engine's own ids, nothing else.
pub fn own_maps() -> (CString, CString) {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let line = |id: u32| CString::new(format!("{id} {id} 1\n")).expect("no NUL in digits");
    (line(uid), line(gid))
}

pub fn c_path(p: &Path) -> CString {
    // A path from the OS cannot hold a NUL; one from the manifest was checked by admission.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// `p`'s ancestors below `/`, outermost first.
pub fn ancestors(p: &Path) -> Vec<CString> {
    let mut v: Vec<CString> = p
        .ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .map(c_path)
        .collect();
    v.reverse();
    v
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_V3: u32 = 0x2008_0522;
/// `CAP_SYS_ADMIN`, capability 21 (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;

/// The device nodes of the sandbox's `/dev`, bound from the host's (bubblewrap's set).
const DEV_NODES: [&CStr; 6] = [
    c"/dev/null",
    c"/dev/zero",
    c"/dev/full",
    c"/dev/random",
    c"/dev/urandom",
    c"/dev/tty",
];

/// `/dev`'s links, as bubblewrap makes them.
const DEV_LINKS: [(&CStr, &CStr); 6] = [
    (c"/proc/self/fd", c"/dev/fd"),
    (c"/proc/self/fd/0", c"/dev/stdin"),
    (c"/proc/self/fd/1", c"/dev/stdout"),
    (c"/proc/self/fd/2", c"/dev/stderr"),
    (c"/proc/kcore", c"/dev/core"),
    (c"pts/ptmx", c"/dev/ptmx"),
];

/// Writes `step`, `what` and the current errno to stderr and exits 126.
unsafe fn die(step: &[u8], what: &CStr) -> ! {
    let errno = *libc::__errno_location();
    let mut digits = [0u8; 12];
    let mut at = digits.len();
    let mut n = errno.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for part in [
        b"crucible: the sandbox could not be made: ".as_slice(),
        step,
        b" ",
        what.to_bytes(),
        b" failed (errno ",
        &digits[at..],
        b")\n",
    ] {
        libc::write(2, part.as_ptr().cast(), part.len());
    }
    libc::_exit(126)
}

unsafe fn check(r: libc::c_long, step: &[u8], what: &CStr) {
    if r < 0 {
        die(step, what);
    }
}

/// The cloned child: the task, PID 1 of its new namespaces. It never returns: it calls `exec`
/// (or, making no program, exits 0 once the sandbox is made).
extern "C" fn task(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Launch` the engine's thread keeps alive until this child has called
    // exec or exited (CLONE_VFORK); everything below is a raw system call on prepared data.
    unsafe {
        let launch = &mut *arg.cast::<Launch>();
        // Signals act by default before they are unblocked: none of the engine's handlers may
        // run here, in its memory.
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for (to, fd) in launch.stdio.iter().enumerate() {
            if libc::dup2(*fd, to as libc::c_int) < 0 {
                libc::_exit(126);
            }
        }
        check(
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into(),
            b"prctl",
            c"PDEATHSIG",
        );
        // The engine died before the parent-death signal was set: nothing would ever kill this.
        let mut engine = libc::pollfd {
            fd: engine_pidfd(),
            events: libc::POLLIN,
            revents: 0,
        };
        if engine.fd >= 0 && libc::poll(&mut engine, 1, 0) != 0 {
            libc::_exit(126);
        }
        check(libc::setpgid(0, 0).into(), b"setpgid", c"own group");
        enter(launch.plan, launch.fds, &mut launch.dev);
        let Some(program) = launch.program else {
            libc::_exit(0)
        };
        libc::execve(program.as_ptr(), launch.argv.as_ptr(), launch.envp.as_ptr());
        launch.errno = *libc::__errno_location();
        libc::_exit(127)
    }
}

/// The layout, in the task; returns in it.
unsafe fn enter(plan: &Plan, fds: &mut [libc::c_int], dev: &mut [libc::c_int]) {
    if let Some((uid_map, gid_map)) = &plan.user_maps {
        write_file(c"/proc/self/uid_map", uid_map);
        write_file(c"/proc/self/setgroups", c"deny");
        write_file(c"/proc/self/gid_map", gid_map);
    }
    check(
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
        .into(),
        b"mount",
        c"/ private",
    );
    // Every source from the host's tree, before anything is hidden or made read-only.
    for (b, fd) in plan.binds.iter().zip(fds.iter_mut()) {
        *fd = clone_tree(&b.path, b.optional);
        if *fd >= 0 {
            let mut set = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
            if !b.writable {
                set |= libc::MOUNT_ATTR_RDONLY;
            }
            set_attr(
                *fd,
                c"",
                libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
                set,
                &b.path,
            );
        }
    }
    for (node, fd) in DEV_NODES.iter().zip(dev.iter_mut()) {
        *fd = clone_tree(node, false);
        set_attr(*fd, c"", libc::AT_EMPTY_PATH, libc::MOUNT_ATTR_NOSUID, node);
    }
    set_attr(
        libc::AT_FDCWD,
        c"/",
        libc::AT_RECURSIVE,
        libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        c"/",
    );
    // /dev: the nodes above, a private devpts, the usual links.
    tmpfs(c"/dev", libc::MS_NOSUID | libc::MS_NOEXEC);
    let mask = libc::umask(0);
    for (node, fd) in DEV_NODES.iter().zip(dev.iter()) {
        let f = libc::open(
            node.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o666,
        );
        if f >= 0 {
            libc::close(f);
        }
        move_tree(*fd, node);
    }
    libc::mkdir(c"/dev/shm".as_ptr(), 0o1777);
    libc::mkdir(c"/dev/pts".as_ptr(), 0o755);
    check(
        libc::mount(
            c"devpts".as_ptr(),
            c"/dev/pts".as_ptr(),
            c"devpts".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"newinstance,ptmxmode=0666,mode=620".as_ptr().cast(),
        )
        .into(),
        b"mount",
        c"/dev/pts",
    );
    for (target, link) in DEV_LINKS {
        libc::symlink(target.as_ptr(), link.as_ptr());
    }
    libc::umask(mask);
    check(
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
        .into(),
        b"mount",
        c"/proc",
    );
    tmpfs(c"/tmp", libc::MS_NOSUID | libc::MS_NODEV);
    for step in &plan.steps {
        match step {
            Step::Bind(i) => {
                let (b, fd) = (&plan.binds[*i], fds[*i]);
                if fd >= 0 {
                    make_dirs(&b.ancestors);
                    let mut st: libc::stat = std::mem::zeroed();
                    let dir =
                        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR;
                    if dir {
                        libc::mkdir(b.path.as_ptr(), 0o755);
                    } else {
                        let f = libc::open(
                            b.path.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o644,
                        );
                        if f >= 0 {
                            libc::close(f);
                        }
                    }
                    move_tree(fd, &b.path);
                }
            }
            Step::Hide(path, ancestors) => {
                make_dirs(ancestors);
                libc::mkdir(path.as_ptr(), 0o755);
                tmpfs(path, libc::MS_NOSUID | libc::MS_NODEV);
            }
        }
    }
    check(libc::chdir(plan.cwd.as_ptr()).into(), b"chdir", &plan.cwd);
    if plan.no_network {
        loopback_up();
    }
    drop_privileges();
}
unsafe fn write_file(path: &CStr, text: &CStr) {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    check(fd.into(), b"open", path);
    let bytes = text.to_bytes();
    let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    if n != bytes.len() as isize {
        die(b"write", path);
    }
    libc::close(fd);
}

/// A detached copy of the mount tree at `path`, or -1 when it is optional and missing.
unsafe fn clone_tree(path: &CStr, optional: bool) -> libc::c_int {
    let fd = libc::syscall(
        libc::SYS_open_tree,
        libc::AT_FDCWD,
        path.as_ptr(),
        libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint,
    );
    if fd < 0 && optional && *libc::__errno_location() == libc::ENOENT {
        return -1;
    }
    check(fd, b"open_tree", path);
    fd as libc::c_int
}

unsafe fn set_attr(dirfd: libc::c_int, path: &CStr, flags: libc::c_int, set: u64, what: &CStr) {
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    check(
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr,
            std::mem::size_of::<libc::mount_attr>(),
        ),
        b"mount_setattr",
        what,
    );
}

unsafe fn move_tree(fd: libc::c_int, to: &CStr) {
    check(
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        ),
        b"move_mount",
        to,
    );
    libc::close(fd);
}

unsafe fn tmpfs(at: &CStr, flags: libc::c_ulong) {
    check(
        libc::mount(
            c"tmpfs".as_ptr(),
            at.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            c"mode=0755".as_ptr().cast(),
        )
        .into(),
        b"mount tmpfs",
        at,
    );
}

/// Creates the directories that do not exist yet (errors are the mount's to report).
unsafe fn make_dirs(dirs: &[CString]) {
    for d in dirs {
        libc::mkdir(d.as_ptr(), 0o755);
    }
}

/// The new network namespace's loopback, up (its only interface).
unsafe fn loopback_up() {
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    check(s.into(), b"socket", c"lo");
    let mut req = IfReq {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    check(
        libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req).into(),
        b"ioctl",
        c"lo",
    );
    req.flags |= libc::IFF_UP as libc::c_short;
    check(
        libc::ioctl(s, libc::SIOCSIFFLAGS, &req).into(),
        b"ioctl",
        c"lo up",
    );
    libc::close(s);
}

/// No capability left in any set, none to gain by `exec` (`no_new_privs`).
unsafe fn drop_privileges() {
    check(
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into(),
        b"prctl",
        c"NO_NEW_PRIVS",
    );
    // Up to the kernel's last capability: the first one it does not know ends the loop.
    for cap in 0..64 {
        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 {
            if *libc::__errno_location() == libc::EINVAL {
                break;
            }
            die(b"prctl", c"CAPBSET_DROP");
        }
    }
    check(
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
        .into(),
        b"prctl",
        c"CAP_AMBIENT",
    );
    let header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    check(
        libc::syscall(libc::SYS_capset, &header, data.as_ptr()),
        b"capset",
        c"none",
    );
}
