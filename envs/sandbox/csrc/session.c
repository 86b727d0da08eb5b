/* A sandbox's shell session: started by nsinit (nsinit.c, init.c) for each session, in nsinit's namespaces.
 *
 * A process can put only its children in a new PID namespace, so this program starts as the starter: it
 * unshares the PID namespace, forks the session's pid 1, writes pid 1's host pid to nsinit and exits. nsinit,
 * the subreaper, reaps it and inherits pid 1, then sends pid 1 a NUL byte on the session's socket. pid 1 asks
 * for SIGKILL at its parent's death only after that byte, because the kernel sends that signal at reparenting
 * too; EOF instead means nsinit died first.
 *
 * pid 1 then finishes the session's root (fresh /proc, /dev, private /tmp and /dev/shm, read-only binds of the
 * host's system folders), pivots into it, forbids nested user namespaces, drops every capability, sets
 * no_new_privs, installs the seccomp filter the host built (seccomp.py), which everything it starts inherits and
 * nothing inside can take off, and serves the host as the shell supervisor (supervisor.c). All of it in C, so
 * that a session costs no Python interpreter: not its start, nor its pages while it idles.
 *
 * A step that fails is reported on the session's socket as {"error": "session setup failed: ..."}.
 *
 * The same binary is the host's zygote when its arguments are `zygote FD` (zygote.c): the nsinit it forks for
 * each sandbox (nsinit.c, init.c) starts the sessions as this program's starter.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "session.h"

#define SECURE_BITS_LOCKDOWN 0xef /* noroot, no_setuid_fixup, keep_caps off, no_cap_ambient_raise: locked */

static options_t o;

static void fail(const char *step) __attribute__((noreturn));
static void fail(const char *step) {
    char text[4096 + 256];
    snprintf(text, sizeof text, "session setup failed: %s: %s", step, strerror(errno));
    send_error(o.sock, text);
    _exit(1);
}

static void mount_or_fail(const char *source, const char *target, const char *type, unsigned long flags,
                          const char *data) {
    if (mount(source, target, type, flags, data)) {
        char step[4096 + 64];
        snprintf(step, sizeof step, "mount %s on %s", source ? source : type, target);
        fail(step);
    }
}

static const char *under_root(const char *path) {
    static char buf[2][4096 + 1];
    static int turn;
    char *out = buf[turn ^= 1];
    snprintf(out, sizeof buf[0], "%s%s", o.root, path);
    return out;
}

static void finish_root(void) {
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC)) fail("unshare(CLONE_NEWNS | CLONE_NEWIPC)");
    mount_or_fail(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    /* /proc must be mounted while the host's /proc is still visible (the kernel refuses a fresh proc mount in
     * a user namespace that would reveal more than an existing one) */
    mount_or_fail("proc", under_root("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mount_or_fail(o.dev, under_root("/dev"), NULL, MS_BIND | MS_REC, NULL);
    char tmp[96];
    snprintf(tmp, sizeof tmp, "size=%lum,nr_inodes=%lu,mode=1777", o.tmp_size_mb, o.tmp_inodes);
    mount_or_fail("tmpfs", under_root("/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, tmp);
    mount_or_fail("tmpfs", under_root("/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp);
    mount_or_fail("devpts", under_root("/dev/pts"), "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=620");
    /* binds last, so that one below /tmp (a venv in a checkout under /tmp) sits on the private tmpfs */
    for (int i = 0; i < o.nbinds; i++) {
        const char *at = under_root(o.bind_to[i]);
        mkdir_p(at);
        if (bind_readonly(o.bind_from[i], at)) {
            char step[4096 + 64];
            snprintf(step, sizeof step, "binding %s read-only on %s", o.bind_from[i], o.bind_to[i]);
            fail(step);
        }
    }
    if (chdir(o.root) || syscall(SYS_pivot_root, ".", ".") || umount2(".", MNT_DETACH) || chdir("/"))
        fail("pivot_root into the session's root");
    /* no nested user namespaces: they would hand the agent fresh capabilities to play with */
    int fd = open("/proc/sys/user/max_user_namespaces", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "0", 1) < 0) {} /* best effort: the seccomp filter denies namespace flags as well */
        close(fd);
    }
}

/* Empty the bounding, ambient, effective, permitted and inheritable sets and lock root's special powers: with
 * an empty bounding set, a later execve as uid 0 gains no capabilities, and the locked securebits stop uid 0
 * from regaining them by any other rule. */
static void drop_privileges(void) {
    prctl(PR_SET_SECUREBITS, SECURE_BITS_LOCKDOWN); /* without CAP_SETPCAP the bounding set still holds */
    int last = 40;
    FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
    if (f) {
        if (fscanf(f, "%d", &last) != 1) last = 40;
        fclose(f);
    }
    for (int cap = 0; cap <= last; cap++) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) fail("clearing the ambient capabilities");
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {{0, 0, 0}, {0, 0, 0}};
    if (syscall(SYS_capset, &header, data)) fail("capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) fail("no_new_privs");
    /* the agent (same uid, no capabilities) must not ptrace its supervisor. Rootless, the host itself needs a
     * dumpable pid 1 to reach /proc/PID/root; the agent then gains nothing by tracing it that it does not
     * already have (same uid, no capabilities). */
    if (!o.dumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) fail("PR_SET_DUMPABLE");
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void install_filter(void) {
    size_t len = strlen(o.seccomp_hex);
    if (!len) return;
    if (len % 16) { errno = EINVAL; fail("the seccomp filter (expected 8-byte instructions in hex)"); }
    size_t count = len / 16;
    unsigned char *code = malloc(len / 2);
    if (!code) fail("the seccomp filter");
    for (size_t i = 0; i < len / 2; i++) { /* by hand: sscanf per byte took ~0.1 ms of every session start */
        int high = hex_digit(o.seccomp_hex[2 * i]), low = hex_digit(o.seccomp_hex[2 * i + 1]);
        if (high < 0 || low < 0) { errno = EINVAL; fail("the seccomp filter's hex"); }
        code[i] = (unsigned char)(high << 4 | low);
    }
    struct sock_fprog program = {(unsigned short)count, (struct sock_filter *)code};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0))
        fail("seccomp: installing the filter (the kernel needs CONFIG_SECCOMP_FILTER; or run without it: "
             "SandboxPolicy(seccomp=False))");
    free(code);
}

/* The process's command line as the kernel shows it (/proc/PID/cmdline): main's arguments, which pid 1 blanks,
 * since /proc/1/cmdline is readable inside the sandbox and would show host paths (and, run as a program, the
 * filter) */
static char *command_line;
static size_t command_line_len;

static void hide_command_line(void) {
    memset(command_line, 0, command_line_len);
    snprintf(command_line, command_line_len + 1, "supervisor");
}

static void pid1(void) __attribute__((noreturn));
static void pid1(void) {
    hide_command_line();
    char byte = 1;
    if (read(o.sock, &byte, 1) != 1 || byte) _exit(1);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)) fail("PR_SET_PDEATHSIG");
    finish_root();
    if (prepare_command_channel()) fail("memfd_create for the command channel");
    drop_privileges();
    install_filter();
    serve(&o);
}

static void parse(int argc, char **argv) {
    static const struct option options[] = {
        {"socket", 1, 0, 's'}, {"pid-pipe", 1, 0, 'p'}, {"root", 1, 0, 'r'}, {"dev", 1, 0, 'd'},
        {"tmp-size-mb", 1, 0, 't'}, {"bind-from", 1, 0, 'f'}, {"bind-to", 1, 0, 'b'}, {"max-output", 1, 0, 'm'},
        {"dumpable", 1, 0, 'u'}, {"workdir", 1, 0, 'w'}, {"rlimit", 1, 0, 'l'}, {"seccomp-note", 1, 0, 'n'},
        {"seccomp-filter", 1, 0, 'x'}, {"tmp-inodes", 1, 0, 'i'}, {0, 0, 0, 0}};
    o = (options_t){.sock = -1, .pid_pipe = -1, .workdir = "/", .seccomp_note = "", .seccomp_hex = "",
                    .tmp_inodes = 131072};
    o.bind_from = calloc((size_t)argc, sizeof *o.bind_from);
    o.bind_to = calloc((size_t)argc, sizeof *o.bind_to);
    o.limits = calloc((size_t)argc, sizeof *o.limits);
    int nfrom = 0, c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (c) {
        case 's': o.sock = atoi(optarg); break;
        case 'p': o.pid_pipe = atoi(optarg); break;
        case 'r': o.root = optarg; break;
        case 'd': o.dev = optarg; break;
        case 't': o.tmp_size_mb = strtoul(optarg, NULL, 10); break;
        case 'i': o.tmp_inodes = strtoul(optarg, NULL, 10); break;
        case 'f': o.bind_from[nfrom++] = optarg; break;
        case 'b': o.bind_to[o.nbinds++] = optarg; break;
        case 'm': o.max_output = strtoull(optarg, NULL, 10); break;
        case 'u': o.dumpable = atoi(optarg); break;
        case 'w': o.workdir = optarg; break;
        case 'l': o.limits[o.nlimits++] = optarg; break;
        case 'n': o.seccomp_note = optarg; break;
        case 'x': o.seccomp_hex = optarg; break;
        default: exit(2);
        }
    }
    if (o.sock < 0 || o.pid_pipe < 0 || !o.root || !o.dev || nfrom != o.nbinds || optind != argc) {
        fprintf(stderr, "usage: %s --socket FD --pid-pipe FD --root DIR --dev DIR [--tmp-size-mb N] [--tmp-inodes N] [--bind-from "
                "DIR --bind-to PATH]... [--max-output N] [--dumpable 0|1] [--workdir PATH] [--rlimit RES=N]... "
                "[--seccomp-note TEXT] [--seccomp-filter HEX]\n(nsinit.py runs it; it is not a command for people)\n",
                argv[0]);
        exit(2);
    }
}

int fork_retrying(void) {
    for (int attempt = 0;; attempt++) {
        pid_t pid = fork();
        if (pid >= 0 || errno != EAGAIN || attempt == 1000) return pid;
        usleep(10000);
    }
}

/* The starter, with `o` parsed: unshare the PID namespace, fork pid 1, say its pid, exit (never returns) */
static void start(void) __attribute__((noreturn));
static void start(void) {
    /* nsinit's descriptors: only ours are for the session (nsinit's control socket is not) */
    int keep = o.sock > o.pid_pipe ? o.sock : o.pid_pipe;
    for (int fd = 3; fd < keep; fd++) if (fd != o.sock && fd != o.pid_pipe) close(fd);
    if (syscall(SYS_close_range, keep + 1, ~0u, 0)) for (int fd = keep + 1; fd < 65536; fd++) close(fd);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)) fail("PR_SET_PDEATHSIG");
    if (unshare(CLONE_NEWPID)) fail("unshare(CLONE_NEWPID)");
    pid_t child = fork_retrying();
    if (child < 0) fail("fork of the session's pid 1");
    if (child == 0) {
        close(o.pid_pipe);
        pid1();
    }
    dprintf(o.pid_pipe, "%d", child);
    _exit(0);
}

void start_session(char **args, int nargs, const char *root, int sock, int pid_pipe, char **env) {
    char sock_fd[16], pipe_fd[16];
    snprintf(sock_fd, sizeof sock_fd, "%d", sock);
    snprintf(pipe_fd, sizeof pipe_fd, "%d", pid_pipe);
    char **argv = calloc((size_t)nargs + 8, sizeof *argv);
    int n = 0;
    argv[n++] = "session";
    for (int i = 0; i < nargs; i++) argv[n++] = args[i];
    char *tail[] = {"--root", (char *)root, "--socket", sock_fd, "--pid-pipe", pipe_fd};
    for (int i = 0; i < 6; i++) argv[n++] = tail[i];
    optind = 0; /* a fresh parse (glibc): nsinit parsed its own command line before */
    parse(n, argv);
    environ = env; /* the policy's: bash and everything it starts inherit it */
    sigset_t none; /* nsinit's SIGCHLD block and ignored SIGPIPE are not the session's */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    start();
}

int main(int argc, char **argv) {
    command_line = argv[0];
    command_line_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]);
    if (argc == 3 && !strcmp(argv[1], "zygote")) zygote_main(atoi(argv[2]));
    /* run as a program, the starter parses a copy: pid 1 blanks the originals */
    char **copy = calloc((size_t)argc + 1, sizeof *copy);
    for (int i = 0; i < argc; i++) copy[i] = strdup(argv[i]);
    parse(argc, copy);
    start();
}
