"""Grading a Harbor task: its ``tests/`` in a fresh sandbox, ``/tests/test.sh`` run, the reward file read.

As harbor 0.25's ``Verifier``: stale reward files are removed, ``tests/`` is uploaded to ``/tests``, the
script is made executable and run with ``[verifier].env`` (stdout and stderr to
``/logs/verifier/test-stdout.txt``), then ``/logs/verifier/reward.json`` is read if it exists, else
``reward.txt``. reward.txt must hold one finite number; reward.json an object of finite numbers (its
``reward`` key is the reward, as Harbor's metrics and viewer read it; an object with one key gives that
key's value). A missing, empty or unparsable reward file, or one outside those forms, is reward 0 with the
reason in ``GradeReport.errors``; never an exception.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import PurePosixPath

from swebox.envs.sandbox import Sandbox, SandboxError
from swebox.envs.tasks.schema import Task

VERIFIER_DIR = "/logs/verifier"
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
MAX_REWARD_BYTES = 1 << 20
_OUTPUT_TAIL = 4000


def parse_reward(json_bytes: bytes | None, txt_bytes: bytes | None) -> tuple[float, str]:
    """(reward, problem): the reward Harbor would read from the files (None = absent), or 0.0 and why not."""
    if json_bytes is not None:
        where = REWARD_JSON
        if not json_bytes.strip():
            return 0.0, f"{where}: expected a JSON object of rewards; found an empty file"
        try:
            data = json.loads(json_bytes)
        except (ValueError, UnicodeDecodeError) as exc:
            return 0.0, f"{where}: expected a JSON object of rewards; found invalid JSON ({exc})"
        if not isinstance(data, dict) or not data:
            return 0.0, f"{where}: expected a JSON object like {{\"reward\": 1.0}}; found {json_bytes[:80]!r}"
        bad = {
            k: v
            for k, v in data.items()
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
        }
        if bad:
            return 0.0, f"{where}: expected finite numbers; found {bad!r}"[:300]
        if "reward" in data:
            return float(data["reward"]), ""
        if len(data) == 1:
            return float(next(iter(data.values()))), ""
        return 0.0, f"{where}: expected a 'reward' key among several rewards; found keys {sorted(data)}"
    if txt_bytes is not None:
        where = REWARD_TXT
        if not txt_bytes.strip():
            return 0.0, f"{where}: expected a number; found an empty file"
        try:
            value = float(txt_bytes.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return 0.0, f"{where}: expected a number; found {txt_bytes[:80]!r}"
        if not math.isfinite(value):
            return 0.0, f"{where}: expected a finite number; found {value!r}"
        return value, ""
    return 0.0, f"no reward file: expected tests/test.sh to write {REWARD_TXT} or {REWARD_JSON}; found neither"


def _read(sb: Sandbox, path: str) -> bytes | None:
    exists = sb.exec(f"test -f {path} && test ! -L {path}", timeout=30)
    if exists.exit_code != 0:
        return None
    try:
        return sb.read_file(path, max_bytes=MAX_REWARD_BYTES)
    except (OSError, SandboxError):
        return b""


def run_verifier(sb: Sandbox, task: Task, report, workdir: str, timeout: float) -> float:
    """Run the task's tests/test.sh in ``sb`` (the agent's diff already applied) and return its reward;
    problems go to ``report.errors`` (reward 0)."""
    from swebox.envs.tasks.harbor_format.folders import unpack  # folders.py builds layers; this module only grades

    harbor = task.metadata.get("harbor") or {}
    sb.exec(f"rm -rf /tests {VERIFIER_DIR} && mkdir -p /tests {VERIFIER_DIR} /logs/agent", timeout=60)
    for rel, (data, mode) in unpack(harbor.get("tests") or {}).items():
        parent = str(PurePosixPath("/tests", rel).parent)
        sb.exec(f"mkdir -p {shlex.quote(parent)}", timeout=30)
        sb.write_file(f"/tests/{rel}", data, mode)
    env = "".join(f"export {k}={shlex.quote(v)}; " for k, v in (harbor.get("verifier_env") or {}).items())
    limit = min(float(harbor.get("verifier_timeout_s") or timeout), timeout)
    cwd = shlex.quote(harbor.get("workdir") or "/testbed")
    run = sb.exec(
        f"chmod +x {task.test_cmd} && cd {cwd} && ({env}{task.test_cmd} > {VERIFIER_DIR}/test-stdout.txt 2>&1)",
        timeout=limit,
    )
    report.timed_out = run.timed_out
    try:  # read by the host: nothing the verifier's run left behind in the sandbox takes part
        report.output_tail = sb.read_tail(f"{VERIFIER_DIR}/test-stdout.txt", _OUTPUT_TAIL).decode("utf-8", "replace")
    except (OSError, SandboxError):
        report.output_tail = ""
    if run.timed_out:
        report.errors.append(f"tests/test.sh timed out after {limit:g} s")
        return 0.0
    reward, problem = parse_reward(_read(sb, REWARD_JSON), _read(sb, REWARD_TXT))
    if problem:
        report.errors.append(problem)
    return reward


def score(report, reward: float) -> None:
    """Reward as the reward file says when the run was clean; resolved = reward of at least 1."""
    clean = report.applied and not (report.errors or report.tampered or report.timed_out)
    report.reward = reward if clean else 0.0
    report.resolved = clean and reward >= 1.0
