/* The sandbox's shapes side by side (issue 11; bench/README.md, "The sandbox's cost"), without
 * the engine: N spawns of `sh -c "echo '{}'"`, one after another, each waited for, in
 *
 *   plain   fork + exec, no sandbox;
 *   vplain  vfork + exec, no sandbox (what std's posix_spawn does: the engine's --no-sandbox);
 *   bwrap   bubblewrap with the flags the engine passed it until 2026-12-01 (pack hidden,
 *           workspace bound read-write, its inputs/ read-only, /dev, /proc, /tmp, PID and IPC
 *           namespaces, --die-with-parent, --cap-drop ALL);
 *   native  the same layout made in the child as crates/crucible-engine/src/sandbox/jail.rs made
 *           it first: a PID namespace and a second fork (the task is PID 1), mount and IPC namespaces,
 *           sources captured with open_tree, the tree read-only with mount_setattr, /dev, /proc,
 *           /tmp, the pack hidden by a tmpfs, the binds moved in, capabilities dropped;
 *   kept    native, and the task sends its mount namespace (SCM_RIGHTS) to the launcher right
 *           after making it; the launcher takes it once the spawn is reaped and hands it to a
 *           thread that closes it, so the namespace's teardown (which a process's exit waits for
 *           when it drops the last reference) is off the spawn's path;
 *   clone   the shape the engine has now: one clone(CLONE_VM | CLONE_VFORK) that makes the PID,
 *           mount and IPC namespaces too (the task is PID 1 and the launcher's direct child),
 *           then the same layout, and the launcher keeps the mount namespace as in kept.
 *
 * BALLAST=MiB makes the launcher touch that much memory first and write to part of it between
 * spawns, as an engine does: a fork copies the page tables of it all and makes it copy-on-write,
 * a vfork-style clone neither.
 *
 *   cc -O2 -pthread -o sandbox-shapes bench/sandbox-shapes.c
 *   ./sandbox-shapes plain|vplain|bwrap|native|kept|clone N DIR
 *
 * DIR is a scratch directory (it gets pack/workspace/inputs and pack/state); prints the mean
 * milliseconds per spawn. Run as root (or where unprivileged namespaces are allowed: not handled
 * here, the engine maps its ids). bench/sandbox-shapes.sh alternates the shapes and takes medians.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char pack[4096], state[4096], ws[4096], inputs[4096];
static const char *cmd = "echo '{}' >/dev/null";

static long ok(long r, const char *what) {
  if (r < 0) {
    dprintf(2, "%s: %s\n", what, strerror(errno));
    _exit(126);
  }
  return r;
}

static int tree(const char *p) {
  return ok(syscall(SYS_open_tree, AT_FDCWD, p, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE), p);
}

static void attr(int fd, const char *p, int flags, unsigned long long set) {
  struct mount_attr a = {.attr_set = set};
  ok(syscall(SYS_mount_setattr, fd, p, flags, &a, sizeof a), "mount_setattr");
}

static void put(int fd, const char *to) {
  ok(syscall(SYS_move_mount, fd, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH), to);
  close(fd);
}

static void mkdirs(const char *p) { /* every ancestor, then p */
  char b[4096];
  for (const char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
    memcpy(b, p, s - p);
    b[s - p] = 0;
    mkdir(b, 0755);
  }
  mkdir(p, 0755);
}

/* kept: the socket the task sends its mount namespace on (-1 otherwise), the pipe to the closer. */
static int keep[2] = {-1, -1}, closing[2];

struct fdmsg {
  struct cmsghdr h;
  int fd;
};

static void send_ns(void) {
  int ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  char byte = 0;
  struct iovec io = {&byte, 1};
  struct fdmsg c = {.h = {.cmsg_len = CMSG_LEN(sizeof(int)), .cmsg_level = SOL_SOCKET, .cmsg_type = SCM_RIGHTS}, .fd = ns};
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = &c, .msg_controllen = sizeof c};
  ok(sendmsg(keep[1], &m, MSG_DONTWAIT), "sendmsg");
  close(ns);
}

static int recv_ns(void) {
  char byte;
  struct iovec io = {&byte, 1};
  struct fdmsg c;
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = &c, .msg_controllen = sizeof c};
  ok(recvmsg(keep[0], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC), "recvmsg");
  return c.fd;
}

static void *closer(void *unused) {
  (void)unused;
  int fd;
  while (read(closing[0], &fd, sizeof fd) == sizeof fd) close(fd);
  return NULL;
}

/* clone: the namespaces come with the process. */
static int in_ns;

static void native_task(void) {
  static const char *nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"};
  int dev[6];
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (!in_ns) ok(unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare");
  if (keep[1] >= 0 && !in_ns) send_ns();
  ok(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "private");
  int w = tree(ws), in = tree(inputs);
  attr(w, "", AT_EMPTY_PATH | AT_RECURSIVE, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  attr(in, "", AT_EMPTY_PATH | AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  for (int i = 0; i < 6; i++) {
    dev[i] = tree(nodes[i]);
    attr(dev[i], "", AT_EMPTY_PATH, MOUNT_ATTR_NOSUID);
  }
  attr(AT_FDCWD, "/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  ok(mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755"), "/dev");
  mode_t m = umask(0);
  for (int i = 0; i < 6; i++) {
    close(open(nodes[i], O_CREAT | O_WRONLY | O_CLOEXEC, 0666));
    put(dev[i], nodes[i]);
  }
  mkdir("/dev/shm", 01777);
  mkdir("/dev/pts", 0755);
  ok(mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"), "devpts");
  symlink("pts/ptmx", "/dev/ptmx");
  symlink("/proc/self/fd", "/dev/fd");
  umask(m);
  ok(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "/proc");
  ok(mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"), "/tmp");
  mkdirs(pack);
  ok(mount("tmpfs", pack, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"), "pack");
  mkdirs(state);
  ok(mount("tmpfs", state, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"), "state");
  mkdirs(ws);
  put(w, ws);
  put(in, inputs);
  ok(chdir(ws), "chdir");
  ok(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "nnp");
  for (int c = 0; c < 64 && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == 0; c++) {}
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {{0}};
  ok(syscall(SYS_capset, &h, d), "capset");
  execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
  _exit(127);
}

static void spawn(const char *shape) {
  if (!strcmp(shape, "plain")) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
  } else if (!strcmp(shape, "bwrap")) {
    execlp("bwrap", "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
           "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--cap-drop", "ALL", "--tmpfs", pack,
           "--tmpfs", state, "--bind", ws, ws, "--ro-bind", inputs, inputs, "--chdir", ws, "/bin/sh", "-c",
           cmd, (char *)NULL);
  } else if (!strcmp(shape, "native") || !strcmp(shape, "kept")) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ok(unshare(CLONE_NEWPID), "unshare pid");
    pid_t task = ok(fork(), "fork");
    if (task == 0) native_task();
    int st;
    while (waitpid(task, &st, 0) < 0 && errno == EINTR) {}
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  _exit(127);
}

static int clone_task(void *unused) {
  (void)unused;
  native_task();
  return 127;
}

/* One spawn of the clone shape; returns the child, whose mount namespace is in *ns. */
static pid_t clone_spawn(int *ns) {
  static char *stack;
  if (!stack) stack = malloc(256 << 10);
  in_ns = 1;
  pid_t c = ok(clone(clone_task, stack + (256 << 10), CLONE_VM | CLONE_VFORK | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | SIGCHLD, NULL), "clone");
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/ns/mnt", c);
  *ns = open(p, O_RDONLY | O_CLOEXEC);
  return c;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s plain|vplain|bwrap|native|kept|clone N DIR\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]);
  snprintf(pack, sizeof pack, "%s/pack", argv[3]);
  snprintf(state, sizeof state, "%s/pack/state", argv[3]);
  snprintf(ws, sizeof ws, "%s/pack/workspace", argv[3]);
  snprintf(inputs, sizeof inputs, "%s/pack/workspace/inputs", argv[3]);
  mkdirs(state);
  mkdirs(inputs);
  if (!strcmp(argv[1], "kept") || !strcmp(argv[1], "clone")) {
    pthread_t t;
    ok(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, keep), "socketpair");
    ok(pipe(closing), "pipe");
    ok(-pthread_create(&t, NULL, closer, NULL), "pthread_create");
  }
  long mb = getenv("BALLAST") ? atol(getenv("BALLAST")) : 0;
  char *ballast = malloc((mb << 20) + 1);
  memset(ballast, 1, mb << 20);
  int cloned = !strcmp(argv[1], "clone"), ns = -1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; i++) {
    pid_t c = cloned ? clone_spawn(&ns) : !strcmp(argv[1], "vplain") ? vfork() : fork();
    if (c == 0) {
      if (!strcmp(argv[1], "vplain")) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
      }
      spawn(argv[1]);
    }
    for (long k = 0; k < (mb << 20); k += 16 << 12) ballast[k]++;
    int st;
    waitpid(c, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "%s: spawn %d ended with status %#x\n", argv[1], i, st);
      return 1;
    }
    if (keep[0] >= 0) {
      if (!cloned) ns = recv_ns();
      ok(write(closing[1], &ns, sizeof ns), "write");
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.3f\n", ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / n);
  return 0;
}
