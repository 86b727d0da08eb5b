"""Git mirrors and the build errors of dataset rows: what is the host's fault is never recorded as the spec's.

Real git repositories in a temporary mirror folder; the "network" failure is a clone from a closed port on
127.0.0.1 (nothing leaves the machine).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from swebox.envs.cache import EnvSpec, InterpreterNotFound, LayerStore, build_env
from swebox.envs.cache.checkout import CheckoutSpec
from swebox.envs.cache.sources import MirrorError, github_name, mirror_path, require_commit


def _repo(path, files):
    path.mkdir(parents=True)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    for name, text in files.items():
        (path / name).write_text(text)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def test_github_sources_map_to_owner__name_in_the_mirror(tmp_path):
    assert github_name("git+https://github.com/django/django.git") == ("django", "django")
    assert github_name("git+https://github.com/python-pillow/Pillow") == ("python-pillow", "Pillow")
    assert github_name("git+https://example.org/a/b.git") is None
    (tmp_path / "django__django.git").mkdir()
    assert mirror_path("git+https://github.com/django/django.git", str(tmp_path)) == tmp_path / "django__django.git"
    assert mirror_path("git+https://github.com/django/django.git", "") is None


def test_a_repository_missing_from_the_mirror_names_the_path_and_is_not_recorded(tmp_path):
    store = LayerStore(tmp_path / "store")
    spec = EnvSpec(source="git+https://github.com/pallets/flask.git", commit="a" * 40)
    for _ in range(2):  # the retry is not refused as a recorded failure (no --force needed)
        with pytest.raises(
            MirrorError, match=f"expected the repository pallets/flask at {tmp_path}/mirror/pallets__flask.git"
        ):
            build_env(store, spec, mirror=str(tmp_path / "mirror"))
    assert store.failure(spec.key()) is None


def test_a_commit_missing_from_the_mirror_is_the_mirrors_fault(tmp_path):
    head = _repo(tmp_path / "work", {"a.py": "x = 1\n"})
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(tmp_path / "work"), str(tmp_path / "m" / "o__n.git")], check=True
    )
    assert require_commit(tmp_path / "m" / "o__n.git", head[:8], from_mirror=True) == head
    with pytest.raises(MirrorError, match=r"expected commit 0{40}.*git -C .*o__n\.git fetch origin 0{40}"):
        require_commit(tmp_path / "m" / "o__n.git", "0" * 40, from_mirror=True)
    store = LayerStore(tmp_path / "store")
    spec = EnvSpec(source="git+https://github.com/o/n.git", commit="0" * 40)
    with pytest.raises(MirrorError):
        build_env(store, spec, mirror=str(tmp_path / "m"))
    assert store.failure(spec.key()) is None


def test_a_failed_clone_is_not_recorded_as_a_broken_spec(tmp_path):
    store = LayerStore(tmp_path / "store")
    spec = EnvSpec(source="git+http://127.0.0.1:9/nothing.git", commit="a" * 40)  # a closed local port
    for _ in range(2):
        with pytest.raises(OSError, match=r"cloning http://127\.0\.0\.1:9/nothing\.git failed \(network\?"):
            build_env(store, spec)
    assert store.failure(spec.key()) is None


def test_a_python_the_host_lacks_names_the_version_and_how_to_get_it(tmp_path):
    store = LayerStore(tmp_path / "store")
    spec = EnvSpec(source="git+https://github.com/django/django.git", commit="a" * 40, python="3.5")
    with pytest.raises(InterpreterNotFound, match=r"no Python 3\.5 on this host.*uv python install 3\.5"):
        build_env(store, spec)
    assert store.failure(spec.key()) is None


def test_checkout_keys_follow_commit_patch_commands_and_env():
    env = EnvSpec(source="git+https://github.com/o/n.git", commit="a" * 40)
    key = CheckoutSpec(env, "b" * 40).key()
    others = {
        CheckoutSpec(env, "c" * 40).key(),
        CheckoutSpec(env, "b" * 40, patch="x").key(),
        CheckoutSpec(env, "b" * 40, commands=("make",)).key(),
        CheckoutSpec(EnvSpec(source=env.source, commit="d" * 40), "b" * 40).key(),
    }
    assert key == CheckoutSpec(env, "b" * 40).key() and key.startswith("task-") and key not in others
    assert len(others) == 4
    with pytest.raises(ValueError, match="CheckoutSpec.env: expected a git source"):
        CheckoutSpec(EnvSpec(source="pypi:toolz==1.0.0"), "b" * 40)


def test_cache_build_names_rows_without_an_environment(tmp_path, capsys):
    from swebox.scripts.cli import main

    row = {
        "repo_name": "nosuch",
        "commit_hash": "b" * 40,
        "problem_statement": "x",
        "parsed_commit_content": json.dumps({"old_commit_hash": "a" * 40, "file_diffs": []}),
        "execution_result_content": json.dumps(
            {"test_file_codes": ["def test_a():\n    pass\n"], "test_file_names": ["test_1.py"]}
        ),
        "expected_output_json": json.dumps({"test_a": "PASSED"}),
    }
    rows = tmp_path / "r2e.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    assert main(["cache", "--store", str(tmp_path / "store"), "build", "--tasks", str(rows)]) == 1
    err = capsys.readouterr().err
    assert f"FAILED task nosuch__{'b' * 40}: expected an env recipe; found none" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(
            {
                "instance_id": "x__y-1",
                "repo": "x/y",
                "version": "1.0",
                "base_commit": "a" * 40,
                "patch": "",
                "FAIL_TO_PASS": ["t.py::test_a"],
            }
        )
        + "\n"
    )
    assert main(["cache", "--store", str(tmp_path / "store"), "build", "--tasks", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 1, field 'repo': Task.repo: expected a repository with an environment recipe" in err


def test_the_starting_tree_keeps_modes_symlinks_and_deletions_and_applies_the_patch(tmp_path):
    import io
    import os
    import tarfile

    from swebox.envs.cache import BuildFailure
    from swebox.envs.cache.checkout import changed_files, target_tree

    repo = tmp_path / "r"
    old = _repo(repo, {"a.py": "x = 1\n", "gone.py": "old\n"})
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "gone.py").unlink()
    (repo / "run.sh").write_text("echo hi\n")
    os.chmod(repo / "run.sh", 0o755)
    (repo / "link.py").symlink_to("a.py")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "two"], check=True)
    new = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    bug = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    data, written, deleted = changed_files(repo, old, target_tree(repo, new, bug))
    assert sorted(written) == ["a.py", "link.py", "run.sh"] and deleted == ["gone.py"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members["a.py"]).read() == b"x = 2\n"  # the patch is applied on the new tree
        assert members["run.sh"].mode == 0o755 and members["link.py"].issym()
        assert members["link.py"].linkname == "a.py"
    with pytest.raises(BuildFailure, match="the task's patch does not apply"):
        target_tree(repo, old, bug.replace("x = 1", "y = 1"))
