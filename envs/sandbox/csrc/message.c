/* The host's messages (protocol.py's framing: a 4-byte big-endian length, then UTF-8 JSON) for a session.
 *
 * The host sends flat JSON objects (json.dumps: ASCII, non-ASCII as \\u escapes); this reads their strings,
 * numbers, booleans and null, and hangs up on anything else, as on garbage. Replies are written here too: the
 * exec reply's output travels as raw bytes after the JSON, and the host decodes them. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session.h"

#define MAX_MESSAGE (256u * 1024 * 1024)

static void hang_up(void) { _exit(0); } /* the host went away or spoke garbage: the session ends with us */

void buf_add(buf_t *b, const void *data, size_t len) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len + 1) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) hang_up();
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
}

void buf_str(buf_t *b, const char *s) { buf_add(b, s, strlen(s)); }

/* `s` as a JSON string; bytes outside printable ASCII as \u00XX (notes and paths only: the output is raw) */
void buf_json_string(buf_t *b, const char *s) {
    buf_str(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') { esc[0] = '\\'; esc[1] = (char)*p; buf_add(b, esc, 2); }
        else if (*p < 0x20 || *p >= 0x7f) { snprintf(esc, sizeof esc, "\\u%04x", *p); buf_str(b, esc); }
        else buf_add(b, p, 1);
    }
    buf_str(b, "\"");
}

static int send_all(int sock, const void *data, size_t len) {
    const char *p = data;
    while (len) {
        ssize_t n = send(sock, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void frame(buf_t *whole, const buf_t *json) {
    uint32_t len = htonl((uint32_t)json->len);
    buf_add(whole, &len, 4);
    buf_add(whole, json->data, json->len);
}

/* One write for the whole reply: the host wakes once, not once per piece */
int send_message(int sock, const buf_t *json, const void *extra, size_t extra_len) {
    buf_t whole = {0};
    frame(&whole, json);
    if (extra_len) buf_add(&whole, extra, extra_len);
    int rc = send_all(sock, whole.data, whole.len);
    free(whole.data);
    return rc;
}

/* `fd` rides along with the message as SCM_RIGHTS (protocol.recv takes it from the first chunk) */
int send_message_fd(int sock, const buf_t *json, int fd) {
    buf_t whole = {0};
    frame(&whole, json);
    union { char space[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {whole.data, whole.len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
    ssize_t n;
    while ((n = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
    int rc = n < 0 ? -1 : send_all(sock, whole.data + n, whole.len - (size_t)n);
    free(whole.data);
    return rc;
}

int send_error(int sock, const char *text) {
    buf_t json = {0};
    buf_str(&json, "{\"error\":");
    buf_json_string(&json, text);
    buf_str(&json, "}");
    int rc = send_message(sock, &json, NULL, 0);
    free(json.data);
    return rc;
}

static int read_exact(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* -- the request: a flat JSON object of strings, numbers, booleans and null ---------------------------- */
typedef struct { const char *p, *end; } json_t;

static void skip_ws(json_t *j) { while (j->p < j->end && strchr(" \t\r\n", *j->p) && *j->p) j->p++; }

static int hex4(json_t *j, unsigned *out) {
    if (j->end - j->p < 4) return -1;
    *out = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        *out <<= 4;
        if (c >= '0' && c <= '9') *out |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') *out |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') *out |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    return 0;
}

static void utf8(buf_t *b, unsigned cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = 0xc0 | (cp >> 6); u[1] = 0x80 | (cp & 0x3f); n = 2; }
    else if (cp < 0x10000) { u[0] = 0xe0 | (cp >> 12); u[1] = 0x80 | ((cp >> 6) & 0x3f); u[2] = 0x80 | (cp & 0x3f); n = 3; }
    else { u[0] = 0xf0 | (cp >> 18); u[1] = 0x80 | ((cp >> 12) & 0x3f); u[2] = 0x80 | ((cp >> 6) & 0x3f);
           u[3] = 0x80 | (cp & 0x3f); n = 4; }
    buf_add(b, u, n);
}

/* A JSON string into `out` as the host's text encodes to UTF-8 with surrogateescape: a lone \udc80-\udcff is
 * the raw byte it stands for. NULs are dropped (the command travels NUL-terminated). -1: not a valid string;
 * -2: a lone surrogate that no byte stands for. */
static int json_string(json_t *j, buf_t *out) {
    if (j->p >= j->end || *j->p != '"') return -1;
    j->p++;
    int bad = 0;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        if (c != '\\') { if (c) buf_add(out, &c, 1); continue; }
        if (j->p >= j->end) return -1;
        char e = *j->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) { buf_add(out, &"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"], 1); continue; }
        if (e != 'u') return -1;
        unsigned cp;
        if (hex4(j, &cp)) return -1;
        if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
            json_t look = {j->p + 2, j->end};
            unsigned low;
            if (!hex4(&look, &low) && low >= 0xdc00 && low < 0xe000) {
                j->p = look.p;
                utf8(out, 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00));
                continue;
            }
        }
        if (cp >= 0xdc80 && cp <= 0xdcff) { unsigned char raw = (unsigned char)(cp - 0xdc00); buf_add(out, &raw, 1); }
        else if (cp >= 0xd800 && cp < 0xe000) bad = 1;
        else if (cp) utf8(out, cp);
    }
    if (j->p >= j->end) return -1;
    j->p++;
    return bad ? -2 : 0;
}

static int parse_request(json_t *j, request_t *r, size_t *payload) {
    r->timeout = 60;
    skip_ws(j);
    if (j->p >= j->end || *j->p++ != '{') return -1;
    skip_ws(j);
    if (j->p < j->end && *j->p == '}') return 0;
    for (;;) {
        buf_t key = {0};
        skip_ws(j);
        if (json_string(j, &key)) { free(key.data); return -1; }
        skip_ws(j);
        if (j->p >= j->end || *j->p++ != ':') { free(key.data); return -1; }
        skip_ws(j);
        const char *k = key.data ? key.data : "";
        if (j->p < j->end && *j->p == '"') {
            buf_t value = {0};
            int rc = json_string(j, &value);
            if (rc == -1) { free(key.data); free(value.data); return -1; }
            if (!strcmp(k, "op")) { free(r->op.data); r->op = value; r->has_op = 1; }
            else if (!strcmp(k, "command")) { free(r->command.data); r->command = value; r->command_error = rc == -2; }
            else if (!strcmp(k, "error")) { free(r->error.data); r->error = value; r->has_error = 1; }
            else free(value.data);
        } else {
            const char *start = j->p;
            while (j->p < j->end && !strchr(",} \t\r\n", *j->p)) j->p++;
            if (j->p == start) { free(key.data); return -1; }
            if (!strcmp(k, "timeout")) r->timeout = strtod(start, NULL);
            else if (!strcmp(k, "max_output")) r->max_output = strtod(start, NULL);
            else if (!strcmp(k, "quiesce")) r->quiesce = *start == 't';
            else if (!strcmp(k, "freeze")) r->freeze = *start == 't';
            else if (!strcmp(k, "payload_bytes")) *payload = strtoul(start, NULL, 10);
        }
        free(key.data);
        skip_ws(j);
        if (j->p >= j->end) return -1;
        char c = *j->p++;
        if (c == '}') return 0;
        if (c != ',') return -1;
    }
}

/* The 4-byte header, and the descriptors that ride along with its first byte (protocol.send) */
static int read_header(int sock, uint32_t *len, int *fds, int max, int *nfds) {
    union { char space[CMSG_SPACE(64 * sizeof(int))]; struct cmsghdr align; } control;
    char *p = (char *)len;
    size_t want = 4;
    *nfds = 0;
    while (want) {
        struct iovec iov = {p, want};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                             .msg_controllen = sizeof control.space};
        ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < count; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                if (*nfds < max) fds[(*nfds)++] = fd;
                else close(fd); /* more than the caller takes: not kept open by accident */
            }
        }
        if (n <= 0) return -1;
        p += n;
        want -= (size_t)n;
    }
    *len = ntohl(*len);
    return 0;
}

int read_request_fds(int sock, request_t *r, int *fds, int max, int *nfds) {
    memset(r, 0, sizeof *r);
    uint32_t len;
    int none;
    if (!nfds) nfds = &none;
    if (read_header(sock, &len, fds, fds ? max : 0, nfds) || len > MAX_MESSAGE) goto fail;
    char *text = malloc(len + 1);
    if (!text || read_exact(sock, text, len)) { free(text); goto fail; }
    json_t j = {text, text + len};
    size_t payload = 0;
    int rc = parse_request(&j, r, &payload);
    free(text);
    if (rc || payload > MAX_MESSAGE) { free_request(r); goto fail; }
    if (payload) {
        char *bytes = malloc(payload);
        if (!bytes || read_exact(sock, bytes, payload)) { free(bytes); free_request(r); goto fail; }
        buf_add(&r->payload, bytes, payload);
        free(bytes);
    }
    return 0;
fail:
    for (int i = 0; i < *nfds; i++) close(fds[i]);
    *nfds = 0;
    return -1;
}

/* The next request; -1 on EOF or anything that is not a flat JSON object */
int read_request(int sock, request_t *r) { return read_request_fds(sock, r, NULL, 0, NULL); }

void recv_request(int sock, request_t *r) {
    if (read_request(sock, r)) hang_up();
}

void free_request(request_t *r) {
    free(r->op.data);
    free(r->command.data);
    free(r->error.data);
    free(r->payload.data);
}
