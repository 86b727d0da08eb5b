"""A real registry on loopback for the image tests: Debian's ``docker-registry`` (the reference server of the
distribution project) with a temporary storage folder, optionally behind htpasswd (basic) or token auth, a
small token server for the bearer flow, and a fault-injecting proxy (429/503 answers, truncated or corrupted
blobs) in front of it. Everything binds 127.0.0.1 and stops with the test.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.ports import free_port


def htpasswd(path: Path, user: str, password: str) -> Path:
    import bcrypt  # the registry reads bcrypt hashes only; the stdlib's crypt is gone from Python 3.13

    path.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()}\n")
    return path


@contextlib.contextmanager
def registry(tmp: Path, auth: str = "", users: dict[str, str] | None = None):
    """Yields ``127.0.0.1:PORT``. ``auth``: '' (anonymous), 'basic' (htpasswd) or 'token' (bearer tokens from
    a token server that checks ``users``' basic credentials, or hands anonymous tokens when ``users`` is None)."""
    tmp.mkdir(parents=True, exist_ok=True)
    stack = contextlib.ExitStack()
    auth_lines = []
    if auth == "basic":
        user, password = next(iter((users or {"user": "secret"}).items()))
        auth_lines = [
            "auth:",
            "  htpasswd:",
            "    realm: test",
            f"    path: {htpasswd(tmp / 'htpasswd', user, password)}",
        ]
    elif auth == "token":
        issuer = stack.enter_context(token_server(tmp, users))
        auth_lines = [
            "auth:",
            "  token:",
            f"    realm: http://{issuer.address}/token",
            "    service: test-registry",
            "    issuer: test-issuer",
            f"    rootcertbundle: {issuer.cert}",
        ]
    with stack:
        # free_port() lets the port go before the registry binds it: another test's server can bind it
        # meanwhile (tests/ports.py), and the registry exits; a new port is tried then
        for _attempt in range(5):
            port, proc = _start_registry(tmp, free_port(), auth_lines)
            if proc is not None:
                break
        else:
            raise RuntimeError(f"docker-registry found its port taken 5 times: {_log_tail(tmp)}")
        try:
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _log_tail(tmp: Path) -> str:
    return (tmp / "registry.log").read_text()[-2000:]


def _start_registry(tmp: Path, port: int, auth_lines: list[str]) -> tuple[int, subprocess.Popen | None]:
    """Start docker-registry on ``port`` and wait until it listens; None if the port was taken meanwhile."""
    lines = [
        "version: 0.1",
        "log: {level: error}",
        "storage:",
        f"  filesystem: {{rootdirectory: {tmp / 'storage'}}}",
        "  delete: {enabled: true}",
        f"http: {{addr: '127.0.0.1:{port}', secret: test}}",
        *auth_lines,
    ]
    (tmp / "config.yml").write_text("\n".join(lines) + "\n")
    with open(tmp / "registry.log", "wb") as log:
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(tmp / "config.yml")], stdout=subprocess.DEVNULL, stderr=log
        )
    # polled until it listens, with a deadline a loaded machine meets (the old 200 tries, ~10 s, then went on as
    # if it were up, and the tests failed later with "connection refused")
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return port, proc
        if proc.poll() is not None:
            if "address already in use" in _log_tail(tmp):
                return port, None
            raise RuntimeError(f"docker-registry exited: {_log_tail(tmp)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"docker-registry did not listen on 127.0.0.1:{port} within 60 s")
        time.sleep(0.05)


# ---- the token server --------------------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Issuer:
    def __init__(self, tmp: Path, users: dict[str, str] | None) -> None:
        self.key, self.cert, self.users = tmp / "token.key", tmp / "token.pem", users
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(self.key),
                "-out",
                str(self.cert),
                "-days",
                "1",
                "-subj",
                "/CN=test-issuer",
            ],
            check=True,
            capture_output=True,
        )
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-pubkey", "-noout"], check=True, capture_output=True
        ).stdout
        der = subprocess.run(
            ["openssl", "pkey", "-pubin", "-outform", "DER"], input=der, check=True, capture_output=True
        ).stdout
        # libtrust's key id, which the registry matches against the token's "kid"
        b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
        self.kid = ":".join(b32[i : i + 4] for i in range(0, len(b32), 4))
        self.issued: list[str] = []
        self.address = ""

    def token(self, scope: str, subject: str) -> str:
        access = []
        for item in filter(None, scope.split(" ")):
            kind, name, actions = item.split(":")[0], ":".join(item.split(":")[1:-1]), item.split(":")[-1]
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "kid": self.kid}
        claims = {
            "iss": "test-issuer",
            "sub": subject,
            "aud": "test-registry",
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": str(now) + subject,
            "access": access,
        }
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=signing.encode(),
            check=True,
            capture_output=True,
        ).stdout
        self.issued.append(subject)
        return f"{signing}.{_b64(signature)}"


@contextlib.contextmanager
def token_server(tmp: Path, users: dict[str, str] | None):
    issuer = _Issuer(tmp, users)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            from urllib.parse import parse_qs, urlparse

            query = parse_qs(urlparse(self.path).query)
            subject = "anonymous"
            if issuer.users is not None:
                given = self.headers.get("Authorization", "")
                pairs = {f"Basic {base64.b64encode(f'{u}:{p}'.encode()).decode()}": u for u, p in issuer.users.items()}
                if given not in pairs:
                    self.send_response(401)
                    self.end_headers()
                    return
                subject = pairs[given]
            body = json.dumps({"token": issuer.token(" ".join(query.get("scope", [])), subject)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with _serving(Handler) as address:
        issuer.address = address
        yield issuer


@contextlib.contextmanager
def _serving(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ---- the fault-injecting proxy -----------------------------------------------------------------------
class Faults:
    """Rules the proxy applies, in order: each ``(path_part, action, times)`` with action an HTTP status
    (e.g. 429, 503), 'truncate' or 'corrupt'; ``times`` counts down (-1: always). ``log`` has every request."""

    def __init__(self) -> None:
        self.rules: list[list] = []
        self.log: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()

    def add(self, path_part: str, action, times: int = 1) -> None:
        with self.lock:
            self.rules.append([path_part, action, times])

    def take(self, method: str, path: str):
        with self.lock:
            for rule in self.rules:
                if rule[0] in path and rule[2] != 0 and method == "GET":
                    rule[2] -= 1
                    return rule[1]
        return None


@contextlib.contextmanager
def proxy(upstream: str, faults: Faults):
    """Yields ``127.0.0.1:PORT`` forwarding to ``upstream`` (plain HTTP) with ``faults`` applied."""
    host, port = upstream.split(":")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _forward(self) -> None:
            action = faults.take(self.command, self.path)
            if isinstance(action, int):
                faults.log.append((self.command, self.path, action))
                self.send_response(action)
                self.send_header("Content-Length", "0")
                self.send_header("Retry-After", "0")
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length", 0) or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            headers: dict[str, str] = {}
            for k, v in self.headers.items():  # repeated headers (several Accept lines) joined, not dropped
                if k.lower() not in ("host", "connection"):
                    headers[k] = f"{headers[k]}, {v}" if k in headers else v
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            faults.log.append((self.command, self.path, resp.status))
            if action == "corrupt" and data:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            if action == "truncate":
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[: len(data) // 2] if action == "truncate" else data)
            if action == "truncate":
                self.close_connection = True
            conn.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

    with _serving(Handler) as address:
        yield address


def push(layout: Path, tag: str, dest: str, creds: str = "", all_images: bool = False) -> None:
    """Push an OCI layout's image with skopeo (the real client)."""
    cmd = [
        "skopeo",
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        *(["--dest-creds", creds] if creds else []),
        *(["--all"] if all_images else []),
        f"oci:{layout}:{tag}",
        f"docker://{dest}",
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def v2_status(address: str) -> int:
    try:
        return urllib.request.urlopen(f"http://{address}/v2/", timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code
