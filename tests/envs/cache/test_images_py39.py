"""An image with its own interpreter, end to end: a Debian bullseye rootfs (Python 3.9, made by mmdebstrap,
cached between runs) plus a project at /testbed in SWE-bench's layout, pushed to the reference registry on
loopback, pulled, and played as a real episode (the task row names the image; the layer resolver hands the
episode the image's layers and policy; the venv is active from ~/.bashrc in the agent's shell, after resets
too) and graded in fresh sandboxes of the same image: the gold patch and the agent's own fix resolve, an
empty submission and an empty diff do not. A log-graded row (SWE-bench's way: a bare ``pytest -rA`` that only
the env activated from ~/.bashrc provides, read by SWE-bench's parser) resolves the same way, with the image's
environment and never the agent's."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import Platform, acquire_image, import_image, oci_layout
from swebox.envs.cache.images.registry import RegistryConfig, pull
from swebox.envs.episodes.episode import EpisodeConfig
from swebox.envs.episodes.groups import group
from swebox.envs.episodes.layers_resolver import LayerSource, close_shared_caches
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.schema import Task

from tests.calc import SUBMIT, bash

from .py39_image import GOLD, VENV_PYTHON, py39_layout
from .registry_fixture import push, registry

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("mmdebstrap", "docker-registry", "skopeo", "tar2sqfs")),
        reason="needs root, mmdebstrap (and Debian's archive, the first time), docker-registry, skopeo, tar2sqfs",
    ),
]


def test_py39_image_runs_an_episode_and_grades_both_ways(tmp_path):
    layout = py39_layout(tmp_path / "image")
    store = LayerStore(tmp_path / "store")
    with registry(tmp_path / "registry") as address:
        ref = f"{address}/swebox/py39-calc:latest"
        push(layout, "latest", ref)
        record = pull(store, ref, Platform("linux", "amd64"), RegistryConfig(insecure=True))
    assert len(record.layers) == 2 and record.config["WorkingDir"] == "/testbed"
    assert store.get(record.layers[0]).meta["dropped"].get("device", 0) > 0  # mmdebstrap's /dev nodes
    task = Task(
        instance_id="py39-calc",
        repo="calc",
        patch=GOLD,
        test_cmd=f"{VENV_PYTHON} -m pytest",
        problem_statement="add(2, 3) returns -1 instead of 5.",
        metadata={"image": ref},
        FAIL_TO_PASS=["tests/test_calc.py::test_add"],
        PASS_TO_PASS=["tests/test_calc.py::test_mul"],
    )
    source = LayerSource(store=str(store.root), cache_root=str(tmp_path / "node"))
    cache = LayerCache(store, LayerCacheConfig(root=source.cache_root))
    try:
        # an episode in the image: the row names it, the resolver finds it, the episode runs under its policy
        with group(task, 1, source=source, config=EpisodeConfig(max_turns=5, grade_timeout_s=300)) as episodes:
            episode = episodes[0]
            episode.reset()
            shell = episode.step(
                bash("pwd; python --version; command -v python; python -m pytest -q tests 2>&1 | tail -1")
            ).observation
            assert f"/testbed\nPython 3.9.2\n{VENV_PYTHON}\n" in shell and "1 failed, 1 passed" in shell
            episode.step(bash("sed -i 's/a - b/a + b/' calc.py"))  # the agent's fix, made in its shell
            fixed = episode.step(SUBMIT)
            episode.reset()  # the overlay is dropped: the fix is gone, the venv still active
            after = episode.step(bash("pwd; command -v python; git status --porcelain")).observation
            empty = episode.step(SUBMIT)
        with acquire_image(cache, ref) as held:  # grading straight from the image's layers and policy
            gold = grade(task, GOLD, layers=held.paths, policy=held.policy, timeout=300)
            none = grade(task, "", layers=held.paths, policy=held.policy, timeout=300)
    finally:
        close_shared_caches()
        cache.close()
    assert fixed.reward == 1.0 and "+    return a + b" in fixed.info["diff"], fixed.info
    assert f"/testbed\n{VENV_PYTHON}\n</output>" in after, after
    assert empty.reward == 0.0 and empty.info["diff"] == ""
    assert gold.resolved and gold.reward == 1.0, json.dumps(gold.to_dict(), indent=1)
    assert not none.resolved and none.reward == 0.0, none.to_dict()


def test_py39_image_log_graded_row_uses_the_images_env_not_the_agents(tmp_path):
    store = LayerStore(tmp_path / "store")
    ref = "swebox/py39-calc:log"
    import_image(store, oci_layout(py39_layout(tmp_path / "image"), "latest"), ref, "linux/amd64")
    # SWE-bench's way: the dataset's test command (pytest -rA on the test files) read by its pytest parser;
    # this bullseye has no pytest of its own, so the bare `pytest` is the venv's, on PATH only once
    # ~/.bashrc has activated it
    task = Task(
        instance_id="py39-calc-log",
        repo="calc",
        patch=GOLD,
        test_cmd="pytest -rA tests/test_calc.py",
        grader="log",
        log_parser="pytest",
        eval_commands=["export LANG=C.UTF-8"],
        problem_statement="add(2, 3) returns -1 instead of 5.",
        metadata={"image": ref},
        FAIL_TO_PASS=["tests/test_calc.py::test_add"],
        PASS_TO_PASS=["tests/test_calc.py::test_mul"],
    )
    source = LayerSource(store=str(store.root), cache_root=str(tmp_path / "node"))
    cache = LayerCache(store, LayerCacheConfig(root=source.cache_root))
    try:
        with group(task, 1, source=source, config=EpisodeConfig(max_turns=5, grade_timeout_s=300)) as episodes:
            episode = episodes[0]
            episode.reset()
            # the agent fixes the bug, then breaks its own shell's env: grading must not see either change
            episode.step(bash("sed -i 's/a - b/a + b/' calc.py; echo 'export PATH=/nowhere' >> ~/.bashrc"))
            fixed = episode.step(SUBMIT)
        with acquire_image(cache, ref) as held:
            gold = grade(task, GOLD, layers=held.paths, policy=held.policy, timeout=300)
            none = grade(task, "", layers=held.paths, policy=held.policy, timeout=300)
            # the control: without the image's shell start, the fixed clean environment has no pytest
            bare = dataclasses.replace(held.policy, env={k: v for k, v in held.policy.env.items() if k != "BASH_ENV"})
            unactivated = grade(task, GOLD, layers=held.paths, policy=bare, timeout=300)
    finally:
        close_shared_caches()
        cache.close()
    assert fixed.reward == 1.0 and "+    return a + b" in fixed.info["diff"], fixed.info
    assert ".bashrc" not in fixed.info["diff"]
    assert gold.resolved and gold.log_status == "ok", json.dumps(gold.to_dict(), indent=1)
    assert {t: o.status for t, o in gold.tests.items()} == {
        "tests/test_calc.py::test_add": "passed",
        "tests/test_calc.py::test_mul": "passed",
    }
    assert "platform linux -- Python 3.9.2, pytest-7.4.4" in gold.output_tail, gold.output_tail
    assert not none.resolved and none.reward == 0.0 and none.tests["tests/test_calc.py::test_add"].status == "failed"
    assert none.tests["tests/test_calc.py::test_mul"].status == "passed", none.to_dict()
    assert not unactivated.resolved and unactivated.log_status == "no-results", unactivated.to_dict()
    assert "pytest: command not found" in unactivated.output_tail, unactivated.output_tail
