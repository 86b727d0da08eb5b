"""The host checks name the kernel setting that stops sandboxes and the command that fixes it."""

from __future__ import annotations

import pytest
from swebox.envs.sandbox import SandboxError, probe


def _sysctls(monkeypatch, values: dict[str, int]) -> None:
    monkeypatch.setattr(probe, "_read_int", lambda path: values.get(path.rsplit("/", 1)[-1]))


def test_ubuntus_apparmor_restriction_is_named_with_its_fix(monkeypatch):
    _sysctls(monkeypatch, {"max_user_namespaces": 100, "apparmor_restrict_unprivileged_userns": 1})
    with pytest.raises(SandboxError, match=r"sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"):
        probe.check_user_namespaces(rootless=True)
    probe.check_user_namespaces(rootless=False)  # host root's namespaces keep their capabilities


def test_disabled_namespaces_are_named_with_their_fix(monkeypatch):
    _sysctls(monkeypatch, {"max_user_namespaces": 0})
    with pytest.raises(SandboxError, match=r"sysctl -w user.max_user_namespaces"):
        probe.check_user_namespaces(rootless=False)
    _sysctls(monkeypatch, {"max_user_namespaces": 100, "unprivileged_userns_clone": 0})
    with pytest.raises(SandboxError, match=r"kernel.unprivileged_userns_clone=1"):
        probe.check_user_namespaces(rootless=True)
    _sysctls(monkeypatch, {"max_user_namespaces": 100})
    probe.check_user_namespaces(rootless=True)
