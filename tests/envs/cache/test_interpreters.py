from __future__ import annotations

import sys

import pytest
from swebox.envs.cache.interpreters import (
    Interpreter,
    InterpreterNotFound,
    discover,
    find_interpreter,
    matches,
)

POOL = (
    Interpreter("/root/.pyenv/versions/3.11.7/bin/python3.11", "3.11.7", "/root/.pyenv/versions/3.11.7",
                False),
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
