"""Build sandboxes get network without the host's network namespace (issue 11, class 9), tested offline: the
host's abstract unix sockets and loopback servers are out of reach, a loopback package index is reachable only
when the policy asks for it, and the stack really carries traffic."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy

pytestmark = pytest.mark.skipif(shutil.which("slirp4netns") is None, reason="needs slirp4netns (make deps)")

CONNECT = (
    "python3 - <<'EOF'\n"
    "import socket, sys\n"
    "targets = (('unix', '\\0{abstract}'), ('tcp', ('127.0.0.1', {port})), ('tcp', ('10.0.2.2', {port})))\n"
    "for family, address in targets:\n"
    "    s = socket.socket(socket.AF_UNIX if family == 'unix' else socket.AF_INET)\n"
    "    s.settimeout(3)\n"
    "    try:\n"
    "        s.connect(address); print(family, address, 'CONNECTED', s.recv(64))\n"
    "    except OSError as exc:\n"
    "        print(family, address, 'refused', type(exc).__name__)\n"
    "EOF"
)


@pytest.fixture
def host_services():
    """An abstract unix socket and a loopback TCP server on the host, each answering b'host secret'."""
    abstract = f"swebox-i11-{os.getpid()}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + abstract)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    servers = [unix, tcp]
    for s in servers:
        s.listen(8)
        s.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            for s in servers:
                try:
                    conn, _ = s.accept()
                except OSError:
                    continue
                conn.sendall(b"host secret")
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield abstract, tcp.getsockname()[1]
    stop.set()
    thread.join(2)
    for s in servers:
        s.close()


def test_a_build_sandbox_reaches_no_host_socket(base_layer: Path, work_root: str, host_services):
    abstract, port = host_services
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root, network="host")) as sb:  # the builder's name
        out = sb.exec(CONNECT.format(abstract=abstract, port=port), timeout=30).output
        assert "CONNECTED" not in out and out.count("refused") == 3, out
        assert sb.policy.network == "user"
        # the namespace is its own: not the host's, and a real stack is attached (an interface, a default route)
        assert sb.exec("readlink /proc/self/ns/net").output.strip() != os.readlink("/proc/self/ns/net")
        assert "tap0" in sb.exec("cat /proc/net/dev").output
        routes = sb.exec("cat /proc/net/route").output.splitlines()[1:]
        assert any(line.split()[1] == "00000000" and line.split()[0] == "tap0" for line in routes), routes
        sb.reset()  # the stack survives a reset (it serves nsinit's namespace, not the session)
        assert "tap0" in sb.exec("cat /proc/net/dev").output


def test_a_loopback_package_index_is_reachable_only_when_allowed(
    base_layer: Path, work_root: str, tmp_path: Path, host_services
):
    (tmp_path / "simple" / "calc").mkdir(parents=True)
    (tmp_path / "simple" / "calc" / "index.html").write_text("<a href='calc-1.0.tar.gz'>calc-1.0.tar.gz</a>\n")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=index.serve_forever, daemon=True).start()
    fetch = (
        f"python3 -c \"import urllib.request; print(urllib.request.urlopen("
        f"'http://10.0.2.2:{index.server_port}/simple/calc/', timeout=5).read().decode().strip())\" "
        "2>&1 | tail -1"
    )
    abstract, port = host_services
    try:
        with Sandbox([base_layer], SandboxPolicy(work_root=work_root, network="user")) as sb:
            assert "calc-1.0.tar.gz" not in sb.exec(fetch, timeout=30).output
        policy = SandboxPolicy(work_root=work_root, network="user", network_host_loopback=True)
        with Sandbox([base_layer], policy) as sb:
            assert "calc-1.0.tar.gz" in sb.exec(fetch, timeout=30).output  # traffic really flows
            out = sb.exec(CONNECT.format(abstract=abstract, port=port), timeout=30).output
            unix_line = out.splitlines()[0]
            assert unix_line.startswith("unix") and "refused" in unix_line, out  # abstract sockets: never
    finally:
        index.shutdown()
        index.server_close()
