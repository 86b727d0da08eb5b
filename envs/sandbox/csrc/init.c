/* nsinit's serving half: a sandbox's sessions, resets and end. nsinit.c does what comes before (the namespaces,
 * the host's id maps, the static mounts) and then calls this.
 *
 * It serves the host's requests on the control socket (protocol.py's framing):
 * - session: start a session (session.c) on the live slot's root and send the host its socket;
 * - reset: kill the live session (its PID namespace dies with its pid 1), drop the writable layer, mount a
 *   fresh one and start a new session; the cost does not depend on the size of the layers. With warm_reset
 *   (overlay backend), the session after the next is prepared SPARE_DELAY_MS after a reset has answered: a
 *   fresh writable layer in the other of two slots and a started shell, waiting. A reset then kills the old
 *   session, hands the prepared one over and tears the old slot down after answering;
 * - close, or EOF (the host is gone): kill everything, wait until every process of the sessions is gone (the
 *   host removes the cgroups once we have exited), exit.
 *
 * A slot's root, and how it is made for each backend, is root.c's.
 * A request that fails is answered {"error": "<op> failed: ..."}, and the sandbox serves on. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "init.h"
#include "session.h"

/* Right after a reset the agent's first command runs; preparing the next session (~5 ms of CPU) beside it would
 * slow both on a small machine */
#define SPARE_DELAY_MS 20

typedef struct {
    int slot;
    pid_t pid;     /* the session's pid 1 */
    int host_end;  /* the host's end of the session's socket, until handed over */
} session_t;

init_config_t cfg;
static int slot;          /* the live session's slot: its writable layer rw<slot>, its root root<slot> */
static pid_t session_pid; /* the live session's pid 1; 0: none */
static session_t spare;   /* a prepared session (warm_reset); spare.pid 0: none */
static double spare_due;  /* when to prepare the next one (monotonic seconds); 0: not due */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int alive(pid_t pid) { return waitpid(pid, NULL, WNOHANG) == 0; }

/* -- sessions ------------------------------------------------------------------------------------------- */
/* The starter failed before pid 1 existed, and said why on the session's socket */
static int starter_failed(int host_end) {
    struct pollfd p = {host_end, POLLIN, 0};
    request_t said;
    if (poll(&p, 1, 1000) == 1 && !read_request(host_end, &said)) {
        errno = 0;
        failed("%s", said.has_error ? said.error.data : "the session program exited without starting a session");
        free_request(&said);
        return -1;
    }
    errno = 0;
    return failed("the session program exited without starting a session");
}

/* A session on slot s's root (session.c): a starter, a fork of ours, that unshares the PID namespace, forks
 * pid 1, tells us its pid and exits. We, the subreaper, reap it and inherit pid 1, so pid 1 is our own child, to
 * kill and reap; only then may pid 1 ask for a signal at our death (session.c says why), which our NUL byte
 * tells it. A fork of this small program, not an exec of it: ~0.6 ms less per session. */
static int prepare_session(int s, session_t *out) {
    int sock[2], pid_pipe[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock)) return failed("socketpair");
    if (pipe2(pid_pipe, O_CLOEXEC)) { close(sock[0]); close(sock[1]); return failed("pipe"); }
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/root%d", cfg.staging, s);
    pid_t starter = fork_retrying();
    if (starter == 0) {
        close(sock[0]);
        close(pid_pipe[0]);
        start_session(cfg.session_args, cfg.nsession_args, root, sock[1], pid_pipe[1], cfg.env);
    }
    close(sock[1]);
    close(pid_pipe[1]);
    if (starter < 0) { close(sock[0]); close(pid_pipe[0]); return failed("fork of the session's starter"); }
    char text[32];
    read_tail(pid_pipe[0], text, sizeof text);
    close(pid_pipe[0]);
    waitpid(starter, NULL, 0);
    pid_t pid = (pid_t)atoi(text); /* pid 1's host pid: the host reaches its files via /proc/PID/root */
    if (pid <= 0) { starter_failed(sock[0]); close(sock[0]); return -1; }
    char go = 0;
    if (send(sock[0], &go, 1, MSG_NOSIGNAL) != 1) {
        kill(pid, SIGKILL);
        close(sock[0]);
        return failed("starting the session (its pid 1 died at once)");
    }
    *out = (session_t){s, pid, sock[0]};
    return 0;
}

/* Make `s` the live session and send the host its socket, with where the writable part is (for snapshots) */
static void hand_over(session_t *s) {
    slot = s->slot;
    session_pid = s->pid;
    char upper[PATH_MAX + 64];
    if (!strcmp(cfg.backend, "extract")) snprintf(upper, sizeof upper, "%s/root%d", cfg.staging, s->slot);
    else snprintf(upper, sizeof upper, "%s/rw%d/upper", cfg.staging, s->slot);
    buf_t json = {0};
    char head[64];
    snprintf(head, sizeof head, "{\"op\":\"session\",\"pid\":%d,\"upper\":", (int)s->pid);
    buf_str(&json, head);
    buf_json_string(&json, upper);
    buf_str(&json, "}");
    send_message_fd(cfg.ctl, &json, s->host_end); /* a host gone meanwhile: the next read sees EOF */
    free(json.data);
    close(s->host_end);
    s->host_end = -1;
}

static void stop_session(int wait) {
    if (session_pid) kill(session_pid, SIGKILL);
    session_pid = 0;
    reap(wait);
}

static void discard(session_t *s) {
    close(s->host_end);
    kill(s->pid, SIGKILL);
    unmount_root(s->slot);
    s->pid = 0;
}

static int reset(void) {
    session_t ready = spare;
    spare.pid = 0;
    if (ready.pid && !alive(ready.pid)) { /* its supervisor died waiting (the OOM killer): start afresh */
        discard(&ready);
        ready.pid = 0;
    }
    if (!ready.pid) {
        /* extract: the old copy's memory is freed once no session's mount namespace holds it */
        stop_session(!strcmp(cfg.backend, "extract"));
        if (unmount_root(slot) || mount_root(slot) || prepare_session(slot, &ready)) return -1;
        hand_over(&ready);
    } else {
        int old = slot;
        stop_session(0);
        hand_over(&ready);
        unmount_root(old); /* after answering: off the host's critical path; a failure only costs the spare */
    }
    if (cfg.warm_reset) spare_due = now_s() + SPARE_DELAY_MS / 1000.0;
    return 0;
}

/* The session after the next, on the other slot; a failure here is only a slower next reset */
static void prepare_spare(void) {
    int other = 1 - slot;
    if (mount_root(other)) return;
    if (prepare_session(other, &spare)) {
        spare.pid = 0;
        unmount_root(other);
    }
}

/* -- the request loop ----------------------------------------------------------------------------------- */
static void answer_error(const char *op) {
    char text[sizeof failure + 128];
    snprintf(text, sizeof text, "%s failed: %s", op, failure);
    send_error(cfg.ctl, text);
}

static void serve_requests(void) {
    sigset_t child_signal;
    sigemptyset(&child_signal);
    sigaddset(&child_signal, SIGCHLD);
    sigprocmask(SIG_BLOCK, &child_signal, NULL);
    int children = signalfd(-1, &child_signal, SFD_NONBLOCK | SFD_CLOEXEC);
    for (;;) {
        /* idle, this blocks: it wakes for a request or a SIGCHLD (the pid 1 of a killed session, or any
         * process reparented to us, the subreaper, died), or when the next session is due to be prepared */
        int wait_ms = -1;
        if (spare_due > 0) {
            double left = spare_due - now_s();
            wait_ms = left > 0 ? (int)(left * 1000) + 1 : 0;
        }
        struct pollfd fds[2] = {{cfg.ctl, POLLIN, 0}, {children, POLLIN, 0}};
        if (poll(fds, 2, wait_ms) < 0 && errno != EINTR) return;
        if (spare_due > 0 && now_s() >= spare_due) {
            spare_due = 0;
            prepare_spare();
        }
        if (fds[1].revents) {
            struct signalfd_siginfo info;
            while (read(children, &info, sizeof info) > 0) {}
            reap(0);
        }
        if (!fds[0].revents) continue;
        request_t r;
        if (read_request(cfg.ctl, &r)) return; /* EOF (the host is gone) or garbage */
        const char *op = r.has_op && r.op.data ? r.op.data : "";
        session_t fresh;
        if (!strcmp(op, "session")) {
            if (prepare_session(slot, &fresh)) answer_error(op);
            else hand_over(&fresh);
        } else if (!strcmp(op, "reset")) {
            if (reset()) answer_error(op);
        } else if (!strcmp(op, "close")) {
            free_request(&r);
            return;
        } else {
            char why[256];
            snprintf(why, sizeof why, "unknown request '%.200s'", op);
            send_error(cfg.ctl, why);
        }
        free_request(&r);
    }
}

void serve_sandbox(void) {
    signal(SIGPIPE, SIG_IGN);  /* a host gone mid-reply is an error to handle, not our death */
    signal(SIGCHLD, SIG_DFL);  /* ignored, the kernel would reap the starters we wait for */
    fcntl(cfg.ctl, F_SETFD, FD_CLOEXEC); /* inherited by nothing we start */
    session_t first;
    if (chdir(cfg.staging) ? failed("chdir %s", cfg.staging) : mount_root(slot) || prepare_session(slot, &first)) {
        send_error(cfg.ctl, failure);
        _exit(1);
    }
    hand_over(&first); /* the first session needs no request: the host waits for it */
    serve_requests();
    if (spare.pid) discard(&spare);
    stop_session(0);
    unmount_root(slot); /* fuse: its daemon goes too, which the wait below would otherwise wait for */
    reap(1);
    _exit(0); /* the host waits for this exit, then removes the cgroups */
}
