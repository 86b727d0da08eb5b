"""Synthesis builds every project's environment first, concurrently; a failed build is left to its project."""

from __future__ import annotations

import threading

from swebox.envs.tasks.synth import env as synth_env
from swebox.envs.tasks.synth.pipeline import SynthConfig, synthesize


class _Recipe:
    def __init__(self, name: str) -> None:
        self.name = self.label = name

    def env_spec(self) -> str:
        return self.name


def test_prepare_builds_the_env_layers_concurrently_and_leaves_failures_to_the_project(tmp_path, monkeypatch):
    running, most, built = [0], [0], []
    lock, two_at_once = threading.Lock(), threading.Event()

    def build_env(store, spec):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == 2:
                two_at_once.set()
        # each build lasts until two have run at once (an event, not a sleep that a loaded machine can outlast
        # before the second thread starts); builds made one at a time would end after the deadline with most 1
        two_at_once.wait(timeout=60)
        with lock:
            running[0] -= 1
        if spec == "broken":
            raise RuntimeError("pip install failed")
        built.append(spec)

    monkeypatch.setattr(synth_env, "build_env", build_env)
    environments = synth_env.CacheEnvironments(tmp_path / "out")
    try:
        environments.prepare([_Recipe("a"), _Recipe("broken"), _Recipe("b")], jobs=2)
    finally:
        environments.close()
    assert sorted(built) == ["a", "b"] and most[0] == 2


def test_synthesize_prepares_all_projects_first_then_reports_each(tmp_path):
    calls = []

    class Environments:
        def prepare(self, recipes, jobs):
            calls.append(("prepare", [r.name for r in recipes], jobs))

        def __call__(self, recipe):
            calls.append(("open", recipe.name))
            raise RuntimeError(f"no environment for {recipe.name}")

    reports = synthesize([_Recipe("a"), _Recipe("b")], SynthConfig(out=str(tmp_path), jobs=2), Environments())
    assert calls == [("prepare", ["a", "b"], 2), ("open", "a"), ("open", "b")]
    assert [r.error for r in reports] == ["RuntimeError: no environment for a", "RuntimeError: no environment for b"]
