"""A real Harbor task folder end to end: loaded, its Dockerfile run rootless over the suite's py39 image into a
layer, played as an episode (the instruction is the prompt, /tests is absent, the WORKDIR and ENV are there),
and graded by its own tests/test.sh in fresh sandboxes: the oracle's solution (solve.sh's effect, recorded as
the gold patch) pays 1, no change pays 0, and a test.sh writing a non-number reward pays 0 with the reason."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import acquire_image, import_image, oci_layout
from swebox.envs.episodes.episode import EpisodeConfig
from swebox.envs.episodes.groups import group
from swebox.envs.episodes.layers_resolver import LayerSource, close_shared_caches
from swebox.envs.tasks import load
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.harbor_format.export import export
from swebox.envs.tasks.harbor_format.folders import build_layers
from swebox.envs.tasks.schema import Task

from tests.calc import SUBMIT, bash
from tests.envs.cache.py39_image import GOLD, VENV_PYTHON, py39_layout
from tests.harbor_fixture import write_task

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("mmdebstrap", "tar2sqfs")),
        reason="needs root, mmdebstrap (and Debian's archive, the first time) and tar2sqfs for the py39 image",
    ),
]
IMAGE = "swebox/py39-calc:harbor"


def _grade(cache, task, diff):
    with acquire_image(cache, IMAGE) as held, cache.acquire(task.task_layer_key) as layer:
        return grade(task, diff, layers=[*held.paths, str(layer.path)], policy=held.policy, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A layer store holding the py39 test image as IMAGE."""
    root = tmp_path_factory.mktemp("harbor-store")
    store = LayerStore(root / "store")
    import_image(store, oci_layout(py39_layout(root / "image"), "latest"), IMAGE, "linux/amd64")
    return store


def test_harbor_task_oracle_pays_1_nothing_pays_0_broken_reward_file_pays_0(tmp_path, store):
    write_task(tmp_path / "tasks", IMAGE, name="greet-txt")
    write_task(tmp_path / "tasks", IMAGE, name="greet-json", reward="json")
    write_task(tmp_path / "tasks", IMAGE, name="greet-broken", reward="broken")
    loaded = {t.instance_id: t for t in load(tmp_path / "tasks")}
    node = str(tmp_path / "node")
    tasks = {t.instance_id: t for t in build_layers(list(loaded.values()), store, cache_root=node)}
    txt, js, broken = tasks["greet-txt"], tasks["greet-json"], tasks["greet-broken"]
    # the three share one environment layer (same FROM, steps and context): built once, by content
    assert txt.task_layer_key == js.task_layer_key == broken.task_layer_key
    assert txt.task_layer_key.startswith("harbor-") and txt.metadata["harbor"]["workdir"] == "/app"
    assert "-    return 'Hello ' + name.upper()" in txt.patch and "+    return 'Hello ' + name" in txt.patch
    assert "greet.py" in txt.patch and "build-stamp" not in txt.patch  # only solve.sh's change
    cache = LayerCache(store, LayerCacheConfig(root=node))
    source = LayerSource(store=str(store.root), cache_root=node)
    try:
        with group(txt, 1, source=source, config=EpisodeConfig(max_turns=5, grade_timeout_s=300)) as episodes:
            episode = episodes[0]
            first = episode.reset()
            seen = episode.step(
                bash("pwd; echo $GREETING_MODE; cat build-stamp.txt; ls /tests 2>&1; ls /solution 2>&1; readlink /app")
            ).observation
            episode.step(bash("sed -i 's/name.upper()/name/' greet.py"))  # the agent's own fix
            fixed = episode.step(SUBMIT)
            episode.reset()
            empty = episode.step(SUBMIT)
        oracle = {name: _grade(cache, t, t.patch) for name, t in tasks.items()}
        nothing = {name: _grade(cache, t, "") for name, t in tasks.items()}
    finally:
        close_shared_caches()
        cache.close()
    prompt = json.dumps(first)
    assert "greet('ada')" in prompt
    # the WORKDIR /app is /testbed (a symlink to it): the episode's shell starts there, with the ENV
    assert "/testbed\nplain\nbuilt with Python 3.9.2\n" in seen and seen.rstrip().endswith("/testbed\n</output>"), seen
    assert "ls: cannot access '/tests': No such file or directory" in seen, seen  # hidden from the agent
    assert "cannot access '/solution'" in seen, seen
    assert fixed.reward == 1.0 and "greet.py" in fixed.info["diff"], fixed.info
    assert empty.reward == 0.0 and empty.info["diff"] == ""
    for name in ("greet-txt", "greet-json"):
        assert oracle[name].resolved and oracle[name].reward == 1.0, oracle[name].to_dict()
        assert not oracle[name].errors
        assert not nothing[name].resolved and nothing[name].reward == 0.0, nothing[name].to_dict()
        assert not nothing[name].errors  # a clean run that the verifier scored 0
    for report in (oracle["greet-broken"], nothing["greet-broken"]):
        assert report.reward == 0.0 and not report.resolved
        assert report.errors == ["/logs/verifier/reward.txt: expected a number; found b'not-a-number\\n'"], (
            report.errors
        )


def test_exported_swebench_style_row_round_trips_through_harbor_folders(tmp_path, store):
    """An image row (SWE-bench's shape: FROM its image, /testbed, pytest ids) exported as a Harbor folder and
    loaded back: the exported test.sh + score.py pay 1 for solution/solve.sh, 0 for nothing, and 0 for a
    diff that rewrites the test instead of fixing the code (test.sh restores the test files first)."""
    row = Task(
        instance_id="py39-calc",
        repo="calc",
        patch=GOLD,
        test_cmd=f"{VENV_PYTHON} -m pytest",
        problem_statement="add(2, 3) returns -1 instead of 5.",
        metadata={"image": IMAGE},
        FAIL_TO_PASS=["tests/test_calc.py::test_add"],
        PASS_TO_PASS=["tests/test_calc.py::test_mul"],
    )
    written, refused = export([row], tmp_path / "harbor")
    assert refused == [] and [p.name for p in written] == ["py39-calc"]
    assert (written[0] / "environment" / "Dockerfile").read_text() == f"FROM {IMAGE}\nWORKDIR /testbed\n"
    node = str(tmp_path / "node")
    (task,) = build_layers(list(load(tmp_path / "harbor")), store, cache_root=node)
    assert task.grader == "harbor" and task.problem_statement == row.problem_statement
    assert "-    return a - b\n+    return a + b" in task.patch  # solve.sh applied fix.patch
    cheat = (
        "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n"
        "+++ b/tests/test_calc.py\n@@ -4,2 +4,2 @@ from calc import add, mul\n def test_add():\n"
        "-    assert add(2, 3) == 5\n+    assert add(2, 3) == -1\n"
    )
    cache = LayerCache(store, LayerCacheConfig(root=node))
    try:
        oracle, nothing, cheated = (_grade(cache, task, d) for d in (task.patch, "", cheat))
    finally:
        cache.close()
    assert oracle.reward == 1.0 and oracle.resolved, oracle.to_dict()
    assert "PASSED   tests/test_calc.py::test_add\nPASSED   tests/test_calc.py::test_mul" in oracle.output_tail
    assert nothing.reward == 0.0 and not nothing.errors, nothing.to_dict()
    assert "FAILED   tests/test_calc.py::test_add" in nothing.output_tail, nothing.output_tail
    assert cheated.applied and cheated.reward == 0.0, cheated.to_dict()
    assert "FAILED   tests/test_calc.py::test_add" in cheated.output_tail, cheated.output_tail
