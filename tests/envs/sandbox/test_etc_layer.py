"""The sandbox's minimal /etc: built once per host by content (rootfs.etc_layer), a read-only lower layer."""

from __future__ import annotations

import os

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.sandbox.rootfs import etc_layer, minimal_etc


def tree(folder: str) -> dict[str, tuple[int, int]]:
    out = {}
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            st = os.lstat(os.path.join(parent, name))
            out[os.path.relpath(os.path.join(parent, name), folder)] = (st.st_mode, st.st_mtime_ns)
    return out


def test_one_etc_layer_per_content(tmp_path):
    root = str(tmp_path / "etc-layers")
    policy = SandboxPolicy()
    first = etc_layer(policy, root)
    assert etc_layer(policy, root) == first  # reused, not rebuilt
    other = etc_layer(SandboxPolicy(hostname="other"), root)
    assert other != first
    with open(os.path.join(other, "etc", "hosts")) as f:
        assert "other" in f.read()
    assert sorted(os.listdir(root)) == sorted(
        os.path.basename(p) for p in (first, other)
    )  # nothing half-built left beside them
    for name in minimal_etc(policy):  # every generated entry and every host entry copied
        assert os.path.lexists(os.path.join(first, "etc", name)), name


@pytest.mark.parametrize("backend", ["overlay", "extract"])
def test_the_sandbox_sees_it_and_cannot_change_it(base_layer, work_root, backend):
    policy = SandboxPolicy(work_root=work_root, backend=backend)
    folder = etc_layer(policy)  # the one the sandbox uses
    before = tree(folder)
    with Sandbox([base_layer], policy) as sb:
        r = sb.exec(
            "grep -c . /etc/hosts; test -s /etc/ld.so.cache && echo cache; stat -c %U /etc/passwd; "
            "echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; rm -rf /etc/ssl; touch /etc/new; echo done"
        )
        assert r.exit_code == 0 and r.output.split() == ["3", "cache", "root", "done"], r.output
        assert "evil" in sb.exec("cat /etc/passwd").output  # the session's own copy-on-write view
        sb.reset()
        r = sb.exec("grep -c evil /etc/passwd; ls /etc/new 2>&1; ls /etc/ssl >/dev/null && echo ssl")
        assert r.output.split()[0] == "0" and "No such file" in r.output and "ssl" in r.output.split()
    assert tree(folder) == before  # the host's copy is untouched


def test_a_folder_someone_else_can_write_is_refused(tmp_path):
    root = tmp_path / "planted"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    with pytest.raises(SandboxError, match="only it can write"):
        etc_layer(SandboxPolicy(), str(root))


def test_the_host_etc_is_fingerprinted_again_after_the_recheck_interval(tmp_path, monkeypatch):
    from swebox.envs.sandbox import rootfs

    root = str(tmp_path / "etc-layers")
    policy = SandboxPolicy(hostname="recheck")
    first = etc_layer(policy, root)
    walks = []
    real = rootfs._fingerprint
    monkeypatch.setattr(rootfs, "_fingerprint", lambda path, digest: (walks.append(path), real(path, digest)))
    assert etc_layer(policy, root) == first and walks == []  # within the interval: the last answer
    now = rootfs._now()
    monkeypatch.setattr(rootfs, "_now", lambda: now + rootfs.ETC_RECHECK_S)
    assert etc_layer(policy, root) == first and walks  # after it: the host's entries looked at again
    walks.clear()
    os.rename(first, first + "-gone")  # a folder removed meanwhile is never returned
    monkeypatch.setattr(rootfs, "_now", lambda: now)
    rebuilt = etc_layer(policy, root)
    assert rebuilt == first and walks and os.path.isdir(rebuilt)
