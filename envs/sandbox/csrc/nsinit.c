/* nsinit: the process that owns one sandbox's namespaces and its filesystem; its setup.
 *
 * The zygote (zygote.c) forks it for each sandbox with the host's command line (nsinit_args.py builds it) and
 * its control socket. It joins its cgroup v1 folders, creates the user namespace (the host writes the id maps
 * and sends the id-mapped lowers, or nsinit maps itself when rootless), then mount, network, IPC and UTS
 * namespaces, and mounts the parts every session shares in a staging tmpfs: the /etc layer, the layers and the
 * binds' sources, read-only, a skeleton of mount points, a /dev. Then it serves the sandbox (init.c): each
 * session's root, the sessions, resets and close; the namespaces and mounts vanish with it.
 *
 * All of it in the zygote's fork, with no exec and no interpreter: a start costs one fork of a small program,
 * and an idle sandbox holds only its own few dirty pages.
 *
 * A step that fails is reported on the control socket as {"error": "<step>: <reason>"}, and nsinit exits; the
 * host removes what it left (its working folder, the cgroups), and its mounts vanish with its namespace.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "init.h"
#include "session.h"

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#define MAX_TREES 64

static const char *const DEVICES[] = {"null", "zero", "full", "random", "urandom", "tty"};

/* the nsinit part of the command line (the rest is init.c's cfg) */
static struct {
    const char *hostname, *etc;
    const char **layers, **bind_dirs, **bind_at, **cgroups, **link_at, **link_to, **pythons;
    int nlayers, nbind_dirs, ncgroups, nlinks, npythons;
    int map_self, layer_idmap, dumpable, user_network;
    uid_t outer_uid, owner;
    gid_t outer_gid;
} o;

static int go_fd = -1;                 /* the zygote's word that we are in the cgroups it moves us into */
static pid_t layer_ns_pid;             /* the helper whose user namespace id-maps the layers (root only) */
static int layer_ns_hold = -1;         /* it lives until we close this */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfailed(fmt, ap);
    va_end(ap);
    send_error(cfg.ctl, failure);
    _exit(1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) fail("writing %s", path);
    close(fd);
}

/* -- cgroups -------------------------------------------------------------------------------------------- */
/* cgroup v1: "0" into `tasks` moves only the calling thread, which the kernel does without its global threadgroup
 * lock, so it never waits for an RCU grace period (0.5 ms for three controllers, against 6-16 ms through
 * cgroup.procs after an idle moment). A fresh fork has one thread: the thread is the whole process. */
static void join_own_cgroups(void) {
    for (int i = 0; i < o.ncgroups; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/tasks", o.cgroups[i]);
        if (!access(path, F_OK)) write_file(path, "0");
    }
}

/* Before our first process: every process of the sandbox must be in its cgroups (the zygote moves us into the
 * cgroup v2 ones meanwhile) */
static void wait_for_cgroups(void) {
    if (go_fd < 0) return;
    char word[512] = {0};
    ssize_t n = read(go_fd, word, sizeof word - 1);
    close(go_fd);
    go_fd = -1;
    if (n != 1 || word[0] != '1') {
        errno = 0;
        fail("could not move nsinit into its cgroups: %s", n > 1 ? word + 1 : "the zygote died");
    }
}

/* -- namespaces ----------------------------------------------------------------------------------------- */
/* A child in a user namespace of its own, for the host to map the layer ids onto our id block with and id-map
 * the layers owned by them (uidslots.py). It lives until we close our end of its pipe (or die). */
static void fork_layer_namespace(void) {
    wait_for_cgroups();
    int hold[2], ready[2];
    if (pipe2(hold, O_CLOEXEC) || pipe2(ready, O_CLOEXEC)) fail("pipe");
    pid_t pid = fork_retrying();
    if (pid < 0) fail("fork of the layer id-map helper");
    if (pid == 0) {
        char byte;
        close(hold[1]);
        close(ready[0]);
        if (!unshare(CLONE_NEWUSER) && write(ready[1], "1", 1) == 1) (void)!read(hold[0], &byte, 1);
        _exit(0);
    }
    close(hold[0]);
    close(ready[1]);
    char byte;
    ssize_t n = read(ready[0], &byte, 1);
    close(ready[0]);
    if (n != 1) { errno = 0; fail("could not create the user namespace that id-maps the layers"); }
    layer_ns_pid = pid;
    layer_ns_hold = hold[1];
}

/* The user namespace, owned by the sandbox's own host uid (its per-user kernel budgets are its own,
 * uidslots.py), with the host's maps and the lowers it cloned for us, read-only and id-mapped; rootless, we map
 * ourselves and bind the trees as they are. Returns the number of lowers received (their fds in `lowers`). */
static int enter_user_namespace(int *lowers, int ntrees) {
    int n = 0;
    if (!o.map_self) {
        if (setgroups(0, NULL) || setresgid(o.owner, o.owner, o.owner) || setresuid(o.owner, o.owner, o.owner))
            fail("becoming the namespace's owner uid %u", o.owner);
        if (o.layer_idmap) fork_layer_namespace();
    }
    if (unshare(CLONE_NEWUSER)) fail("unshare(CLONE_NEWUSER)");
    if (o.map_self) {
        char map[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "0 %u 1", o.outer_uid);
        write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "0 %u 1", o.outer_gid);
        write_file("/proc/self/gid_map", map);
    } else {
        char text[96];
        snprintf(text, sizeof text, "{\"op\":\"userns_ready\",\"layer_ns_pid\":%d}", (int)layer_ns_pid);
        buf_t json = {0};
        buf_str(&json, text);
        if (send_message(cfg.ctl, &json, NULL, 0)) _exit(1); /* the host is gone */
        free(json.data);
        request_t r;
        if (read_request_fds(cfg.ctl, &r, lowers, MAX_TREES, &n)) _exit(1);
        free_request(&r);
        if (n != ntrees) { errno = 0; fail("expected %d lowers from the host, found %d", ntrees, n); }
        if (layer_ns_pid) { /* the id-mapped mounts keep their mapping: the namespace is no longer needed */
            close(layer_ns_hold);
            waitpid(layer_ns_pid, NULL, 0);
        }
    }
    if (setresgid(0, 0, 0) || setresuid(0, 0, 0)) fail("becoming the namespace's root");
    return n;
}

static int loopback_up(void) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    int rc = s < 0 || ioctl(s, SIOCSIFFLAGS, &ifr) ? -1 : 0;
    if (s >= 0) close(s);
    return rc;
}

int spare_network(void) {
    int here = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), made = -1;
    if (here < 0) return -1;
    if (!unshare(CLONE_NEWNET)) {
        if (!loopback_up()) made = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (setns(here, CLONE_NEWNET)) _exit(1); /* not back in our own: the host starts a new zygote */
    }
    close(here);
    return made;
}

/* The spare network namespace the zygote made for us (host root's, its loopback up), joined while we are still
 * host root; with network="user" we make our own instead, which slirp4netns joins through our user namespace */
static int join_spare_network(int net) {
    if (net < 0) return 0;
    int joined = !o.user_network && !setns(net, CLONE_NEWNET);
    close(net);
    return joined;
}

/* Mount, IPC, UTS and always a network namespace of our own (network="user": the host attaches slirp4netns) */
static void enter_other_namespaces(int have_network) {
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (have_network ? 0 : CLONE_NEWNET)))
        fail("unshare the other namespaces");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) fail("making our mounts private");
    if (sethostname(o.hostname, strlen(o.hostname))) fail("sethostname");
    if (!have_network && loopback_up()) fail("bringing up the loopback interface");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) fail("PR_SET_CHILD_SUBREAPER");
}

/* -- the static part of the filesystem, in the staging tmpfs (our working folder) ----------------------- */
static void attach(int fd, const char *source, const char *target) {
    if (mkdir(target, 0755)) fail("mkdir %s", target);
    if (fd >= 0) {
        if (syscall(SYS_move_mount, fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH))
            fail("attaching %s", source);
        close(fd);
    } else if (bind_readonly(source, target)) {
        fail("binding %s read-only", source);
    }
}

/* The lowest layer: mount points for the binds (the minimal /etc is the host's etc layer, just above) */
static void build_skeleton(void) {
    static const char *const dirs[] = {"proc", "dev", "tmp", "root", "etc", "sys", "run", "var/tmp", "home"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "skel/%s", dirs[i]);
        if (mkdir_p(path)) fail("mkdir %s", path);
    }
    if (chmod("skel/tmp", 01777) || chmod("skel/var/tmp", 01777) || chmod("skel/root", 0700)) fail("chmod skel");
    for (int i = 0; i < o.nbind_dirs; i++) {
        snprintf(path, sizeof path, "skel%s", o.bind_at[i]);
        if (mkdir_p(path)) fail("mkdir %s", path);
    }
    for (int i = 0; i < o.nlinks; i++) {
        snprintf(path, sizeof path, "skel%s", o.link_at[i]);
        char *slash = strrchr(path, '/');
        *slash = 0;
        if (mkdir_p(path)) fail("mkdir %s", path);
        *slash = '/';
        if (symlink(o.link_to[i], path)) fail("symlink %s", path);
    }
}

static void build_dev(void) {
    static const char *const links[][2] = {{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
        {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"}};
    char path[PATH_MAX], host[64];
    if (mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=1m,mode=0755")) fail("mount tmpfs on dev");
    for (size_t i = 0; i < sizeof DEVICES / sizeof *DEVICES; i++) {
        snprintf(path, sizeof path, "dev/%s", DEVICES[i]);
        snprintf(host, sizeof host, "/dev/%s", DEVICES[i]);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) fail("creating %s", path);
        close(fd);
        if (mount(host, path, NULL, MS_BIND, NULL)) fail("binding %s", host);
    }
    if (mkdir("dev/pts", 0755) || mkdir("dev/shm", 0755)) fail("mkdir dev/pts, dev/shm");
    for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
        snprintf(path, sizeof path, "dev/%s", links[i][0]);
        if (symlink(links[i][1], path)) fail("symlink %s", path);
    }
}

static void build_static(int *lowers, int nlowers) {
    if (mount("tmpfs", cfg.staging, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=0755"))
        fail("mount tmpfs on %s", cfg.staging);
    if (chdir(cfg.staging)) fail("chdir %s", cfg.staging);
    static const char *const dirs[] = {"skel", "rw0", "root0", "rw1", "root1", "dev"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) if (mkdir(dirs[i], 0755)) fail("mkdir %s", dirs[i]);
    /* the lowers come in this order: the etc layer, the layers, the binds' folders (nsinit_args.trees) */
    int next = 0;
    char name[32];
    attach(nlowers ? lowers[next++] : -1, o.etc, "E");
    for (int i = 0; i < o.nlayers; i++) {
        snprintf(name, sizeof name, "L%d", i);
        attach(nlowers ? lowers[next++] : -1, o.layers[i], name);
    }
    for (int i = 0; i < o.nbind_dirs; i++) {
        snprintf(name, sizeof name, "B%d", i);
        attach(nlowers ? lowers[next++] : -1, o.bind_dirs[i], name);
    }
    build_skeleton();
    build_dev();
}

/* extract: the first interpreter the sandbox's uid may run (ours may sit in a folder only host root can enter,
 * a pyenv build under /root; the system's is where Debian puts it) runs extract.py */
static void choose_extract_python(void) {
    if (!cfg.nextract) return;
    for (int i = 0; i < o.npythons; i++) {
        if (!access(o.pythons[i], X_OK)) {
            cfg.extract[0] = (char *)o.pythons[i];
            return;
        }
    }
    errno = 0;
    fail("the extract backend copies the layers with a Python the sandbox's uid can run, and may run none of %s"
         "%s: install python3 or use the overlay backend", o.npythons ? o.pythons[0] : "(none given)",
         o.npythons > 1 ? " and the others" : "");
}

/* -- the command line ----------------------------------------------------------------------------------- */
static void parse(int argc, char **argv) {
    static const struct option options[] = {
        {"ctl", 1, 0, 'c'}, {"staging", 1, 0, 's'}, {"backend", 1, 0, 'b'},
        {"upper-size-mb", 1, 0, 'u'}, {"lowerdir", 1, 0, 'l'}, {"warm-reset", 1, 0, 'w'}, {"dumpable", 1, 0, 'd'},
        {"env", 1, 0, 'e'}, {"extract-python", 1, 0, 'y'}, {"extract-arg", 1, 0, 'x'}, {"map-self", 1, 0, 'm'},
        {"outer-uid", 1, 0, 'U'}, {"outer-gid", 1, 0, 'G'}, {"owner", 1, 0, 'o'}, {"layer-idmap", 1, 0, 'i'},
        {"hostname", 1, 0, 'h'}, {"cgroup", 1, 0, 'g'}, {"etc", 1, 0, 'E'}, {"layer", 1, 0, 'L'},
        {"bind-dir", 1, 0, 'B'}, {"bind-at", 1, 0, 'A'}, {"symlink-at", 1, 0, 'S'}, {"symlink-to", 1, 0, 'T'},
        {"network", 1, 0, 'n'}, {"upper-inodes", 1, 0, 'I'}, {0, 0, 0, 0}};
    size_t slots = (size_t)argc + 2;
    cfg.env = calloc(slots, sizeof *cfg.env);
    cfg.extract = calloc(slots, sizeof *cfg.extract);
    o.bind_at = calloc(slots, sizeof *o.bind_at);
    o.layers = calloc(slots, sizeof *o.layers);
    o.bind_dirs = calloc(slots, sizeof *o.bind_dirs);
    o.cgroups = calloc(slots, sizeof *o.cgroups);
    o.link_at = calloc(slots, sizeof *o.link_at);
    o.link_to = calloc(slots, sizeof *o.link_to);
    o.pythons = calloc(slots, sizeof *o.pythons);
    cfg.ctl = -1;
    cfg.upper_inodes = 262144; /* SandboxPolicy.upper_inodes's default; never 0, which tmpfs takes for no limit */
    cfg.nextract = 0;
    o.hostname = "sandbox";
    int c, nenv = 0, nlink_to = 0, nbind_at = 0;
    optind = 0; /* a fresh parse (glibc) */
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (c) {
        case 'c': cfg.ctl = atoi(optarg); break;
        case 's': cfg.staging = optarg; break;
        case 'b': cfg.backend = optarg; break;
        case 'u': cfg.upper_size_mb = strtoul(optarg, NULL, 10); break;
        case 'I': cfg.upper_inodes = strtoul(optarg, NULL, 10); break;
        case 'l': cfg.lowerdir = optarg; break;
        case 'w': cfg.warm_reset = atoi(optarg); break;
        case 'd': o.dumpable = atoi(optarg); break;
        case 'e': cfg.env[nenv++] = optarg; break;
        case 'y': o.pythons[o.npythons++] = optarg; break;
        case 'x': if (!cfg.nextract) cfg.nextract = 1; /* [0]: the interpreter, chosen later */
                  cfg.extract[cfg.nextract++] = optarg; break;
        case 'm': o.map_self = atoi(optarg); break;
        case 'U': o.outer_uid = (uid_t)strtoul(optarg, NULL, 10); break;
        case 'G': o.outer_gid = (gid_t)strtoul(optarg, NULL, 10); break;
        case 'o': o.owner = (uid_t)strtoul(optarg, NULL, 10); break;
        case 'i': o.layer_idmap = atoi(optarg); break;
        case 'h': o.hostname = optarg; break;
        case 'g': o.cgroups[o.ncgroups++] = optarg; break;
        case 'E': o.etc = optarg; break;
        case 'L': o.layers[o.nlayers++] = optarg; break;
        case 'B': o.bind_dirs[o.nbind_dirs++] = optarg; break;
        case 'A': o.bind_at[nbind_at++] = optarg; break;
        case 'S': o.link_at[o.nlinks++] = optarg; break;
        case 'T': o.link_to[nlink_to++] = optarg; break;
        case 'n': o.user_network = !strcmp(optarg, "user"); break;
        default: exit(2);
        }
    }
    if (cfg.ctl < 0 || !cfg.staging || !cfg.backend || !cfg.lowerdir || !o.etc ||
        nbind_at != o.nbind_dirs || nlink_to != o.nlinks || o.nlayers + o.nbind_dirs + 1 > MAX_TREES) {
        fprintf(stderr, "nsinit: an incomplete command line (nsinit_args.py builds it; it is not for people)\n");
        exit(2);
    }
    cfg.session_args = argv + optind;
    cfg.nsession_args = argc - optind;
}

void nsinit_main(int argc, char **argv, int go, int net) {
    go_fd = go;
    parse(argc, argv);
    prctl(PR_SET_NAME, "nsinit");
    join_own_cgroups();
    int have_network = join_spare_network(net);
    int lowers[MAX_TREES];
    int nlowers = enter_user_namespace(lowers, o.map_self ? 0 : 1 + o.nlayers + o.nbind_dirs);
    /* rootless, the host reaches /proc/PID/root only of a dumpable process; a change of ids has just reset it */
    if (prctl(PR_SET_DUMPABLE, o.dumpable, 0, 0, 0)) fail("PR_SET_DUMPABLE");
    enter_other_namespaces(have_network);
    build_static(lowers, nlowers);
    choose_extract_python();
    wait_for_cgroups(); /* processes start from here on: sessions, fuse-overlayfs, extract's cp and tar */
    serve_sandbox();
}
