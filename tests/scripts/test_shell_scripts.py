"""scripts/ray_head.sh, ray_worker.sh and gpu_smoke.sh: syntax, the commands they build, bad input, and a real
two-node launch on loopback whose every listening socket is on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
SHELL_SCRIPTS = ["ray_head.sh", "ray_worker.sh", "gpu_smoke.sh"]


def sh(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=60, env=env)


def dry_run(script: str, *args: str) -> tuple[dict[str, str], list[str]]:
    """(environment, argv) of the printed `env VAR=... ray start ...` line."""
    # --dry-run goes before the options: anything after `--` is passed to `ray start`
    head = [a for a in args[:1] if ":" in a]  # ray_worker.sh takes the head's address first
    out = sh(script, *head, "--dry-run", *args[len(head) :])
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    assert words[0] == "env"
    assignments = [w for w in words[1:] if "=" in w and not w.startswith("-") and "/" not in w.split("=")[0]]
    return dict(w.split("=", 1) for w in assignments), words[1 + len(assignments) :]


def dry_run_argv(script: str, *args: str) -> list[str]:
    return dry_run(script, *args)[1]


def option(argv: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    assert len(values) == 1, (name, argv)
    return values[0]


@pytest.mark.parametrize("name", SHELL_SCRIPTS)
def test_syntax_and_executable(name):
    path = SCRIPTS / name
    assert os.access(path, os.X_OK), f"{path} is not executable"
    assert sh("-n", str(path)).returncode == 0
    if shutil.which("shellcheck"):
        out = subprocess.run(["shellcheck", "-S", "warning", str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout


def test_the_shared_options_file_parses_and_is_not_a_command():
    path = SCRIPTS / "ray_common.sh"
    assert sh("-n", str(path)).returncode == 0
    assert not os.access(path, os.X_OK), "ray_common.sh is sourced by the ray scripts, not run"


def test_head_defaults_are_loopback_with_swebox_resources():
    env, argv = dry_run(str(SCRIPTS / "ray_head.sh"))
    # loopback only (measured: every socket on 127.0.0.1), token authentication on
    assert env == {"RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    assert argv[1:3] == ["start", "--head"]
    assert option(argv, "--node-ip-address") == "127.0.0.1"
    assert option(argv, "--port") == "6379"
    assert json.loads(option(argv, "--resources")) == {"swebox_node": 1, "swebox_io_mb": 2000}
    assert option(argv, "--include-dashboard") == "false"
    assert "--block" not in argv


def test_head_options_and_passthrough():
    env, argv = dry_run(
        str(SCRIPTS / "ray_head.sh"),
        "--ip",
        "10.1.2.3",
        "--port",
        "7000",
        "--num-cpus",
        "8",
        "--num-gpus",
        "2",
        "--io-budget-mb",
        "500",
        "--node-resource",
        "my_node",
        "--block",
        "--no-auth",
        "--",
        "--object-store-memory=1000000000",
    )
    assert env == {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    assert option(argv, "--node-ip-address") == "10.1.2.3"
    assert option(argv, "--num-cpus") == "8" and option(argv, "--num-gpus") == "2"
    assert json.loads(option(argv, "--resources")) == {"my_node": 1, "swebox_io_mb": 500}
    assert argv[-2:] == ["--block", "--object-store-memory=1000000000"]


def test_worker_on_a_cluster_network_uses_ray_start():
    env, argv = dry_run(str(SCRIPTS / "ray_worker.sh"), "10.1.2.3:6379", "--ip", "10.1.2.4", "--num-cpus", "4")
    assert env == {"RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}  # Ray's CLI joins only so
    assert argv[1:3] == ["start", "--address=10.1.2.3:6379"]
    assert option(argv, "--node-ip-address") == "10.1.2.4"
    assert json.loads(option(argv, "--resources")) == {"swebox_node": 1, "swebox_io_mb": 2000}


def test_worker_on_loopback_starts_a_loopback_node():
    out = sh(str(SCRIPTS / "ray_worker.sh"), "127.0.0.1:6379", "--num-cpus", "1", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "loopback node: RAY_AUTH_MODE=token" in out.stdout
    assert "ip=127.0.0.1" in out.stdout and "num_cpus=1" in out.stdout


def test_worker_without_the_token_says_where_to_put_it(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    out = sh(str(SCRIPTS / "ray_worker.sh"), "127.0.0.1:6379", env=env)
    assert out.returncode == 2
    assert f"expected the head's token in {tmp_path}/.ray/auth_token or RAY_AUTH_TOKEN" in out.stderr


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("ray_head.sh", ["--port", "abc"], "--port expects a whole number; found 'abc'"),
        ("ray_head.sh", ["--frobnicate"], "unknown option '--frobnicate'"),
        ("ray_head.sh", ["--io-budget-mb", "0"], "--io-budget-mb expects a positive number"),
        ("ray_head.sh", ["--ip"], "--ip expects a value"),
        ("ray_worker.sh", [], "expects the head's address HOST:PORT first"),
        ("ray_worker.sh", ["somehost"], "expects the head's address as HOST:PORT first; found 'somehost'"),
        ("ray_worker.sh", ["10.0.0.1:6379"], "must both be loopback (one machine) or both cluster addresses"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(script, args, message):
    out = sh(str(SCRIPTS / script), *args, *(["--dry-run"] if args and args[-1] != "--ip" else []))
    assert out.returncode == 2
    assert message in out.stderr


def test_help():
    for script in ("ray_head.sh", "ray_worker.sh"):
        out = sh(str(SCRIPTS / script), "--help")
        assert out.returncode == 0 and "swebox_io_mb" in out.stdout and "#" not in out.stdout


# ---------------------------------------------------------------------------------- a real loopback launch


def session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # fields after ')': state ppid pgrp session ...
                pids.append(int(entry.name))
    return pids


def listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets in LISTEN state that the processes hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:
                found.add(decode_address(cols[1].split(":")[0]))
    return found


def decode_address(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def stop(*procs: subprocess.Popen) -> None:
    """SIGTERM to the process groups we started (Ray drains for up to 30 s), then SIGKILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, 40), (signal.SIGKILL, 10)):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for proc in procs:
                proc.poll()  # reap our own child so that it does not linger as a zombie
            if not any(session_pids(p.pid) for p in procs):
                return
            time.sleep(0.5)


@pytest.fixture
def short_tmp():
    """A short temp folder: Ray's socket paths under it must stay within 107 bytes (pytest's tmp_path is long)."""
    path = Path(tempfile.mkdtemp(prefix="swebox-ray-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_two_node_launch_on_loopback(short_tmp):
    tmp_path = short_tmp
    port = free_port()
    # HOME: the head generates this cluster's auth token in $HOME/.ray; the worker and the trainer read it there
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "HOME": str(tmp_path)}
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    with open(tmp_path / "head.log", "w") as head_log, open(tmp_path / "worker.log", "w") as worker_log:
        launch(tmp_path, port, env, head_log, worker_log)


def launch(tmp_path: Path, port: int, env: dict, head_log, worker_log) -> None:
    head = subprocess.Popen(
        [
            "bash",
            str(SCRIPTS / "ray_head.sh"),
            "--port",
            str(port),
            "--num-cpus",
            "1",
            "--io-budget-mb",
            "300",
            "--temp-dir",
            str(tmp_path),
            "--block",
            "--",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
        ],
        stdout=head_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    worker = None
    try:
        probe = (
            "import json, ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(json.dumps([n['Resources'] for n in ray.nodes() if n['Alive']]))"
        )
        resources = wait_for_nodes(probe, port, 1, head, env)
        assert (tmp_path / ".ray" / "auth_token").stat().st_size > 0  # token authentication is on
        worker = subprocess.Popen(
            [
                "bash",
                str(SCRIPTS / "ray_worker.sh"),
                f"127.0.0.1:{port}",
                "--num-cpus",
                "1",
                "--io-budget-mb",
                "200",
                "--temp-dir",
                str(tmp_path),
            ],
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        resources = wait_for_nodes(probe, port, 2, worker, env)
        assert sorted(r["swebox_io_mb"] for r in resources) == [200.0, 300.0]
        assert all(r["swebox_node"] == 1.0 for r in resources)
        # the trainer's pool joins this cluster and runs groups on both nodes
        pooled = subprocess.run(
            [sys.executable, "-c", POOL_PROBE, f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
        assert pooled.returncode == 0, pooled.stderr[-3000:]
        assert json.loads(pooled.stdout.strip().splitlines()[-1]) == {"nodes": 2, "placed_on": 2}
        addresses = listening_addresses(session_pids(head.pid) + session_pids(worker.pid))
        assert addresses, "expected the nodes to listen on some port"
        assert addresses <= {"127.0.0.1", "::ffff:127.0.0.1"}, f"listening beyond loopback: {addresses}"
    finally:
        stop(head, *([worker] if worker is not None else []))
    assert not session_pids(head.pid) and (worker is None or not session_pids(worker.pid))


POOL_PROBE = """
import dataclasses, json, sys
from swebox.trainers.run.config import TrainConfig
from swebox.trainers.distributed.ray_pool import RayWorkerPool
from tests.trainers.distributed.test_ray_pool_cluster import ScriptedWorker, task

cfg = TrainConfig()
cfg = dataclasses.replace(cfg, ray=dataclasses.replace(cfg.ray, address=sys.argv[1], actor_num_cpus=0.5))
pool = RayWorkerPool(cfg, worker_factory=ScriptedWorker)
try:
    pool.run_groups([task(0, "alpha"), task(1, "beta")], group_size=2)
    print(json.dumps({"nodes": len(pool.nodes), "placed_on": len(set(pool.last_placement))}))
finally:
    pool.close()
"""


def wait_for_nodes(probe: str, port: int, count: int, proc: subprocess.Popen, env: dict) -> list[dict]:
    deadline = time.monotonic() + 90
    env = {**env, "RAY_AUTH_MODE": "token"}  # a driver given an explicit address sends the token only when asked
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the node exited with {proc.returncode}; see its log in {proc.args}"
        try:  # ray.init retries for a long time when nothing listens yet
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(1)
            continue
        out = subprocess.run(
            [sys.executable, "-c", probe, f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60, env=env
        )
        if out.returncode == 0:
            nodes = json.loads(out.stdout.strip().splitlines()[-1])
            if len(nodes) == count:
                return nodes
        time.sleep(2)
    raise AssertionError(f"expected {count} Ray nodes on 127.0.0.1:{port} within 90 s")
