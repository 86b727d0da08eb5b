/* Folder and mount helpers that nsinit's setup (nsinit.c) and a session's (session.c) share. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "session.h"

int mkdir_p(const char *path) {
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(copy, 0755);
        *p = '/';
    }
    return mkdir(copy, 0755) && errno != EEXIST ? -1 : 0;
}

int bind_readonly(const char *src, const char *dst) {
    static const struct { unsigned long st, ms; } locked[] = {
        {ST_NOSUID, MS_NOSUID}, {ST_NODEV, MS_NODEV}, {ST_NOEXEC, MS_NOEXEC}, {ST_NOATIME, MS_NOATIME},
        {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME}};
    struct statvfs st;
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) || statvfs(dst, &st)) return -1;
    unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY;
    for (size_t i = 0; i < sizeof locked / sizeof *locked; i++) if (st.f_flag & locked[i].st) flags |= locked[i].ms;
    return mount(NULL, dst, NULL, flags, NULL);
}
