/* The shell supervisor: what pid 1 of a sandbox session does once its root is final (session.c).
 *
 * It owns one persistent bash (state such as `cd` and exported variables survives between commands, like a
 * terminal) and runs the exec protocol for the host: hand the command over, read the output until a per-command
 * random marker, keep the first and last max_output/2 bytes, enforce the wall-clock timeout.
 *
 * The command itself travels in a memfd the shell holds at CMD_FD, not on its stdin: bash reads a pipe one byte
 * at a time (so that the programs it starts could read the rest), ~0.4 us a byte, 1.9 ms for a 4 KB command,
 * while `mapfile` reads a file in one go. Only a short line (run it, then print the marker) goes down the
 * shell's stdin. It is pid 1, so the agent's `kill -9 -1` cannot touch it, it ignores every signal it can, and
 * when it dies the kernel kills everything in the session.
 *
 * The agent's processes have the shell's uid and the shell is dumpable (execve made it so), so they may open
 * what the shell holds through /proc/<shell>/fd. Neither channel opens that way: the shell's stdin is a socket
 * (the kernel refuses to open one through /proc: ENXIO) and the memfd belongs to another id with mode 0
 * (prepare_command_channel). The host's own commands never come here at all (hostrun.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "session.h"

#define READ_CHUNK 65536
#define CMD_FD 100 /* the shell's fd for the command memfd: above what scripts use (3-9), clear of bash's saves (10..) */

extern char **environ;

static const options_t *opts;
static size_t half; /* bytes kept at each end of a command's output */

static struct {
    pid_t pid;
    int in, out, cmd;          /* its stdin, its stdout and stderr, the command memfd (shared with it at CMD_FD) */
    char note[8192];           /* a restart note for the next command's output */
} shell = {0, -1, -1, -1, ""};

/* sigaction through the kernel's own call: the C library refuses its reserved real-time signals (32, 33),
 * which whoever started the sandbox may have left ignored, and an ignored signal stays ignored across execve */
static void set_disposition(int sig, void (*handler)(int)) {
    struct { void (*handler)(int); unsigned long flags; void (*restorer)(void); unsigned long mask; } action = {
        handler, 0, NULL, 0};
    syscall(SYS_rt_sigaction, sig, &action, NULL, sizeof action.mask);
}

/* -- small helpers -------------------------------------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* -- the shell ------------------------------------------------------------------------------------------ */
static int channel = -1; /* the command memfd, one for every shell of the session */

int prepare_command_channel(void) {
    channel = memfd_create("swebox-command", MFD_CLOEXEC);
    if (channel < 0) return -1;
    /* nobody, else any other mapped id; rootless maps one id only, and the memfd stays the agent's own (its
     * owner may chmod it back: docs/sandbox.md says what rootless gives up) */
    if (fchown(channel, 65534, 65534) && fchown(channel, 1, 1)) {}
    if (fchmod(channel, 0)) {}
    return 0;
}

static void shell_start(const char *cwd) {
    int in[2], out[2], cmd = channel;
    if (cmd < 0) return; /* no shell: the next exec reports it */
    /* stdin a socket: no process of the agent can open it through /proc/<shell>/fd/0 to type into the shell */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in)) return;
    if (pipe2(out, O_CLOEXEC)) { close(in[0]); close(in[1]); return; }
    pid_t pid = fork_retrying();
    if (pid == 0) {
        setsid();
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(out[1], 2);
        dup2(cmd, CMD_FD); /* before the file limit below, which may be lower than CMD_FD */
        if (syscall(SYS_close_range, 3, CMD_FD - 1, 0) || syscall(SYS_close_range, CMD_FD + 1, ~0u, 0))
            for (int fd = 3; fd < 65536; fd++) if (fd != CMD_FD) close(fd);
        for (int i = 0; i < opts->nlimits; i++) {
            int resource;
            unsigned long long value;
            if (sscanf(opts->limits[i], "%d=%llu", &resource, &value) == 2) {
                struct rlimit rl = {value, value};
                setrlimit(resource, &rl);
            }
        }
        for (int sig = 1; sig < NSIG; sig++) if (sig != SIGKILL && sig != SIGSTOP) set_disposition(sig, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (chdir(cwd)) chdir("/");
        char *argv[] = {"bash", "--norc", "--noprofile", NULL};
        execve("/bin/bash", argv, environ);
        dprintf(2, "swebox: cannot start /bin/bash: %s\n", strerror(errno));
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid < 0) { close(in[1]); close(out[0]); return; }
    shell.pid = pid;
    shell.in = in[1];
    shell.out = out[0];
    shell.cmd = cmd;
    fcntl(shell.out, F_SETFL, O_NONBLOCK);
    buf_t boot = {0};
    /* the command runs without CMD_FD (bash keeps it in a close-on-exec copy meanwhile) */
    buf_str(&boot, "__swebox_run() { mapfile -t -d '' -n 1 -u 100 __swebox_cmd; eval \"$__swebox_cmd\" </dev/null 100<&-; }\n"
                   "set +o history 2>/dev/null; cd -- '");
    for (const char *p = opts->workdir; *p; p++) {
        if (*p == '\'') buf_str(&boot, "'\\''");
        else buf_add(&boot, p, 1);
    }
    buf_str(&boot, "' 2>/dev/null || cd /\n");
    if (write(shell.in, boot.data, boot.len) < 0) {} /* a shell that died at once is found by the next exec */
    free(boot.data);
}

static int shell_alive(void) { return shell.pid > 0 && waitpid(shell.pid, NULL, WNOHANG) == 0; }

static void shell_restart(const char *how) {
    char link[64], cwd[4096] = "/";
    snprintf(link, sizeof link, "/proc/%d/cwd", shell.pid);
    ssize_t n = readlink(link, cwd, sizeof cwd - 1);
    cwd[n > 0 ? n : 1] = 0;
    if (shell.in >= 0) close(shell.in);
    if (shell.out >= 0) close(shell.out);
    shell.in = shell.out = shell.cmd = -1; /* the memfd (channel) serves the next shell */
    shell.pid = 0;
    kill_all_but_me(0, NULL, 0);
    shell_start(cwd);
    snprintf(shell.note, sizeof shell.note, "[swebox: the shell %s; a new shell was started on the same files; "
             "the working directory is %s and exported variables were reset]\n", how, cwd);
}

/* -- a command's output: the stream as read, less the marker line ---------------------------------------- */
typedef struct {
    buf_t head;   /* the stream's first `half` bytes */
    buf_t tail;   /* its last bytes: at least `half` + a read's worth beyond the marker */
    size_t total; /* bytes in the stream */
} capture_t;

static void capture_add(capture_t *c, const char *data, size_t len) {
    if (c->head.len < half) {
        size_t room = half - c->head.len;
        buf_add(&c->head, data, len < room ? len : room);
    }
    size_t keep = 2 * half + 2 * READ_CHUNK;
    buf_add(&c->tail, data, len);
    if (c->tail.len > 2 * keep) { /* amortised: move once per `keep` bytes */
        memmove(c->tail.data, c->tail.data + c->tail.len - keep, keep);
        c->tail.len = keep;
    }
    c->total += len;
}

/* Stream bytes [from, to) into `out`: those in the head, then the rest, which the tail holds */
static void copy_stream(const capture_t *c, size_t from, size_t to, buf_t *out) {
    if (from < c->head.len) {
        size_t end = to < c->head.len ? to : c->head.len;
        buf_add(out, c->head.data + from, end - from);
        from = end;
    }
    if (from < to) buf_add(out, c->tail.data + (from - (c->total - c->tail.len)), to - from);
}

/* Output bytes [from, to): the output is the stream less [cut_from, cut_to) (the marker line) */
static void copy_output(const capture_t *c, size_t cut_from, size_t cut_to, size_t from, size_t to, buf_t *out) {
    if (from < cut_from) {
        size_t end = to < cut_from ? to : cut_from;
        copy_stream(c, from, end, out);
        from = end;
    }
    if (from < to) copy_stream(c, from + (cut_to - cut_from), to + (cut_to - cut_from), out);
}

/* The output, its middle replaced by a note when it is longer than 2 * half. The tail always holds what this
 * reads: the whole stream when the output fits, else the last half and all that followed the marker. */
static void capture_text(const capture_t *c, size_t cut_from, size_t cut_to, buf_t *out, int *truncated) {
    size_t len = c->total - (cut_to - cut_from);
    *truncated = len > 2 * half;
    if (!*truncated) {
        copy_output(c, cut_from, cut_to, 0, len, out);
        return;
    }
    char note[96];
    snprintf(note, sizeof note, "\n[... %zu bytes of output cut ...]\n", len - 2 * half);
    copy_output(c, cut_from, cut_to, 0, half, out);
    buf_str(out, note);
    copy_output(c, cut_from, cut_to, len - half, len, out);
}

/* Where the line "\n<token> <status>\n" is in the tail, from `*from` on (an offset into the stream) */
static int find_marker(capture_t *c, const char *marker, size_t mlen, size_t *from, size_t *start, size_t *end,
                       int *status) {
    size_t base = c->total - c->tail.len;
    if (*from < base) *from = base;
    for (;;) {
        char *hay = c->tail.data + (*from - base), *hit = memmem(hay, c->tail.len - (*from - base), marker, mlen);
        if (!hit) { *from = c->total > mlen ? c->total - mlen : 0; return 0; }
        size_t at = base + (size_t)(hit - c->tail.data);
        char *digits = hit + mlen, *stop = c->tail.data + c->tail.len, *p = digits;
        while (p < stop && *p >= '0' && *p <= '9') p++;
        if (p == stop) { *from = at; return 0; } /* the line is not whole yet */
        if (*p != '\n' || p == digits) { *from = at + 1; continue; }
        *start = at;
        *end = base + (size_t)(p + 1 - c->tail.data);
        *status = atoi(digits);
        return 1;
    }
}

/* The command, NUL-terminated, at the start of the memfd, whose offset (shared with the shell) goes back to 0.
 * Bytes of an earlier, longer command may follow the NUL: mapfile stops at it. The memfd shrinks only after a
 * big command, so that a small one costs two syscalls here. */
static int hand_over_command(buf_t *command) {
    static size_t held; /* bytes the memfd holds */
    buf_add(command, "", 1); /* the NUL (buf_add keeps one more in the buffer) */
    if (held > (1u << 20) && ftruncate(shell.cmd, 0)) return -1;
    for (size_t off = 0; off < command->len;) {
        ssize_t n = pwrite(shell.cmd, command->data + off, command->len - off, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        off += (size_t)n;
    }
    held = command->len > held || held > (1u << 20) ? command->len : held;
    return lseek(shell.cmd, 0, SEEK_SET) < 0 ? -1 : 0;
}

static void exec_command(request_t *r) {
    static pid_t before[MAX_PIDS];
    double started = now_s();
    capture_t c = {{0}, {0}, 0};
    int exit_code = -1, has_exit = 0, timed_out = 0, restarted = 0;
    size_t cut_from = 0, cut_to = 0;
    if (*shell.note) { capture_add(&c, shell.note, strlen(shell.note)); *shell.note = 0; }
    if (!shell_alive()) {
        shell_restart("had exited");
        capture_add(&c, shell.note, strlen(shell.note));
        *shell.note = 0;
    }
    if (r->command_error || shell.pid <= 0) {
        const char *why = r->command_error ? "UnicodeEncodeError: a lone surrogate in the command"
                                           : "OSError: no shell could be started";
        char msg[256];
        snprintf(msg, sizeof msg, "[swebox: the command could not be run: %s]\n", why);
        capture_add(&c, msg, strlen(msg));
        goto reply;
    }
    int nbefore = list_pids(before, MAX_PIDS);
    unsigned char raw[12];
    char token[25], marker[32];
    if (getrandom(raw, sizeof raw, 0) != sizeof raw) _exit(1);
    for (int i = 0; i < 12; i++) snprintf(token + 2 * i, 3, "%02x", raw[i]);
    int mlen = snprintf(marker, sizeof marker, "\n%s ", token);
    if (hand_over_command(&r->command)) {
        char msg[256];
        snprintf(msg, sizeof msg, "[swebox: the command could not be run: OSError: %s]\n", strerror(errno));
        capture_add(&c, msg, strlen(msg));
        goto reply;
    }
    buf_t script = {0};
    buf_str(&script, "__swebox_run; printf '\\n");
    buf_str(&script, token);
    buf_str(&script, " %d\\n' $?\n");
    for (size_t off = 0; off < script.len;) { /* a dead shell: the read loop below sees EOF */
        ssize_t n = write(shell.in, script.data + off, script.len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += (size_t)n;
    }
    free(script.data);
    double deadline = started + r->timeout, grace_end = 0;
    size_t scan_from = 0;
    static char chunk[READ_CHUNK];
    for (;;) {
        double now = now_s(), end = grace_end ? grace_end : deadline;
        if (now >= end) {
            if (!grace_end) { /* timeout: kill what the command started, keep the shell */
                timed_out = 1;
                kill_all_but_me(shell.pid, before, nbefore);
                grace_end = now_s() + 1.0;
                continue;
            }
            shell_restart("was stuck in a command that did not end"); /* a builtin loop: replace the shell */
            capture_add(&c, "\n", 1);
            capture_add(&c, shell.note, strlen(shell.note));
            *shell.note = 0;
            restarted = 1;
            break;
        }
        struct pollfd p = {shell.out, POLLIN, 0};
        double wait_ms = (end - now) * 1000 + 1;
        if (poll(&p, 1, wait_ms > 500 ? 500 : (int)wait_ms) <= 0) continue;
        ssize_t n = read(shell.out, chunk, sizeof chunk);
        if (n < 0) continue;
        if (n == 0) { /* EOF: the shell exited or was killed */
            int status = 0;
            pid_t pid = waitpid(shell.pid, &status, 0);
            int code = pid < 0 ? -1 : WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
            char how[64];
            snprintf(how, sizeof how, "exited with status %d", code);
            shell_restart(how);
            capture_add(&c, "\n", 1);
            capture_add(&c, shell.note, strlen(shell.note));
            *shell.note = 0;
            restarted = has_exit = 1;
            exit_code = code;
            break;
        }
        capture_add(&c, chunk, (size_t)n);
        int status;
        if (find_marker(&c, marker, (size_t)mlen, &scan_from, &cut_from, &cut_to, &status)) {
            exit_code = status;
            has_exit = 1;
            break; /* bytes after the marker (a background job's output) stay in the output */
        }
    }
    if (timed_out) {
        char note[128];
        has_exit = 0;
        snprintf(note, sizeof note, "\n[swebox: the command timed out after %g s and was killed]\n", r->timeout);
        capture_add(&c, note, strlen(note));
    }
    reap_zombies();
reply:;
    buf_t text = {0}, json = {0};
    int truncated;
    capture_text(&c, cut_from, cut_to, &text, &truncated);
    char fields[256];
    if (has_exit) snprintf(fields, sizeof fields, "{\"exit_code\":%d,", exit_code);
    else snprintf(fields, sizeof fields, "{\"exit_code\":null,");
    buf_str(&json, fields);
    snprintf(fields, sizeof fields, "\"timed_out\":%s,\"truncated\":%s,\"duration_s\":%.6f,\"shell_restarted\":%s,"
             "\"output_bytes\":%zu}", timed_out ? "true" : "false", truncated ? "true" : "false", now_s() - started,
             restarted ? "true" : "false", text.len);
    buf_str(&json, fields);
    send_message(opts->sock, &json, text.data, text.len);
    free(text.data);
    free(json.data);
    free(c.head.data);
    free(c.tail.data);
}

/* -- the session's main loop: one request, one reply, until the host goes away -------------------------- */
void serve(const options_t *o) {
    opts = o;
    half = o->max_output / 2 ? o->max_output / 2 : 1;
    prctl(PR_SET_NAME, "supervisor"); /* what `ps` inside shows, not the cached binary's hashed name */
    /* In a PID namespace the kernel drops a signal to pid 1 from inside it unless pid 1 handles it; ignoring
     * them all also keeps the supervisor alive for signals from the host that are not SIGKILL. */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) set_disposition(sig, sig == SIGCHLD ? SIG_DFL : SIG_IGN);
    sigset_t child_signal;
    sigemptyset(&child_signal);
    sigaddset(&child_signal, SIGCHLD);
    sigprocmask(SIG_BLOCK, &child_signal, NULL);
    int children = signalfd(-1, &child_signal, SFD_NONBLOCK | SFD_CLOEXEC);
    shell_start("/");
    buf_t ready = {0};
    buf_str(&ready, "{\"op\":\"ready\",\"seccomp\":");
    buf_json_string(&ready, o->seccomp_note);
    buf_str(&ready, "}");
    send_message(o->sock, &ready, NULL, 0);
    free(ready.data);
    reap_zombies();
    for (;;) {
        /* idle, this blocks: it wakes for a request or a SIGCHLD (a process reparented to pid 1 died) */
        struct pollfd fds[2] = {{o->sock, POLLIN, 0}, {children, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) continue;
        if (fds[1].revents) {
            struct signalfd_siginfo info;
            while (read(children, &info, sizeof info) > 0) {}
            reap_zombies();
        }
        if (!fds[0].revents) continue;
        request_t r;
        recv_request(o->sock, &r);
        if (r.has_op && !strcmp(r.op.data ? r.op.data : "", "exec")) exec_command(&r);
        else if (r.has_op && !strcmp(r.op.data ? r.op.data : "", "run")) run_host_command(o, &r);
        else {
            buf_t why = {0};
            buf_str(&why, "unknown request ");
            if (r.has_op) { buf_str(&why, "'"); buf_str(&why, r.op.data ? r.op.data : ""); buf_str(&why, "'"); }
            else buf_str(&why, "None");
            send_error(o->sock, why.data);
            free(why.data);
        }
        free_request(&r);
    }
}
