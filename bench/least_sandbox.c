// The least sandbox with the isolation issue 24 asks of every one-shot, and nothing else: a
// floor for points 2 and 3 on the machine at hand (bench/floor.py builds and runs it).
//
// What it does, in the fewest steps: cgroup leaves with limits of the `standard` profile's kind
// (memory 128 MiB, 64 processes, one core; `--no-cgroups` leaves them out), a clone into the
// seven namespaces a Warden sandbox gets (user, pid, mount, network, ipc, uts, cgroup), the
// child moved into the leaves before it runs anything, a root of its own (a tmpfs with `/usr`
// bound read-only and the merged-`/usr` links, `/proc`, a `/dev` with null, zero and urandom,
// an empty `/tmp`), the root made read-only, then an exec of the command as the namespace's
// pid 1. The parent waits for it and removes the leaves.
//
// What it leaves out, so that it is a floor and not a rival: no init (the command is pid 1),
// no seccomp, no Landlock, no capability drop, no rlimits, no loopback brought up, no workspace,
// no plan, no answer besides the exit status, no check of what the cgroups counted. A real
// sandbox does all of these; each costs something, so whatever this reaches, none reaches more.
//
// `--exec-only` is the control: the same program's start and an exec of the command, no sandbox.
//
// usage: least_sandbox [--no-cgroups | --exec-only] COMMAND [ARG...]
//        (root; exits with the command's status)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAMESPACES \
  (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)

static const char *const CONTROLLERS[] = {"memory", "pids", "cpu"};
#define NCONTROLLERS 3

static char leaves[NCONTROLLERS][512];
static int sync_pipe[2];
static char **command;

static void die(const char *what) {
  fprintf(stderr, "least_sandbox: %s: %s\n", what, strerror(errno));
  _exit(125);
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(path);
  close(fd);
}

// This process's own cgroup in the hierarchy of `controller` (cgroup v1), from /proc/self/cgroup.
static void own_cgroup(const char *controller, char *out, size_t size) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[1024];
  if (!f) die("/proc/self/cgroup");
  while (fgets(line, sizeof line, f)) {
    char *controllers = strchr(line, ':'), *path;
    if (!controllers || !(path = strchr(++controllers, ':'))) continue;
    *path++ = 0;
    path[strcspn(path, "\n")] = 0;
    for (char *c = strtok(controllers, ","); c; c = strtok(NULL, ","))
      if (!strcmp(c, controller)) {
        snprintf(out, size, "%s", strcmp(path, "/") ? path : "");
        fclose(f);
        return;
      }
  }
  errno = ENOENT;
  die(controller);
}

static void make_leaves(void) {
  static const char *const limits[NCONTROLLERS][2] = {
      {"memory.limit_in_bytes", "134217728"}, {"pids.max", "64"}, {"cpu.cfs_quota_us", "100000"}};
  for (int i = 0; i < NCONTROLLERS; i++) {
    char own[400], path[2048];
    own_cgroup(CONTROLLERS[i], own, sizeof own);
    snprintf(leaves[i], sizeof leaves[i], "/sys/fs/cgroup/%s%s/least-%d", CONTROLLERS[i], own, getpid());
    if (mkdir(leaves[i], 0755) && errno != EEXIST) die(leaves[i]);
    snprintf(path, sizeof path, "%s/%s", leaves[i], limits[i][0]);
    write_file(path, limits[i][1]);
  }
}

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags) {
  if (mount(src, dst, type, flags, NULL)) die(dst);
}

static void bind_device(const char *name) {
  char host[64], inside[64];
  snprintf(host, sizeof host, "/dev/%s", name);
  snprintf(inside, sizeof inside, "/tmp/dev/%s", name);
  int fd = open(inside, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) die(inside);
  close(fd);
  mount_or_die(host, inside, NULL, MS_BIND);
}

static int child(void *arg) {
  (void)arg;
  char go;
  close(sync_pipe[1]);
  if (read(sync_pipe[0], &go, 1) != 1) _exit(125);  // the maps written, the leaves joined
  close(sync_pipe[0]);
  mount_or_die(NULL, "/", NULL, MS_REC | MS_PRIVATE);
  mount_or_die("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV);
  static const char *const dirs[] = {"/tmp/usr", "/tmp/proc", "/tmp/dev", "/tmp/tmp", "/tmp/old"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
    if (mkdir(dirs[i], 0755)) die(dirs[i]);
  static const char *const links[][2] = {
      {"usr/bin", "/tmp/bin"}, {"usr/sbin", "/tmp/sbin"}, {"usr/lib", "/tmp/lib"}, {"usr/lib64", "/tmp/lib64"}};
  for (size_t i = 0; i < sizeof links / sizeof *links; i++)
    if (symlink(links[i][0], links[i][1])) die(links[i][1]);
  mount_or_die("/usr", "/tmp/usr", NULL, MS_BIND | MS_REC);
  mount_or_die(NULL, "/tmp/usr", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV);
  mount_or_die("proc", "/tmp/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  mount_or_die("tmpfs", "/tmp/dev", "tmpfs", MS_NOSUID);
  bind_device("null");
  bind_device("zero");
  bind_device("urandom");
  mount_or_die("tmpfs", "/tmp/tmp", "tmpfs", MS_NOSUID | MS_NODEV);
  if (chdir("/tmp") || syscall(SYS_pivot_root, ".", "old")) die("pivot_root");
  if (umount2("old", MNT_DETACH) || rmdir("old") || chdir("/")) die("old root");
  mount_or_die(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV);
  execvp(command[0], command);
  die(command[0]);
  return 125;
}

int main(int argc, char **argv) {
  int with_cgroups = 1;
  if (argc > 1 && !strcmp(argv[1], "--no-cgroups")) with_cgroups = 0, argv++, argc--;
  if (argc > 1 && !strcmp(argv[1], "--exec-only")) {
    if (argc < 3) return fprintf(stderr, "usage: least_sandbox --exec-only COMMAND [ARG...]\n"), 2;
    // The control: this program's own start (its dynamic loading, glibc's start-up) and an
    // exec, with no sandbox. A sandbox made by a fork of a running process (the daemon's
    // helpers) does not pay it, so it is taken off the floor when set beside the daemon.
    execvp(argv[2], argv + 2);
    die(argv[2]);
  }
  if (argc < 2) {
    fprintf(stderr, "usage: least_sandbox [--no-cgroups | --exec-only] COMMAND [ARG...]\n");
    return 2;
  }
  command = argv + 1;
  if (with_cgroups) make_leaves();
  if (pipe2(sync_pipe, O_CLOEXEC)) die("pipe");
  static char stack[64 * 1024] __attribute__((aligned(16)));
  pid_t pid = clone(child, stack + sizeof stack, NAMESPACES | SIGCHLD, NULL);
  if (pid < 0) die("clone");
  close(sync_pipe[0]);
  char path[64], text[64];
  snprintf(path, sizeof path, "/proc/%d/setgroups", pid);
  write_file(path, "deny");
  snprintf(text, sizeof text, "0 %d 1", getuid());
  snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
  write_file(path, text);
  snprintf(text, sizeof text, "0 %d 1", getgid());
  snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
  write_file(path, text);
  if (with_cgroups) {
    char procs[2048];
    snprintf(text, sizeof text, "%d", pid);
    for (int i = 0; i < NCONTROLLERS; i++) {
      snprintf(procs, sizeof procs, "%s/cgroup.procs", leaves[i]);
      write_file(procs, text);
    }
  }
  if (write(sync_pipe[1], "", 1) != 1) die("sync");
  close(sync_pipe[1]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) die("waitpid");
  if (with_cgroups)
    for (int i = 0; i < NCONTROLLERS; i++)
      if (rmdir(leaves[i])) die(leaves[i]);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
