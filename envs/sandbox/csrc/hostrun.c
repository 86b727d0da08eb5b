/* Host commands ({"op": "run"}): what the host runs in a sandbox for itself (the agent's diff, a liveness
 * probe) never runs in the agent's shell.
 *
 * That shell is the agent's to shape: a function named like the host's command (`__swebox_run`, `git`, or
 * `/usr/bin/env`: bash looks functions up even by a name with slashes), an alias, a DEBUG trap, a disabled
 * builtin with a program of the same name on PATH. So pid 1 forks a fresh process for each host command and
 * execs /bin/sh in it with a fixed environment: its function table, aliases, traps, variables and working
 * folder are sh's defaults, whatever the agent did. Its stdout and stderr are sockets, which no process of the
 * agent can open through /proc/<pid>/fd (ENXIO), so nothing else writes into what the host reads. With
 * "quiesce", every other process of the session is killed first (the agent's shell included: the next exec
 * starts a new one), so nothing of the agent runs beside the command at all: not a process that rewrites the
 * tree while it is read, nor one that writes into the command's memory through /proc/<pid>/mem. "freeze"
 * stops them (SIGSTOP) for the command's time instead, and continues those it stopped afterwards.
 *
 * The reply is the exec reply's shape: {"exit_code", "timed_out", "truncated", "duration_s", "stdout_bytes",
 * "output_bytes"}, then stdout (at most "max_output" bytes, whole: no middle is cut) and stderr's first bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "session.h"

#define DEFAULT_MAX_OUTPUT (64u << 20)
#define STDERR_KEPT 65536
#define GRACE_S 1.0 /* after the command exits, how long a process it left may hold its output open */

static char *const clean_env[] = {"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", NULL};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void child(const options_t *o, const char *command, int out, int err) __attribute__((noreturn));
static void child(const options_t *o, const char *command, int out, int err) {
    setsid(); /* its own process group: a timeout kills it whole */
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    if (syscall(SYS_close_range, 3, ~0u, 0)) for (int fd = 3; fd < 65536; fd++) close(fd);
    for (int i = 0; i < o->nlimits; i++) { /* the shell's limits: a host command is no way around them */
        int resource;
        unsigned long long value;
        if (sscanf(o->limits[i], "%d=%llu", &resource, &value) == 2) {
            struct rlimit rl = {value, value};
            setrlimit(resource, &rl);
        }
    }
    /* pid 1 ignores every signal, and an ignored signal stays ignored across execve: back to the defaults,
     * through the kernel's own call (the C library refuses its reserved real-time signals) */
    struct { void (*handler)(int); unsigned long flags; void (*restorer)(void); unsigned long mask; } dfl = {
        SIG_DFL, 0, NULL, 0};
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    umask(022);
    if (chdir("/")) _exit(126);
    char *argv[] = {"sh", "-c", (char *)command, NULL};
    execve("/bin/sh", argv, clean_env);
    dprintf(2, "swebox: cannot start /bin/sh: %s\n", strerror(errno));
    _exit(127);
}

static pid_t stopped[MAX_PIDS]; /* what "freeze" stopped: continued before the reply */
static int nstopped;

static void thaw(void) {
    for (int i = 0; i < nstopped; i++) kill(stopped[i], SIGCONT);
    nstopped = 0;
}

static void reply_error(const options_t *o, const char *what) {
    char text[512];
    snprintf(text, sizeof text, "run: %s: %s", what, strerror(errno));
    thaw();
    send_error(o->sock, text);
}

void run_host_command(const options_t *o, const request_t *r) {
    double started = now_s();
    if (r->command_error) {
        send_error(o->sock, "run: the command holds a lone surrogate (expected text that encodes as UTF-8)");
        return;
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {} /* zombies (an earlier command's leftovers) are not processes */
    if (r->quiesce) kill_all_but_me(0, NULL, 0);
    else if (r->freeze) nstopped = freeze_others(stopped, MAX_PIDS);
    int out[2], err[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out)) { reply_error(o, "socketpair"); return; }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, err)) {
        close(out[0]);
        close(out[1]);
        reply_error(o, "socketpair");
        return;
    }
    pid_t pid = fork_retrying();
    if (pid == 0) child(o, r->command.data ? r->command.data : "", out[1], err[1]);
    int fork_errno = errno;
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        errno = fork_errno;
        reply_error(o, "fork");
        return;
    }
    size_t limit = r->max_output >= 1 ? (size_t)r->max_output : DEFAULT_MAX_OUTPUT;
    buf_t kept = {0}, errors = {0};
    int fds[2] = {out[0], err[0]}, status = 0, exited = 0, timed_out = 0, truncated = 0;
    double deadline = started + r->timeout, stop = 0;
    static char chunk[65536];
    while (fds[0] >= 0 || fds[1] >= 0 || !exited) {
        double now = now_s();
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            stop = now + GRACE_S;
        }
        if ((stop && now >= stop) || (!timed_out && now >= deadline)) {
            if (!exited) timed_out = 1;
            break;
        }
        struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
        double end = stop && stop < deadline ? stop : deadline;
        int wait_ms = fds[0] < 0 && fds[1] < 0 ? 5 : (int)((end - now) * 1000) + 1;
        if (wait_ms > 100) wait_ms = 100; /* wakes to look for the command's exit */
        if (poll(p, 2, wait_ms) <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i] < 0 || !p[i].revents) continue;
            ssize_t n = read(fds[i], chunk, sizeof chunk);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) { close(fds[i]); fds[i] = -1; continue; }
            buf_t *into = i ? &errors : &kept;
            size_t room = (i ? STDERR_KEPT : limit) - into->len, take = (size_t)n < room ? (size_t)n : room;
            if (take) buf_add(into, chunk, take);
            if (!i && take < (size_t)n) truncated = 1; /* read on to the end: the command must not block */
        }
    }
    kill(-pid, SIGKILL); /* what it left behind in its process group */
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    for (int i = 0; i < 2; i++) if (fds[i] >= 0) close(fds[i]);
    buf_t json = {0};
    char fields[512];
    if (exited) {
        int code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
        snprintf(fields, sizeof fields, "{\"exit_code\":%d,", code);
    } else {
        snprintf(fields, sizeof fields, "{\"exit_code\":null,");
    }
    buf_str(&json, fields);
    snprintf(fields, sizeof fields, "\"timed_out\":%s,\"truncated\":%s,\"duration_s\":%.6f,\"stdout_bytes\":%zu,"
             "\"output_bytes\":%zu}", timed_out ? "true" : "false", truncated ? "true" : "false",
             now_s() - started, kept.len, kept.len + errors.len);
    buf_str(&json, fields);
    buf_add(&kept, errors.data ? errors.data : "", errors.len);
    thaw();
    send_message(o->sock, &json, kept.data, kept.len);
    free(json.data);
    free(kept.data);
    free(errors.data);
}
