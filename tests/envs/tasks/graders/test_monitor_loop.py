"""The monitors' shared loop (monitor_loop.py) as the graders ship it: one self-contained file per monitor.

The sandbox runs a monitor as ``python -I -S -B MONITOR.py WORKDIR``, where nothing of the project can be
imported; :func:`shipped` puts monitor_loop.py's text in place of the monitor's import of it. These tests run the
shipped log monitor for real on the host (bash, a pipe, the signature the host checks); the grade monitor runs
in real grading sandboxes in test_grading.py and test_grading_attacks.py.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import time
import tokenize

import pytest
from swebox.envs.tasks.graders import grade_monitor, log_monitor, monitor_loop
from swebox.envs.tasks.graders.log_grading import MONITOR as LOG_MONITOR
from swebox.envs.tasks.graders.log_grading import read_signed
from swebox.envs.tasks.graders.monitor_loop import shipped
from swebox.envs.tasks.graders.verdict import MONITOR as GRADE_MONITOR


@pytest.mark.parametrize("monitor", [GRADE_MONITOR, LOG_MONITOR], ids=lambda p: p.name)
def test_a_shipped_monitor_imports_nothing_of_the_project(monitor):
    tree = ast.parse(shipped(monitor))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported and not [name for name in imported if name.startswith("swebox")], imported
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert defined.count("read_until_exit") == 1 and defined.count("run") == 1, defined
    assert b"from swebox" in monitor.read_bytes()  # the source imports it; only what is shipped holds the text


def py35_problems(source: bytes) -> list[str]:
    """What in ``source`` Python 3.5 cannot read. ``ast.parse(feature_version=(3, 5))`` alone is not enough: from
    Python 3.12 (PEP 701) f-strings are parsed by the grammar and no longer refused for an older feature version,
    so f-strings are also looked for token by token."""
    try:
        ast.parse(source, feature_version=(3, 5))
    except SyntaxError as exc:
        return [f"line {exc.lineno}: {exc.msg}"]
    tokens = tokenize.tokenize(io.BytesIO(source).readline)
    fstring_start = getattr(tokenize, "FSTRING_START", None)  # Python >= 3.12
    return [
        f"line {tok.start[0]}: an f-string (Python >= 3.6)"
        for tok in tokens
        if tok.type == fstring_start or (tok.type == tokenize.STRING and "f" in re.match(r"\w*", tok.string)[0].lower())
    ]


def test_the_log_monitor_and_its_loop_keep_python_3_5_syntax():
    assert py35_problems(shipped(LOG_MONITOR)) == []
    # the check can fail, on every host Python: an f-string, a walrus, a variable annotation are refused
    for newer in (b'x = f"{1}"\n', b'x = rb"a" + F"{2}"\n', b"if (x := 1):\n    pass\n", b"x: int = 1\n"):
        assert py35_problems(newer), newer
    assert py35_problems(b'x = "{}".format(1) + rb"f" + b"%d" % 1\n') == []


def test_shipping_refuses_a_monitor_without_its_one_import(tmp_path):
    bare = tmp_path / "bare_monitor.py"
    bare.write_text("import os\n")
    with pytest.raises(ValueError, match="expected one `from swebox.envs.tasks.graders.monitor_loop import"):
        shipped(bare)


def test_the_monitors_use_the_one_loop():
    assert log_monitor.read_until_exit is monitor_loop.read_until_exit
    assert grade_monitor.read_until_exit is monitor_loop.read_until_exit
    assert grade_monitor.write_signed is log_monitor.write_signed is monitor_loop.write_signed


def _run_shipped_log_monitor(workdir, script: str, timeout: float) -> bytes:
    key = os.urandom(32)
    (workdir / "log_monitor.py").write_bytes(shipped(LOG_MONITOR))
    (workdir / "log_monitor.json").write_text(json.dumps({"script": script, "timeout": timeout}))
    (workdir / "key").write_bytes(key)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(workdir / "log_monitor.py"), str(workdir)],
        env=env,
        cwd=workdir,
        timeout=120,
        check=True,
    )
    assert not (workdir / "key").exists() and not (workdir / "log_monitor.json").exists()  # read once, gone
    return key


def test_the_shipped_log_monitor_signs_what_bash_printed(tmp_path):
    key = _run_shipped_log_monitor(tmp_path, "echo out; echo err >&2; exit 3", timeout=60)
    data = (tmp_path / "log.signed").read_bytes()
    head, log, why = read_signed(data, key)
    assert why == "" and head == {"exit": 3, "timed_out": False, "cut": False}
    assert log.splitlines() == ["out", "err"]
    # the other way: a changed byte, or another key, is believed by nobody
    assert read_signed(data.replace(b"out", b"OUT"), key)[2] == "forged"
    assert read_signed(data, os.urandom(32))[2] == "forged"


def test_the_shipped_log_monitor_kills_a_script_past_its_time(tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    key = _run_shipped_log_monitor(tmp_path, f"sleep 300 & echo $! > {pid_file}; wait", timeout=1.0)
    head, _, why = read_signed((tmp_path / "log.signed").read_bytes(), key)
    assert why == "" and head["timed_out"] is True and head["exit"] is None
    sleeper = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # the whole process group was killed: the sleeper too (polled, not timed)
    while _running(sleeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(sleeper)


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a killed orphan waits for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(") ")[2][:1] != "Z"
    except FileNotFoundError:
        return False


def test_reading_in_batches_loses_nothing_and_keeps_each_senders_bytes():
    # The grade monitor pauses between reads (grade_monitor.READ_PAUSE) so the runner's many small writes queue
    # in the kernel: every byte still arrives, in order, and the exit status is the child's own.
    import socket

    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    lines = [json.dumps({"e": "report", "n": n}).encode() + b"\n" for n in range(2000)]
    pid = os.fork()
    if pid == 0:  # the writer: one small write per line, as the runner sends its events
        try:
            reader.close()
            for line in lines:
                writer.sendall(line)
        finally:
            os._exit(3)
    writer.close()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    status = monitor_loop.read_until_exit(
        pid, reader, lambda: reader.recv(1 << 16), got.append, deadline, grade_monitor.READ_PAUSE
    )
    reader.close()
    assert status == 3
    assert b"".join(got) == b"".join(lines)
    assert 0 < grade_monitor.READ_PAUSE <= 0.05  # a pause long enough to batch, short next to a test run
