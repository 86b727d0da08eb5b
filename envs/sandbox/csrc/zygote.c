/* The zygote: one process per host process, started once (spawner.py), that forks every sandbox's nsinit.
 *
 * A fork of this small program takes a fraction of a millisecond, and the forked nsinit (nsinit.c) shares its
 * pages with every other sandbox until it writes them. Started by the host as `SESSION-PROGRAM zygote FD` with
 * an empty environment and nothing open but FD, a socket only the host holds. Each request carries a new
 * sandbox's nsinit command line (NUL-separated, after the JSON: "payload_bytes"), its control socket and its
 * archive fds. The child detaches (a session of its own, stdio on /dev/null, nothing open but the request's
 * fds, moved to 3, 4, ...) and becomes that sandbox's nsinit. The reply carries the child's pid and a pidfd for
 * it: the host cannot wait for a process that is not its child, and a bare pid could name another process once
 * the zygote has reaped it.
 *
 * cgroups: nsinit joins its cgroup v1 folders itself (by thread, nsinit.c); a folder without `tasks` (cgroup v2)
 * is joined here, for the child: moving a whole process takes the kernel's global threadgroup lock, which after
 * an idle moment waits for an RCU grace period (6-16 ms here), so the child is already at work on its
 * namespaces and mounts meanwhile and waits for our word ("1", or "!" and why not) only before its first process.
 *
 * One request at a time, so a child holds only its own request's fds. It exits when the host's end closes;
 * live sandboxes do not depend on it (each nsinit has its own socket to the host).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session.h"

#define MAX_FDS 64
#define FIRST_FD 3 /* where the child finds the request's fds: the control socket, then the archives */

/* The next nsinit's network namespace (spare_network), made SPARE_DELAY_MS after a fork, once the child has had
 * the CPU for its own start; a request that comes first is served without one (nsinit makes its own) */
#define SPARE_DELAY_MS 3
static int spare_net = -1, spare_due;

static int reply_error(int sock, const char *fmt, const char *detail) {
    char text[1024];
    snprintf(text, sizeof text, fmt, detail);
    return send_error(sock, text);
}

/* The request's NUL-separated command line as argv (argv[0] is a name for messages) */
static char **split_args(buf_t *payload, int *argc) {
    size_t count = 1;
    for (size_t i = 0; i < payload->len; i++) count += !payload->data[i];
    char **argv = calloc(count + 2, sizeof *argv);
    argv[0] = "nsinit";
    int n = 1;
    for (size_t i = 0; i < payload->len; i += strlen(payload->data + i) + 1) argv[n++] = payload->data + i;
    *argc = n;
    return argv;
}

/* The cgroup folders of the command line that we join for the child: those without a `tasks` file */
static int join_for_child(pid_t pid, int argc, char **argv, char *why, size_t size) {
    for (int i = 1; i + 1 < argc && strcmp(argv[i], "--"); i++) {
        if (strcmp(argv[i], "--cgroup")) continue;
        char path[PATH_MAX], text[32];
        snprintf(path, sizeof path, "%s/tasks", argv[++i]);
        if (!access(path, F_OK)) continue;
        snprintf(path, sizeof path, "%s/cgroup.procs", argv[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        int len = snprintf(text, sizeof text, "%d", (int)pid);
        if (fd < 0 || write(fd, text, (size_t)len) != len) {
            snprintf(why, size, "%.*s: %s", (int)(size / 2), path, strerror(errno));
            if (fd >= 0) close(fd);
            return -1;
        }
        close(fd);
    }
    return 0;
}

/* In the fresh child: keep nothing of ours but the code, then become the sandbox's nsinit (never returns). Its
 * fds: the request's from FIRST_FD on, then the go pipe, then the spare network namespace (if any) */
static void become_nsinit(int argc, char **argv, const int *fds, int nfds, int go, int net) {
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int keep[MAX_FDS + 2], nkeep = 0;
    for (int i = 0; i < nfds; i++) keep[nkeep++] = fds[i];
    keep[nkeep++] = go;
    if (net >= 0) keep[nkeep++] = net;
    /* copies above the targets first, so that no dup2 below overwrites a descriptor still to be moved */
    int above = FIRST_FD + nkeep, copies[MAX_FDS + 2], null = open("/dev/null", O_RDWR);
    for (int i = 0; i < nkeep; i++) copies[i] = fcntl(keep[i], F_DUPFD_CLOEXEC, above);
    for (int std = 0; std < 3; std++) dup2(null, std);
    for (int i = 0; i < nkeep; i++) {
        if (copies[i] < 0 || dup2(copies[i], FIRST_FD + i) < 0) _exit(1); /* the host sees its socket close */
    }
    syscall(SYS_close_range, above, ~0u, 0);
    for (int i = nfds; i < nkeep; i++) fcntl(FIRST_FD + i, F_SETFD, FD_CLOEXEC); /* ours alone: not the host's */
    nsinit_main(argc, argv, FIRST_FD + nfds, net >= 0 ? FIRST_FD + nfds + 1 : -1);
}

static void close_all(const int *fds, int n) {
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* Serve one spawn request; the request's fds are ours to close, and are closed before the host hears back: once
 * a sandbox has started, the zygote holds nothing of it */
static void spawn(int sock, request_t *r, const int *fds, int nfds) {
    if (!nfds || !r->payload.len) {
        close_all(fds, nfds);
        reply_error(sock, "spawn: expected a sandbox's command line and its control socket%s", "");
        return;
    }
    int argc;
    char **argv = split_args(&r->payload, &argc);
    int go[2];
    if (pipe2(go, O_CLOEXEC)) {
        close_all(fds, nfds);
        reply_error(sock, "spawn: pipe failed: %s", strerror(errno));
        free(argv);
        return;
    }
    pid_t pid = fork();
    if (pid != 0) close_all(fds, nfds); /* the child has its own copies */
    if (pid < 0) { /* e.g. the host is out of processes: this sandbox fails, the zygote serves on */
        reply_error(sock, "spawn: fork failed: %s", strerror(errno));
    } else if (pid == 0) {
        close(sock);
        close(go[1]);
        become_nsinit(argc, argv, fds, nfds, go[0], spare_net);
    } else {
        /* opened before this loop can reap the child, so it names the child even if it already exited */
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        char text[64], why[512];
        snprintf(text, sizeof text, "{\"pid\":%d}", (int)pid);
        buf_t json = {0};
        buf_str(&json, text);
        if (pidfd >= 0) send_message_fd(sock, &json, pidfd);
        else reply_error(sock, "spawn: pidfd_open failed: %s", strerror(errno));
        free(json.data);
        if (pidfd >= 0) close(pidfd);
        if (join_for_child(pid, argc, argv, why, sizeof why)) {
            char word[sizeof why + 1];
            int len = snprintf(word, sizeof word, "!%s", why);
            (void)!write(go[1], word, (size_t)len);
        } else {
            (void)!write(go[1], "1", 1);
        }
    }
    close(go[0]);
    close(go[1]);
    free(argv);
    if (pid > 0 && spare_net >= 0) { /* handed to the child */
        close(spare_net);
        spare_net = -1;
    }
    spare_due = 1;
}

void zygote_main(int sock) {
    prctl(PR_SET_NAME, "swebox-zygote");
    signal(SIGPIPE, SIG_IGN); /* a host gone mid-reply: its next read sees EOF */
    sigset_t child_signal;
    sigemptyset(&child_signal);
    sigaddset(&child_signal, SIGCHLD);
    sigprocmask(SIG_BLOCK, &child_signal, NULL);
    int children = signalfd(-1, &child_signal, SFD_NONBLOCK | SFD_CLOEXEC);
    fcntl(sock, F_SETFD, FD_CLOEXEC);
    spare_net = spare_network();
    for (;;) {
        if (spare_due && spare_net < 0) { /* after a fork: wait a moment for a request before making it */
            struct pollfd request = {sock, POLLIN, 0};
            if (poll(&request, 1, SPARE_DELAY_MS) == 0) spare_net = spare_network();
        }
        spare_due = 0;
        /* idle, this blocks: it wakes for a request, or when a child (an nsinit) exited, to reap it */
        struct pollfd fds[2] = {{sock, POLLIN, 0}, {children, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) continue;
        if (fds[1].revents) {
            struct signalfd_siginfo info;
            while (read(children, &info, sizeof info) > 0) {}
            while (waitpid(-1, NULL, WNOHANG) > 0) {}
        }
        if (!fds[0].revents) continue;
        request_t r;
        int received[MAX_FDS], n;
        if (read_request_fds(sock, &r, received, MAX_FDS, &n)) _exit(0); /* the host is gone */
        spawn(sock, &r, received, n);
        free_request(&r);
    }
}
