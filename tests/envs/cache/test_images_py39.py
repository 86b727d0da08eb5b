"""An image with its own interpreter, end to end: a Debian bullseye rootfs (Python 3.9, made by mmdebstrap,
cached between runs) plus a project at /testbed in SWE-bench's layout, pushed to the reference registry on
loopback, pulled, run (the venv active from ~/.bashrc in the agent's shell, after resets too) and graded in
fresh sandboxes of the same image: the gold patch and the agent's own fix resolve, an empty diff does not."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import Platform, acquire_image
from swebox.envs.cache.images.registry import RegistryConfig, pull
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.grading import grade
from swebox.envs.tasks.schema import Task

from .py39_image import GOLD, VENV_PYTHON, py39_layout
from .registry_fixture import push, registry

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("mmdebstrap", "docker-registry", "skopeo", "tar2sqfs")),
    reason="needs root, mmdebstrap (and Debian's archive, the first time), docker-registry, skopeo, tar2sqfs")]


def test_py39_image_runs_an_episode_and_grades_both_ways(tmp_path):
    layout = py39_layout(tmp_path / "image")
    store = LayerStore(tmp_path / "store")
    with registry(tmp_path / "registry") as address:
        ref = f"{address}/swebox/py39-calc:latest"
        push(layout, "latest", ref)
        record = pull(store, ref, Platform("linux", "amd64"), RegistryConfig(insecure=True))
    assert len(record.layers) == 2 and record.config["WorkingDir"] == "/testbed"
    assert store.get(record.layers[0]).meta["dropped"].get("device", 0) > 0  # mmdebstrap's /dev nodes
    task = Task(instance_id="py39-calc", repo="calc", patch=GOLD, test_cmd=f"{VENV_PYTHON} -m pytest",
                FAIL_TO_PASS=["tests/test_calc.py::test_add"], PASS_TO_PASS=["tests/test_calc.py::test_mul"])
    cache = LayerCache(store, LayerCacheConfig(root=str(tmp_path / "node")))
    try:
        with acquire_image(cache, ref) as held:
            with Sandbox(held.paths, held.policy) as sb:
                shell = sb.exec("pwd; python --version; command -v python; python -m pytest -q tests 2>&1 | "
                                "tail -1", timeout=120)
                assert shell.output.splitlines()[:3] == ["/testbed", "Python 3.9.2", VENV_PYTHON], shell.output
                assert "1 failed, 1 passed" in shell.output
                sb.exec("sed -i 's/a - b/a + b/' calc.py")  # the agent's fix, made in its shell
                agent_diff = sb.exec("git diff").output
                sb.reset()
                after = sb.exec("pwd; command -v python; git status --porcelain").output
                assert after.splitlines() == ["/testbed", VENV_PYTHON]
            gold = grade(task, GOLD, layers=held.paths, policy=held.policy, timeout=300)
            agent = grade(task, agent_diff, layers=held.paths, policy=held.policy, timeout=300)
            empty = grade(task, "", layers=held.paths, policy=held.policy, timeout=300)
    finally:
        cache.close()
    assert gold.resolved and gold.reward == 1.0, json.dumps(gold.to_dict(), indent=1)
    assert agent.resolved, agent.to_dict()
    assert not empty.resolved and empty.reward == 0.0, empty.to_dict()
