/* A slot's root for nsinit's C half (init.c), and the processes that make it: the layers under a writable
 * tmpfs with overlayfs (overlay; fuse-overlayfs: its daemon serves it), or a tmpfs holding a private copy of
 * them (extract: the copy is extract.py's, run as a helper). Relative paths: our working folder is the staging
 * tmpfs, and they keep host paths out of the sandbox's mountinfo. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "init.h"

char failure[4096];
static pid_t fuse_pid;    /* the live slot's fuse-overlayfs daemon (fuse backend) */
static int fuse_err = -1; /* its stderr, kept open: a closed pipe would kill it at its next message */

int vfailed(const char *fmt, va_list ap) {
    int err = errno;
    int n = vsnprintf(failure, sizeof failure, fmt, ap);
    if (err && n >= 0 && (size_t)n < sizeof failure) snprintf(failure + n, sizeof failure - n, ": %s", strerror(err));
    return -1;
}

int failed(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfailed(fmt, ap);
    va_end(ap);
    return -1;
}

/* -- processes ------------------------------------------------------------------------------------------ */
void reap(int block) {
    while (waitpid(-1, NULL, block ? 0 : WNOHANG) > 0) {}
}

/* posix_spawn (no copy of our page tables, as a fork would make), retried while the process limit is still full
 * of a killed session's dying processes. Children start with no signal blocked, and SIGPIPE and SIGXFSZ, which
 * the Python before the exec ignored, at their defaults (as Python's subprocess starts them). */
int spawn(pid_t *pid, char **argv, char **env, const posix_spawn_file_actions_t *actions) {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, restored;
    sigemptyset(&none);
    sigemptyset(&restored);
    sigaddset(&restored, SIGPIPE);
    sigaddset(&restored, SIGXFSZ);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &restored);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc;
    for (int attempt = 0; (rc = posix_spawnp(pid, argv[0], actions, &attr, argv, env)) == EAGAIN && attempt < 1000;
         attempt++) {
        reap(0);
        usleep(10000);
    }
    posix_spawnattr_destroy(&attr);
    errno = rc;
    return rc ? -1 : 0;
}

/* Read `fd` to its end, keeping the last bytes in `text` (NUL-terminated) */
void read_tail(int fd, char *text, size_t size) {
    size_t len = 0;
    char chunk[4096];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR)) {
        if (n < 0) continue;
        if ((size_t)n >= size - 1) { memcpy(text, chunk + n - (size - 1), size - 1); len = size - 1; continue; }
        if (len + (size_t)n > size - 1) {
            memmove(text, text + len + n - (size - 1), size - 1 - (size_t)n);
            len = size - 1 - (size_t)n;
        }
        memcpy(text + len, chunk, (size_t)n);
        len += (size_t)n;
    }
    text[len] = 0;
}

/* -- a slot's root -------------------------------------------------------------------------------------- */
static int mount_tmpfs(const char *target, unsigned long size_mb, unsigned long inodes) {
    char data[96];
    /* nr_inodes: the kernel's default is half the RAM's pages, and a snapshot copies each entry as a host file */
    snprintf(data, sizeof data, "size=%lum,nr_inodes=%lu,mode=0755", size_mb, inodes);
    if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, data)) return failed("mount tmpfs on %s", target);
    return 0;
}

/* A helper with stdin and stdout on /dev/null; *said is the read end of its stderr (what a failure reports) */
static int spawn_helper(pid_t *pid, char **argv, int *said) {
    int err[2];
    if (pipe2(err, O_CLOEXEC)) return failed("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    int rc = spawn(pid, argv, environ, &actions);
    posix_spawn_file_actions_destroy(&actions);
    close(err[1]);
    if (rc) { close(err[0]); return failed("starting %s", argv[0]); }
    *said = err[0];
    return 0;
}

/* extract: the copy of every layer into the slot's tmpfs, by extract.py; a failure says what it said */
static int copy_layers(const char *target) {
    char *argv[64] = {0};
    int n = 0;
    for (int i = 0; i < cfg.nextract && n < 62; i++) argv[n++] = cfg.extract[i];
    argv[n++] = (char *)target;
    pid_t pid;
    int err;
    if (spawn_helper(&pid, argv, &err)) return -1;
    char said[2048];
    read_tail(err, said, sizeof said);
    close(err);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    errno = 0;
    return failed("the copy of the layers failed: %s", said);
}

static int is_mounted(const char *path) {
    struct stat here, there;
    return !stat(".", &here) && !stat(path, &there) && here.st_dev != there.st_dev;
}

/* fuse: the daemon serves the overlay; it is mounted once the mount point is on another device */
static int mount_fuse(const char *options, const char *target) {
    char all[8192];
    snprintf(all, sizeof all, "%s,squash_to_root", options);
    char *argv[] = {"fuse-overlayfs", "-f", "-o", all, (char *)target, NULL};
    pid_t pid;
    int err;
    if (spawn_helper(&pid, argv, &err)) return -1;
    for (int i = 0; i < 5000; i++) {
        if (is_mounted(target)) {
            fuse_pid = pid;
            fuse_err = err;
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            char said[2048];
            read_tail(err, said, sizeof said);
            close(err);
            errno = 0;
            return failed("fuse-overlayfs failed: %s", said);
        }
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(err);
    errno = 0;
    return failed("fuse-overlayfs did not mount within 5 s");
}

/* A mount point that is not mounted (EINVAL) is already what we want */
static int unmount(const char *path) {
    if (umount2(path, MNT_DETACH) && errno != EINVAL) return failed("unmount %s", path);
    return 0;
}

static int mount_layers(const char *root, const char *rw) {
    for (const char *name = "upper";; name = "work") {
        char path[64];
        snprintf(path, sizeof path, "%s/%s", rw, name);
        if (mkdir(path, 0755)) return failed("mkdir %s", path);
        if (!strcmp(name, "work")) break;
    }
    char options[8192];
    snprintf(options, sizeof options, "lowerdir=%s,upperdir=%s/upper,workdir=%s/work", cfg.lowerdir, rw, rw);
    if (!strcmp(cfg.backend, "fuse-overlayfs")) return mount_fuse(options, root);
    strncat(options, ",userxattr", sizeof options - strlen(options) - 1);
    if (mount("overlay", root, "overlay", 0, options)) return failed("mount overlay on %s", root);
    return 0;
}

/* Slot s's root, or nothing of it: a failure unmounts what it had mounted, so the slot can be tried again */
int mount_root(int s) {
    char root[32], rw[32];
    snprintf(root, sizeof root, "root%d", s);
    snprintf(rw, sizeof rw, "rw%d", s);
    const char *tmpfs = strcmp(cfg.backend, "extract") ? rw : root; /* extract: the copy is the root */
    if (mount_tmpfs(tmpfs, cfg.upper_size_mb, cfg.upper_inodes)) return -1;
    if (tmpfs == root ? copy_layers(root) : mount_layers(root, rw)) {
        umount2(tmpfs, MNT_DETACH);
        return -1;
    }
    return 0;
}

int unmount_root(int s) {
    char path[32];
    snprintf(path, sizeof path, "root%d", s);
    if (unmount(path)) return -1;
    if (fuse_pid) {
        kill(fuse_pid, SIGKILL);
        waitpid(fuse_pid, NULL, 0);
        close(fuse_err);
        fuse_pid = 0;
        fuse_err = -1;
    }
    snprintf(path, sizeof path, "rw%d", s);
    return strcmp(cfg.backend, "extract") ? unmount(path) : 0;
}
