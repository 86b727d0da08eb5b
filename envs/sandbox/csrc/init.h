/* nsinit's C half: what init.c (the sessions and the request loop) and root.c (a slot's root, and the
 * processes it starts) share. See init.c for the whole picture. */
#ifndef SWEBOX_INIT_H
#define SWEBOX_INIT_H

#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

/* how nsinit serves the sandbox: its command line (nsinit.c parses it) */
typedef struct {
    int ctl;                       /* the control socket: the host's end is the other */
    const char *staging;           /* the staging tmpfs (our working folder): skel, E, L<i>, rw<slot>, root<slot> */
    const char *backend;           /* overlay, fuse-overlayfs or extract */
    const char *lowerdir;          /* overlay's lowerdir, relative to the staging folder, topmost first */
    unsigned long upper_size_mb;   /* a slot's writable tmpfs (extract: the layers' copy too) */
    unsigned long upper_inodes;    /* its nr_inodes (extract: the layers' entries too) */
    int warm_reset;                /* prepare the session after the next (overlay only) */
    char **session_args, **env;    /* a session's fixed options (session.c); its environment (the policy's) */
    char **extract;                /* extract: the helper's command line, to which the target is appended */
    int nsession_args, nextract;
} init_config_t;

extern init_config_t cfg;
extern char failure[4096]; /* why the last step failed: the reply's text */

/* Say why a step failed (with strerror(errno) when errno is set); returns -1 */
int failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int vfailed(const char *fmt, va_list ap);

void reap(int block); /* every child that has exited; with `block`, until none is left */
int spawn(pid_t *pid, char **argv, char **env, const posix_spawn_file_actions_t *actions);
void read_tail(int fd, char *text, size_t size);

int mount_root(int slot);
void serve_sandbox(void) __attribute__((noreturn)); /* with the namespaces and static mounts in place */
int unmount_root(int slot);

#endif
