"""docs/training.md's loopback cluster, as a user runs it: `scripts/ray_head.sh --num-cpus 1`, then `swebox train
... ray.address=127.0.0.1:PORT` from another folder, with relative env.tasks and env.layer_store, and without
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER in the trainer's environment (it used to retry the machine's network address
for ever, then fail preflight on paths resolved in the node's folder); and a head that is not there: one line
within ray.connect_timeout_s. Ray binds 127.0.0.1 only; the test stops the head it started, nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.envs.cache import LayerStore

from tests.calc import CALC_ENV, calc_task
from tests.ports import free_port
from tests.scripts.test_shell_scripts import (
    listening_addresses,
    session_pids,
    short_tmp,
    stop,
    wait_for_nodes,
)

REPO = Path(__file__).resolve().parents[3]
TINY = str(REPO / "configs" / "grpo_tiny_cpu.yaml")
SMALL = [
    "total_steps=1",
    "logging.wandb=disabled",
    "logging.progress=false",
    "rollout.tasks_per_step=1",
    "rollout.group_size=2",
    "optim.micro_batch_size=2",
    "generation.max_new_tokens=8",
    "env.max_turns=1",
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "ray.actor_num_cpus=0.5",
]
__all__ = ["short_tmp"]  # a fixture of the shell-script tests, used here too


def user_env(home: Path) -> dict[str, str]:
    """The user's shell: no Ray variables (the trainer must set what a loopback cluster needs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # HOME: the head writes this cluster's auth token to $HOME/.ray; the trainer reads it there
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


def swebox(*args: str, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swebox.scripts.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_head_that_is_not_there_is_one_line_within_the_timeout(tmp_path):
    port = free_port()  # nothing listens on it
    (tmp_path / "tasks.jsonl").write_text(json.dumps(calc_task().to_dict()) + "\n")
    done = swebox(
        "train",
        "--config",
        TINY,
        *SMALL,
        f"ray.address=127.0.0.1:{port}",
        "ray.connect_timeout_s=3",
        f"env.tasks={tmp_path / 'tasks.jsonl'}",
        f"logging.run_dir={tmp_path / 'run'}",
        cwd=tmp_path,
        env=user_env(tmp_path),
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[-1].startswith(
        f"swebox train: ray.address=127.0.0.1:{port}: expected a Ray head listening "
        "there; found nothing within ray.connect_timeout_s=3 ("
    ), lines
    assert "scripts/ray_head.sh" in lines[-1]


@pytest.fixture
def task_files(tmp_path, calc_layer):
    store = LayerStore(tmp_path / "user" / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    (tmp_path / "user" / "tasks.jsonl").write_text(json.dumps(calc_task().to_dict()) + "\n")
    return tmp_path / "user"


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_swebox_train_on_a_loopback_head_with_relative_paths(short_tmp, task_files):
    port = free_port()
    env = user_env(short_tmp)
    # the ray executable of this interpreter, so that the nodes run this checkout's swebox
    (short_tmp / "ray").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ray.scripts.scripts "$@"\n')
    (short_tmp / "ray").chmod(0o755)
    head_dir = short_tmp / "head"  # where the node starts, and where its actors run: not the user's folder
    head_dir.mkdir()
    with open(short_tmp / "head.log", "w") as log:
        head = subprocess.Popen(
            [
                "bash",
                str(REPO / "scripts" / "ray_head.sh"),
                "--port",
                str(port),
                "--num-cpus",
                "1",
                "--temp-dir",
                str(short_tmp),
                "--block",
                "--",
                f"--ray-client-server-port={free_port()}",
                f"--dashboard-agent-listen-port={free_port()}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=head_dir,
            env={**env, "RAY": str(short_tmp / "ray")},
        )
    try:
        probe = (
            "import json, ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(json.dumps([n['Resources'] for n in ray.nodes() if n['Alive']]))"
        )
        wait_for_nodes(probe, port, 1, head, {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
        done = swebox(
            "train",
            "--config",
            TINY,
            *SMALL,
            f"ray.address=127.0.0.1:{port}",
            "env.tasks=tasks.jsonl",
            "env.layer_store=store",
            "env.cache_dir=node-cache",
            "logging.run_dir=run",
            "--ray",
            cwd=task_files,
            env=env,
            timeout=420,
        )
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
        assert "step 1: reward/mean" in done.stdout
        metrics = [json.loads(line) for line in (task_files / "run" / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [1] and metrics[0]["env/errors"] == 0.0
        assert (task_files / "node-cache").is_dir() and not (head_dir / "node-cache").exists()
        addresses = listening_addresses(session_pids(head.pid))
        assert addresses and addresses <= {"127.0.0.1", "::ffff:127.0.0.1"}, f"listening beyond loopback: {addresses}"
    finally:
        stop(head)
    assert not session_pids(head.pid)


def test_paths_leave_the_driver_absolute(tmp_path, monkeypatch):
    from swebox.trainers.distributed.ray_connect import absolute_paths, is_loopback
    from swebox.trainers.run.config import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy").mkdir()
    monkeypatch.setenv("SWEBOX_LAYER_STORE", "shared/layers")
    monkeypatch.delenv("SWEBOX_LAYER_CACHE", raising=False)
    cfg = load_config(
        None,
        [
            "env.tasks=t.jsonl",
            "env.layer_store=store",
            "env.cache_dir=cache-{node_id}",
            "model.init=pretrained",
            "model.path=policy",
            "model.tokenizer=builtin",
        ],
    )
    out = absolute_paths(cfg)
    assert (out.env.tasks, out.env.layer_store) == (str(tmp_path / "t.jsonl"), str(tmp_path / "store"))
    assert out.env.cache_dir == str(tmp_path / "cache-{node_id}") and out.model.path == str(tmp_path / "policy")
    assert out.model.tokenizer == "builtin" and os.environ["SWEBOX_LAYER_STORE"] == str(tmp_path / "shared/layers")
    assert absolute_paths(load_config(None, [])).env.tasks == ""  # unset stays unset
    assert is_loopback("127.0.0.1:6379") and is_loopback("localhost:1") and not is_loopback("10.0.0.1:6379")
