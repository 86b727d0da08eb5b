from __future__ import annotations

import sys
from pathlib import Path

import pytest
from swebox.envs.cache.interpreters import (
    Interpreter,
    InterpreterNotFound,
    discover,
    find_interpreter,
    matches,
)

POOL = (
    Interpreter("/root/.pyenv/versions/3.11.7/bin/python3.11", "3.11.7", "/root/.pyenv/versions/3.11.7", False),
    Interpreter("/usr/bin/python3.11", "3.11.2", "/usr", True),
    Interpreter("/opt/py/3.12.1/bin/python3.12", "3.12.1", "/opt/py/3.12.1", True),
    Interpreter("/opt/py/3.12.4/bin/python3.12", "3.12.4", "/opt/py/3.12.4", True),
)


def test_version_matching():
    assert matches("3.11.7", "3.11") and matches("3.11.7", "3.11.7")
    assert not matches("3.11.7", "3.1") and not matches("3.11.7", "3.11.8") and not matches("3.1.0", "3.11")


def test_prefers_reachable_then_newest():
    assert find_interpreter("3.11", POOL).path == "/usr/bin/python3.11"  # 3.11.7 sits under a 0700 /root
    assert find_interpreter("3.11.7", POOL).prefix == "/root/.pyenv/versions/3.11.7"
    assert find_interpreter("3.12", POOL).version == "3.12.4"
    assert find_interpreter("3.12.1", POOL).version == "3.12.1"


def test_missing_version_lists_what_exists():
    expected = r"no Python 3\.99 on this host; available: 3\.11\.2, 3\.11\.7, 3\.12\.1, 3\.12\.4\. Install it"
    with pytest.raises(InterpreterNotFound, match=expected):
        find_interpreter("3.99", POOL)


def test_discover_finds_the_running_interpreter():
    found = discover()
    version = ".".join(map(str, sys.version_info[:3]))
    assert any(i.version == version and i.prefix == sys.base_prefix for i in found)
    assert all(i.version.startswith("3.") and i.path.startswith("/") for i in found)


def test_discovery_looks_in_readable_prefixes_and_flags_unreachable_ones(tmp_path, monkeypatch):
    from swebox.envs.cache.interpreters import _candidate_paths

    prefix = tmp_path / "py"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("SWEBOX_PYTHONS", str(prefix))
    assert str(prefix / "bin" / "python3") in _candidate_paths()
    found = discover()
    system = [i for i in found if i.path.startswith("/usr/")]
    assert system and all(i.reachable for i in system)  # /usr/bin/python3.X: every user can run it
    # pyenv builds under a 0700 /root are found (a clear error can name them) but flagged as unusable
    private = Path.home().stat().st_mode & 0o001 == 0
    assert all(not i.reachable for i in found if private and i.path.startswith(f"{Path.home()}/"))
