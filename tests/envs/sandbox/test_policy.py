"""SandboxPolicy: safe defaults, validation with helpful messages, dict round-trip."""

from __future__ import annotations

import pytest
from swebox.envs.sandbox import SandboxError, SandboxPolicy


def test_defaults_are_safe():
    policy = SandboxPolicy()
    assert policy.network == "none"
    assert policy.host_uid > 0
    assert policy.memory_mb > 0 and policy.max_processes > 0 and policy.upper_size_mb > 0
    assert "PYTHONPATH" not in policy.env


def test_round_trips_through_a_dict():
    policy = SandboxPolicy(backend="extract", memory_mb=512, ro_binds=("/opt/py",), env={"A": "1"})
    data = policy.to_dict()
    assert data["ro_binds"] == ["/opt/py"]
    assert SandboxPolicy.from_dict(data) == policy


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"backend": "docker"}, "expected one of"),
        ({"network": "bridge"}, "expected one of"),
        ({"memory_mb": 0}, "positive integer"),
        ({"host_uid": 0}, "never be host root"),
        ({"uid_count": 1 << 22}, "the last sandbox's id block's end"),  # 1025 blocks of 4M ids pass 2**32
        ({"workdir": "testbed"}, "workdir: expected an absolute path"),
        ({"env": {"A=B": "1"}}, "env: expected names without '='"),
        ({"env": {"A": "x\0y"}}, "no NUL bytes"),
        ({"ro_binds": ("relative/path",)}, "absolute"),
        ({"etc_files": ("../shadow",)}, "inside /etc"),
        ({"command_timeout_s": -1}, "expected > 0"),
    ],
)
def test_bad_values_are_rejected_with_a_clear_message(kwargs, needle):
    with pytest.raises(SandboxError, match=needle):
        SandboxPolicy(**kwargs)


def test_unknown_keys_are_listed():
    with pytest.raises(SandboxError, match="unknown keys \\['memory'\\]"):
        SandboxPolicy.from_dict({"memory": 5})
