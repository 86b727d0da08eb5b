/* A sandbox session in C: what session.c (its setup), supervisor.c (its shell and the exec protocol) and
 * message.c (the host's messages) share. See session.c for the whole picture. */
#ifndef SWEBOX_SESSION_H
#define SWEBOX_SESSION_H

#include <stddef.h>
#include <sys/types.h>

/* The session's configuration: nsinit's command line (session.c parses it) */
typedef struct {
    int sock;                 /* the session's socket: the host's end is the other */
    int pid_pipe;             /* where the starter writes pid 1's host pid */
    const char *root;         /* the slot's root, in nsinit's mount namespace */
    const char *dev;          /* the /dev nsinit prepared */
    unsigned long tmp_size_mb;
    unsigned long tmp_inodes; /* nr_inodes of /tmp and /dev/shm each */
    const char **bind_from, **bind_to;
    int nbinds;
    size_t max_output;        /* bytes of a command's output kept: the first and last half */
    int dumpable;             /* rootless: the host reaches /proc/PID/root only of a dumpable pid 1 */
    const char *workdir;
    char **limits;            /* "RESOURCE=LIMIT", for the shell */
    int nlimits;
    const char *seccomp_note; /* what the filter does, for limits_in_force() */
    const char *seccomp_hex;  /* the filter, struct sock_filter[] in hex; empty: none */
} options_t;

/* A growable byte string, always NUL-terminated */
typedef struct {
    char *data;
    size_t len, cap;
} buf_t;

void buf_add(buf_t *b, const void *data, size_t len);
void buf_str(buf_t *b, const char *s);
void buf_json_string(buf_t *b, const char *s);

/* A message: a flat JSON object; a request's command as UTF-8 bytes (surrogateescape); a reply's error */
typedef struct {
    buf_t op, command, error;
    int has_op, command_error, has_error;
    double timeout;
    double max_output;        /* a host command's ("run") most stdout bytes kept; 0: the default */
    int quiesce;              /* "run": kill every other process of the session first */
    int freeze;               /* "run": stop every other process of the session for the command's time */
    buf_t payload;            /* raw bytes after the JSON: their count is its "payload_bytes" */
} request_t;

/* Replies: -1 when the peer is gone (its next read sees EOF) */
int send_message(int sock, const buf_t *json, const void *extra, size_t extra_len);
int send_message_fd(int sock, const buf_t *json, int fd);
int send_error(int sock, const char *text);
int read_request(int sock, request_t *r); /* -1 on EOF or garbage */
/* the same, with the file descriptors that came with it (at most `max`, in fds[0..*nfds)) */
int read_request_fds(int sock, request_t *r, int *fds, int max, int *nfds);
void recv_request(int sock, request_t *r); /* exits on EOF or garbage: the session ends with the host */
void free_request(request_t *r);

/* fork(), retried for up to 10 s while it fails with EAGAIN: the process limit may still be full of the dying
 * processes of a session just killed (a fork bomb's), which the kernel counts until they are reaped */
int fork_retrying(void);

/* A sandbox's nsinit (nsinit.c), in a fresh fork of the zygote: its command line, the pipe on which the zygote
 * says it has moved us into the cgroups that we do not join ourselves (-1: none), and a network namespace the
 * zygote made ahead of time (-1: none) */
void nsinit_main(int argc, char **argv, int go, int net) __attribute__((noreturn));

/* A new network namespace with its loopback up, for the next nsinit: creating one is ~0.6 ms of a start, so the
 * zygote makes it ahead of time. -1 where we may not (rootless) */
int spare_network(void);

/* A session's starter (session.c), in a fresh fork of nsinit: the session program's fixed options `args`, the
 * slot's root, the session's socket, the pipe for pid 1's host pid, the sessions' environment */
void start_session(char **args, int nargs, const char *root, int sock, int pid_pipe, char **env)
    __attribute__((noreturn));

/* The zygote (zygote.c): forks an nsinit for each of the host's requests on `sock` */
void zygote_main(int sock) __attribute__((noreturn));

/* Bind `src` on `dst` read-only, keeping the flags the kernel locks on binds made in a user namespace; -1 with
 * errno set on failure */
int bind_readonly(const char *src, const char *dst);
int mkdir_p(const char *path); /* and its parents; 0 when it exists */

/* pid 1's life once its root is final: start the shell, say ready, serve until the host goes away */
void serve(const options_t *o) __attribute__((noreturn));

/* The memfd that carries the agent's commands to its shell, made by pid 1 while it may still give it away:
 * owned by an id the agent is not and mode 0, so that no process of the agent opens it through /proc. -1 with
 * errno set when no memfd could be made */
int prepare_command_channel(void);

#define MAX_PIDS 65536 /* most processes a session lists at once */

/* The session's processes (procs.c): its pids (at most `max`); reaping every exited child; SIGKILL to all but
 * pid 1 and `keep` (with `before`, those that existed before a command started survive); SIGSTOP to all but
 * pid 1 that were not stopped already, their pids in `stopped` (returns how many) */
int list_pids(pid_t *pids, int max);
void reap_zombies(void);
void kill_all_but_me(pid_t keep, const pid_t *before, int nbefore);
int freeze_others(pid_t *stopped, int max);

/* A host command ({"op": "run"}): a fresh process forked by pid 1, not the agent's shell (hostrun.c) */
void run_host_command(const options_t *o, const request_t *r);

#endif
