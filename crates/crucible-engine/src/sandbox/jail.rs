//! The sandbox made in the attempt's own child, between `fork` and `exec` (issue 11, item 1):
//! namespaces, mounts and capabilities by system calls, no helper program and no new root.
//!
//! Everything here runs in a child of a multi-threaded process, so it only makes raw system
//! calls on data prepared before the fork ([`Plan`]): no allocation, no lock, no formatting.
//! The child std forks for the attempt (the leader of the attempt's process group, which the
//! engine waits for and kills) makes a PID namespace and forks once more; that second child is
//! the task, PID 1 of the namespace, so when it exits the kernel kills everything left in it
//! (`setsid` survivors included). The first child only waits and exits with the task's status
//! (128 + the signal's number when a signal ended it); both die with their parent
//! (`PR_SET_PDEATHSIG`), so nothing outlives the engine. The task makes its own mount, IPC and
//! (in a named sandbox) network namespaces, then builds the layout `super` describes: every
//! bind source captured from the host's tree first (`open_tree`), so hiding a directory never
//! hides what is bound from inside it; the whole tree read-only, `nosuid` and `nodev`, applied
//! recursively (`mount_setattr`); a minimal `/dev`, a fresh `/proc` (the host's would reach
//! the hidden directories through `/proc/<engine>/root`), a private `/tmp`; the binds and the
//! hidden directories' empty tmpfs mounts in the order `super` gives. Last it drops every
//! capability and sets `no_new_privs`. A step that fails writes which one and its errno to the
//! task's stderr and exits 126, so the attempt fails naming it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

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

/// Everything an attempt's sandbox needs, prepared before the fork.
pub struct Plan {
    pub binds: Vec<Bind>,
    pub steps: Vec<Step>,
    pub cwd: CString,
    pub no_network: bool,
    /// The `/proc/self/uid_map` and `gid_map` lines when the engine lacks `CAP_SYS_ADMIN` (not
    /// root): the namespaces are then made inside a new user namespace mapping only its ids.
    pub user_maps: Option<(CString, CString)>,
    /// The engine's pid: a first child whose parent already changed exits at once.
    pub engine: libc::pid_t,
}

/// A prepared sandbox, cheap to clone into a spawn's `pre_exec`.
#[derive(Clone)]
pub struct Jail(Arc<Plan>);

impl Jail {
    pub fn new(plan: Plan) -> Jail {
        Jail(Arc::new(plan))
    }

    /// The hook to run in the spawned child before `exec`: it returns only in the task.
    pub fn pre_exec(&self) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
        let plan = self.0.clone();
        let mut fds: Vec<libc::c_int> = vec![-1; plan.binds.len()];
        let mut dev: [libc::c_int; DEV_NODES.len()] = [-1; DEV_NODES.len()];
        move || {
            // SAFETY: runs in the forked child only, on data prepared before the fork, with
            // async-signal-safe system calls (see `enter`).
            unsafe { enter(&plan, &mut fds, &mut dev) };
            Ok(())
        }
    }
}

impl Jail {
    /// Makes this sandbox in a child that exits at once instead of running a program: `Err`
    /// holds what the child wrote (the failed step) or how it ended.
    pub fn try_make(&self) -> Result<(), String> {
        use std::io::Read;
        let mut ends = [0; 2];
        // SAFETY: pipe2 fills the two descriptors it is given.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error().to_string());
        }
        let mut hook = self.pre_exec();
        // SAFETY: the child only moves the pipe onto stderr, runs the hook (async-signal-safe,
        // see `enter`) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::dup2(ends[1], 2);
                let _ = hook();
                libc::_exit(0)
            }
        }
        // SAFETY: the write end is ours to close; the read end becomes a File that owns it.
        let mut said = String::new();
        unsafe {
            libc::close(ends[1]);
            use std::os::fd::FromRawFd;
            let _ = std::fs::File::from_raw_fd(ends[0]).read_to_string(&mut said);
        }
        if pid < 0 {
            return Err(io::Error::last_os_error().to_string());
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        match status {
            0 => Ok(()),
            _ if !said.trim().is_empty() => Err(said),
            _ => Err(format!(
                "the sandbox's first child ended with status {status:#x}"
            )),
        }
    }
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

/// The first child's part, then (in the task) the layout; returns only in the task.
unsafe fn enter(plan: &Plan, fds: &mut [libc::c_int], dev: &mut [libc::c_int]) {
    check(
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into(),
        b"prctl",
        c"PDEATHSIG",
    );
    if libc::getppid() != plan.engine {
        libc::_exit(126);
    }
    // The engine's signal handlers are inherited and this child never execs: signals it gets
    // (the group's TERM) must act by default, never reach the engine's handlers.
    for sig in 1..32 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    let mut flags = libc::CLONE_NEWPID;
    if plan.user_maps.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    check(libc::unshare(flags).into(), b"unshare", c"pid");
    if let Some((uid_map, gid_map)) = &plan.user_maps {
        write_file(c"/proc/self/uid_map", uid_map);
        write_file(c"/proc/self/setgroups", c"deny");
        write_file(c"/proc/self/gid_map", gid_map);
    }
    let task = libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0);
    check(task, b"fork", c"task");
    if task > 0 {
        wait_and_exit(task as libc::pid_t);
    }
    // The task, PID 1 of its namespace: it dies with the first child.
    check(
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into(),
        b"prctl",
        c"PDEATHSIG",
    );
    let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
    if plan.no_network {
        flags |= libc::CLONE_NEWNET;
    }
    check(libc::unshare(flags).into(), b"unshare", c"mount");
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

/// The first child: waits for the task and exits as it did.
unsafe fn wait_and_exit(task: libc::pid_t) -> ! {
    // It needs no descriptor, and must not hold std's exec-status pipe open: the engine's spawn
    // returns only when every copy is closed.
    libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, 0);
    let mut status = 0;
    loop {
        let r = libc::waitpid(task, &mut status, 0);
        if r == task {
            break;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(126);
        }
    }
    if libc::WIFEXITED(status) {
        libc::_exit(libc::WEXITSTATUS(status));
    }
    libc::_exit(128 + libc::WTERMSIG(status))
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
