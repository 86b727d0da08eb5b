"""The extract backend's restore: a complete private copy of every layer, made anew for each rollout (the paper's
way, kept as the baseline of every comparison). nsinit mounts the tmpfs the copy goes to; this copies into it.

On disk, deleting the last copy and copying the next slowed down with every reset (plain `rm -rf` + `cp -r` of a
188 MB tree on this host's disk: 0.7 s, then 4 s, 7 s, ... 12 s; docs/benchmarks.md), hence the tmpfs.
Standard library only, no relative imports: nsinit's C half (csrc/init.c) runs it inside the namespace as
`python -I -S extract.py SPEC TARGET`, SPEC being copy_layers' other arguments as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

COPY = ["cp", "-r", "--preserve=mode,timestamps,links", "--no-dereference"]


def copy_layers(bases: list[str], layers: list[dict], lowers: list[str], target: str) -> None:
    """Copy `bases` (the skeleton, then /etc), then each layer, lowest first, into `target`: an archive when the
    host opened one for us (its fd), else the layer's folder with its whiteouts and opaque folders applied."""
    run_tool(["cp", "-a", bases[0] + "/.", target])
    for base in bases[1:]:
        run_tool([*COPY, base + "/.", target])
    for layer, lower in zip(layers, lowers, strict=True):
        if layer["archive_fd"] >= 0:  # /dev/fd/N reopens it from the start
            fd = layer["archive_fd"]
            run_tool(["tar", "-xzf", f"/dev/fd/{fd}", "-C", target, "--no-same-owner"], pass_fds=[fd])
            continue
        whiteouts, opaque = overlay_markers(lower)
        for rel in opaque:  # an opaque folder hides everything below it in lower layers
            shutil.rmtree(os.path.join(target, rel), ignore_errors=True)
        run_tool([*COPY, lower + "/.", target])
        for rel in whiteouts:
            path = os.path.join(target, rel)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)


def overlay_markers(layer: str) -> tuple[list[str], list[str]]:
    """Relative paths of the whiteouts (0:0 character devices) and opaque folders in a layer folder."""
    whiteouts, opaque = [], []
    for folder, dirs, files in os.walk(layer):
        rel = os.path.relpath(folder, layer)
        for name in dirs:
            try:
                marks = {
                    os.getxattr(os.path.join(folder, name), attr, follow_symlinks=False)
                    for attr in ("user.overlay.opaque", "trusted.overlay.opaque")
                    if attr in os.listxattr(os.path.join(folder, name), follow_symlinks=False)
                }
            except OSError:
                marks = set()
            if b"y" in marks:
                opaque.append(os.path.normpath(os.path.join(rel, name)))
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                whiteouts.append(os.path.normpath(os.path.join(rel, name)))
    return whiteouts, opaque


def run_tool(argv: list[str], pass_fds: list[int] | None = None) -> None:
    """Run cp or tar; a failure says what the tool said (nsinit's own stderr goes nowhere)."""
    result = subprocess.run(
        argv,
        check=False,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds or (),
    )
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"{' '.join(argv[:2])} ... exited with {result.returncode}: {said}")


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    try:
        copy_layers(spec["bases"], spec["layers"], spec["lowers"], sys.argv[2])
    except Exception as exc:  # what init.c reports: the reason, not a traceback
        sys.exit(f"{type(exc).__name__}: {exc}")
