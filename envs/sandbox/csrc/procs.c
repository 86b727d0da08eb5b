/* The session's processes, as pid 1 sees them in its PID namespace: listing, killing and stopping them (for
 * the exec protocol's timeouts in supervisor.c, and the host's commands in hostrun.c). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "session.h"


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The session's /proc, opened once and rewound for each listing: an open and a close less per command */
int list_pids(pid_t *pids, int max) {
    static DIR *d;
    if (!d && !(d = opendir("/proc"))) return 0;
    rewinddir(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*e->d_name && !*end) pids[n++] = (pid_t)pid;
    }
    return n;
}

void reap_zombies(void) { while (waitpid(-1, NULL, WNOHANG) > 0) {} }

static int contains(const pid_t *pids, int n, pid_t pid) {
    for (int i = 0; i < n; i++) if (pids[i] == pid) return 1;
    return 0;
}

/* SIGKILL every process of this PID namespace but pid 1 and `keep`, until none is left; repeated passes catch
 * processes forked while we kill (fork bombs). With `before`, processes that existed before the command started
 * (an earlier command's `nohup ... &` servers) survive. */
void kill_all_but_me(pid_t keep, const pid_t *before, int nbefore) {
    static pid_t pids[MAX_PIDS];
    for (int pass = 0; pass < 200; pass++) {
        int n = list_pids(pids, MAX_PIDS), victims = 0;
        for (int i = 0; i < n; i++) {
            if (pids[i] == 1 || pids[i] == keep || (before && contains(before, nbefore, pids[i]))) continue;
            victims++;
            kill(pids[i], SIGKILL);
        }
        reap_zombies();
        if (!victims) break;
        usleep(1000);
    }
    reap_zombies();
}

/* A process's state letter (R, S, D, T, t, Z, ...) from /proc/PID/stat; 0 when it is gone */
static char state_of(pid_t pid) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = 0;
    char *end = strrchr(text, ')'); /* the command name may hold anything, up to the last ')' */
    return end && end[1] == ' ' ? end[2] : 0;
}

/* SIGSTOP every process but pid 1 that is not stopped already, pass after pass until a pass finds none (a
 * process forked meanwhile is found by the next), then wait (bounded) until each is stopped; returns how many
 * were stopped here, their pids in `stopped`: only those are continued */
int freeze_others(pid_t *stopped, int max) {
    static pid_t pids[MAX_PIDS];
    int n = 0;
    for (int pass = 0; pass < 200; pass++) {
        int count = list_pids(pids, MAX_PIDS), fresh = 0;
        for (int i = 0; i < count && n < max; i++) {
            int known = pids[i] == 1;
            for (int j = 0; j < n && !known; j++) known = stopped[j] == pids[i];
            char state = known ? 0 : state_of(pids[i]);
            if (known || !state || state == 'T' || state == 't' || state == 'Z') continue;
            kill(pids[i], SIGSTOP);
            stopped[n++] = pids[i];
            fresh++;
        }
        if (!fresh) break;
    }
    double until = now_s() + 2.0; /* SIGSTOP is delivered, not waited for: a process mid-syscall runs on briefly */
    for (int i = 0; i < n; i++)
        for (char state; (state = state_of(stopped[i])) && state != 'T' && state != 'Z' && now_s() < until;)
            usleep(200);
    return n;
}
