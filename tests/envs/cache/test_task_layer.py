from __future__ import annotations

import pytest
from swebox.envs.cache.task_layer import build_task_layer, task_layer_key
from swebox.envs.sandbox import Sandbox

BUG = b"def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"


def _sh(sb: Sandbox, command: str) -> str:
    result = sb.exec(command, timeout=120)
    assert result.exit_code == 0, result.output
    return result.output


def test_task_layer_key_is_stable_and_content_sensitive():
    a = task_layer_key("env-1", {"a.py": b"x", "b.py": None}, "bug")
    assert a == task_layer_key("env-1", {"b.py": None, "a.py": b"x"}, "bug")  # order does not matter
    others = {
        task_layer_key("env-2", {"a.py": b"x", "b.py": None}, "bug"),
        task_layer_key("env-1", {"a.py": b"y", "b.py": None}, "bug"),
        task_layer_key("env-1", {"a.py": b"x"}, "bug"),
        task_layer_key("env-1", {"a.py": b"x", "b.py": None}, "other"),
    }
    assert a.startswith("task-") and len(a) == 25 and a not in others and len(others) == 4


@pytest.mark.parametrize("path", ["/etc/passwd", "../x.py", "a/../../x.py", ".git/config", "."])
def test_bad_paths_are_refused(built_env, path):
    store, spec, _, cache = built_env
    with pytest.raises(ValueError, match="relative to /testbed"):
        build_task_layer(store, spec.key(), {path: b"x"}, "bad", cache=cache)


def test_task_layer_holds_only_the_delta_and_hides_the_original(built_env):
    store, spec, env_manifest, cache = built_env
    with cache.acquire(spec.key()) as env, Sandbox([env.path]) as sb:
        old_blob = _sh(sb, "cd /testbed && git rev-parse HEAD:src/calc/__init__.py").strip()
        old_commit = _sh(sb, "cd /testbed && git rev-parse HEAD").strip()
        old_util = _sh(sb, "cd /testbed && git rev-parse HEAD:src/calc/util.py").strip()
        env_objects = {
            line.split()[0] for line in _sh(sb, "cd /testbed && git rev-list --objects --all").split("\n") if line
        }
    changes = {
        "src/calc/__init__.py": BUG,
        "tests/test_new.py": b"def test_new():\n    assert True\n",
        "src/calc/util.py": None,
    }
    manifest = build_task_layer(store, spec.key(), changes, "inject a bug", cache=cache)
    assert manifest.kind == "task" and manifest.parent == spec.key()
    assert manifest.size <= 64 * 1024 and manifest.size < env_manifest.size / 100
    assert build_task_layer(store, spec.key(), changes, "inject a bug", cache=cache) == manifest  # built once
    with cache.acquire(spec.key()) as env, cache.acquire(manifest.key) as task, Sandbox([env.path, task.path]) as sb:
        # exec, not read_file: read_file right after start races the sandbox's setup (reported to the lead)
        assert _sh(sb, "cat /testbed/src/calc/__init__.py") == BUG.decode()
        assert _sh(sb, "test -e /testbed/src/calc/util.py && echo present || echo gone").strip() == "gone"
        out = sb.exec(
            "cd /testbed && /venv/bin/python -m pytest -q tests/test_calc.py tests/test_new.py", timeout=120
        ).output
        assert "1 failed, 2 passed" in out
        log = _sh(sb, "cd /testbed && git log --all --format='%H %P|%s'").strip().splitlines()
        ids, subject = log[0].split("|")
        assert len(log) == 1 and subject == "inject a bug" and len(ids.split()) == 1  # a root commit
        assert _sh(sb, "cd /testbed && git status --porcelain").strip() == ""
        for sha in (old_blob, old_commit, old_util):
            assert sb.exec(f"cd /testbed && git cat-file -e {sha}").exit_code != 0, sha
        assert _sh(sb, "cd /testbed && git fsck --no-dangling 2>&1; echo rc=$?").strip().endswith("rc=0")
        assert _sh(sb, "cd /testbed && git diff HEAD --stat").strip() == ""
        task_objects = {
            line.split()[0] for line in _sh(sb, "cd /testbed && git rev-list --objects --all").split("\n") if line
        }
        # the layer holds exactly the new objects (2 blobs, 4 trees, 1 commit) and whiteouts, no copied-up old ones
        objects = task.path / "testbed" / ".git" / "objects"
        stored = {p.parent.name + p.name for p in objects.glob("*/*") if p.is_file()}
        assert stored == task_objects - env_objects and len(stored) == 7
