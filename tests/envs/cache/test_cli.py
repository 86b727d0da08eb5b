"""`swebox cache ...` end to end on the fixture project (through add_arguments, as scripts/cli.py wires it)."""

from __future__ import annotations

import argparse
import json

import pytest
from swebox.envs.cache import EnvSpec, LayerStore
from swebox.envs.cache.builder import interpreter_identity
from swebox.scripts.cache_cli import add_arguments, read_env_specs

from .conftest import needs_root
from .fixture_project import write_repo


def swebox(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="swebox")
    add_arguments(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args) or 0)


def _tasks_file(tmp_path, specs: list[EnvSpec], per_env: int) -> str:
    rows = [
        {
            "instance_id": f"t{i}-{j}",
            "repo": "calc",
            "env": s.to_dict(),
            "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        }
        for i, s in enumerate(specs)
        for j in range(per_env)
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_read_env_specs_dedupes(tmp_path):
    a = EnvSpec(source="pypi:toolz==1.0.0")
    b = EnvSpec(source="pypi:semver==3.0.2")
    assert read_env_specs(_tasks_file(tmp_path, [a, b], per_env=3)) == [a, b]


@needs_root
def test_cli_build_ls_verify_export_import_gc(tmp_path, capsys):
    repo, head = write_repo(tmp_path / "calc")
    good = EnvSpec(source=str(repo), commit=head)
    bad = EnvSpec(source=str(repo), commit=head, install=("pip install --no-index no-such-package-xyz",))
    tasks = _tasks_file(tmp_path, [good, bad], per_env=2)
    store = str(tmp_path / "store")
    assert swebox("cache", "--store", store, "build", "--tasks", tasks, "--jobs", "2", "--format", "tar.zst") == 1
    out, err = capsys.readouterr()
    assert "2 envs: 1 built, 0 reused, 1 failed" in out
    assert f"FAILED {bad.key()}" in err and "no-such-package-xyz" in err
    assert swebox("cache", "--store", store, "build", "--tasks", tasks, "--format", "tar.zst") == 1
    out, err = capsys.readouterr()
    assert "1 reused, 1 failed" in out and "failed to build before" in err  # not rebuilt

    assert swebox("cache", "--store", store, "ls") == 0
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert any(good.key() in line and "tar.zst" in line for line in lines)
    # the interpreter the env was built on (a host install here, 3.11 the default): not named by an unpinned key
    python = interpreter_identity(LayerStore(store).require(good.key()))
    assert python.startswith("python-3.11.") or (python.startswith("host:/") and "@3.11." in python), python
    assert any(line.startswith(good.key()) and line.endswith(python) for line in lines), out
    assert any(bad.key() in line and "FAILED: env" in line for line in lines)

    assert swebox("cache", "--store", store, "verify") == 0
    assert "1 of 1 layers verified" in capsys.readouterr()[0]

    assert swebox("cache", "--store", store, "export", "--to", str(tmp_path / "exported")) == 0
    assert (
        swebox("cache", "--store", str(tmp_path / "other"), "import", "--from", str(tmp_path / "exported"), good.key())
        == 0
    )
    assert "copied 1 layers" in capsys.readouterr()[0]
    assert LayerStore(tmp_path / "other").get(good.key()) == LayerStore(store).get(good.key())

    blob = LayerStore(store).blob_path(LayerStore(store).get(good.key()))
    data = bytearray(blob.read_bytes())
    data[7] ^= 0x10
    blob.write_bytes(bytes(data))
    assert swebox("cache", "--store", store, "verify", "--remove-bad") == 1
    assert f"BAD {good.key()}" in capsys.readouterr()[0]
    assert LayerStore(store).ls() == []

    assert swebox("cache", "--store", str(tmp_path / "other"), "gc", "--keep-gb", "0") == 0
    assert "removed 1 layers" in capsys.readouterr()[0]


def test_bad_jobs_is_refused(tmp_path):
    tasks = _tasks_file(tmp_path, [EnvSpec(source="pypi:toolz==1.0.0")], per_env=1)
    with pytest.raises(SystemExit, match="--jobs: expected at least 1"):
        swebox("cache", "--store", str(tmp_path / "s"), "build", "--tasks", tasks, "--jobs", "0")
