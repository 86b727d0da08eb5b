"""The compiled half of the sandbox: the shell session in C (csrc/), built once per host and cached.

Built by the host the first time a sandbox starts, with the C compiler ($CC, else cc or gcc), statically linked
where the C library's static archive is installed (a static binary starts faster: no dynamic loader, no
relocations), dynamically otherwise; bash runs in every sandbox, so the C library is always there.
The binary is named by the source's content and the compiler's identity and published by an atomic rename, so
a reader sees a whole binary or none, and a changed source builds anew.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .policy import SandboxError
from .rootfs import own_folder

SOURCES = Path(__file__).with_name("csrc")
# no -Werror here: a newer compiler's new warning must not stop a user's sandboxes (the tests build with it)
FLAGS = ("-O2", "-Wall", "-Wextra")


def cache_root() -> str:
    """$SWEBOX_BIN_CACHE, else /var/tmp/swebox-bin-<uid>: the sandbox's uid must reach it (mode 0711), and only
    we may write it (a planted binary would run in every sandbox's namespaces)."""
    return os.environ.get("SWEBOX_BIN_CACHE") or f"/var/tmp/swebox-bin-{os.geteuid()}"


def compiler() -> str:
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc")):
        path = shutil.which(name)
        if path:
            return path
    raise SandboxError(
        "swebox builds its sandbox sessions' program (envs/sandbox/csrc) with a C compiler on "
        "first use and found none (looked for $CC, cc, gcc): install one (Debian: apt-get install "
        "gcc libc6-dev) or point $CC at it"
    )


@functools.cache
def session_binary() -> str:
    """The session program's path, built on first use."""
    cc = compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    files = sorted(SOURCES.glob("*.[ch]"))
    digest = hashlib.sha256(f"{version}\0{' '.join(FLAGS)}".encode())
    for source in files:
        digest.update(f"\0{source.name}\0".encode() + source.read_bytes())
    root = cache_root()
    own_folder(root, "session binary folder", "SWEBOX_BIN_CACHE")
    path = os.path.join(root, f"session-{digest.hexdigest()[:24]}")
    if os.path.isfile(path):
        return path
    fd, tmp = tempfile.mkstemp(prefix=".tmp-session-", dir=root)
    os.close(fd)
    try:
        errors = ""
        for link in (["-static"], []):
            result = subprocess.run(
                [cc, *FLAGS, *link, "-o", tmp, *(str(p) for p in files if p.suffix == ".c")],
                capture_output=True,
                text=True,
            )
            if result.returncode == 0:
                break
            errors += result.stderr
        else:
            raise SandboxError(
                f"building the sandbox's session program with {cc} failed:\n{errors[-3000:]}\n"
                "install a working C compiler and C library headers (Debian: apt-get install gcc "
                "libc6-dev) or point $CC at one"
            )
        os.chmod(tmp, 0o755)
        os.rename(tmp, path)  # another process may have put the same binary there first: either is whole
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
