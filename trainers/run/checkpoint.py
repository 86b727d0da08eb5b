"""Atomic, complete training checkpoints: model, optimizer, scheduler, step, RNG states, data position.

A checkpoint is a folder ``step_00000010/`` inside the checkpoint root. It is written under a temporary
name (``.tmp-...``), every file fsynced, a ``manifest.json`` listing the files and their sizes written
last, and only then renamed into place: a crash at any moment leaves either the previous set of
checkpoints or the new complete one, never a half-written folder that :func:`latest_checkpoint` would
pick. Leftover temporary folders are deleted by the next save and by a resuming trainer (before it writes
anything). Before writing, the free space of the checkpoint root is checked against the size of the newest
checkpoint (or, for the first one, an estimate from the tensors): a disk too full fails with a clear
:class:`CheckpointError` and writes nothing.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from swebox.envs.cache.packing import fsync_path

PREFIX = "step_"
TEMP_PREFIX = ".tmp-"
MANIFEST = "manifest.json"
FORMAT_VERSION = 1
FREE_SPACE_MARGIN = 1.1
"""A checkpoint needs this much more free space than its expected size (metadata, a larger optimizer state)."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or does not match what loads it."""


@dataclass
class TrainingState:
    """What a resumed run needs besides the tensors restored in place."""

    step: int
    """Training steps completed when the checkpoint was written."""
    data_position: dict[str, Any] = field(default_factory=dict)
    """Where the task sampler stands (e.g. epoch and index), as the trainer wrote it."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else JSON-serialisable the trainer wants back (e.g. the wandb run id)."""


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


# ------------------------------------------------------------------------------------------- RNG states


def capture_rng_state() -> dict[str, Any]:
    """RNG states of python, numpy and torch (CPU and every CUDA device), as tensors and plain values."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        # numpy's key array becomes a tensor so that the file loads with torch.load(weights_only=True)
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    random.setstate(_as_tuples(state["python"]))
    n = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": n["bit_generator"],
            "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
            "has_gauss": n["has_gauss"],
            "gauss": n["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(value: Any) -> Any:
    # random.setstate wants tuples all the way down; a round trip through some loaders yields lists
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


# -------------------------------------------------------------------------------------------- writing


def _save_synced(obj: Any, path: Path) -> None:
    with open(path, "wb") as f:
        if isinstance(obj, bytes):
            f.write(obj)
        else:
            torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(
    root: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    data_position: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically into ``root`` and return its folder.

    Afterwards only the newest ``keep_last`` complete checkpoints are kept (all when ``None``).
    Saving a step that already exists (a resumed run passing it again) replaces it.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(root)
    check_free_space(root, step, model, optimizer)
    name = checkpoint_name(step)
    tmp = root / f"{TEMP_PREFIX}{name}-{os.getpid()}"
    tmp.mkdir()
    _save_synced(model.state_dict(), tmp / "model.pt")
    if optimizer is not None:
        _save_synced(optimizer.state_dict(), tmp / "optimizer.pt")
    if scheduler is not None:
        _save_synced(scheduler.state_dict(), tmp / "scheduler.pt")
    _save_synced(capture_rng_state(), tmp / "rng.pt")
    state = TrainingState(step=step, data_position=dict(data_position or {}), extra=dict(extra or {}))
    _save_synced(json.dumps(state.__dict__, indent=1).encode(), tmp / "trainer_state.json")
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
    manifest = {"format_version": FORMAT_VERSION, "step": step, "saved_at": time.time(), "files": files}
    _save_synced(json.dumps(manifest, indent=1).encode(), tmp / MANIFEST)
    fsync_path(tmp)
    final = _publish(tmp, root / name)
    if keep_last is not None:
        prune_checkpoints(root, keep_last)
    return final


def expected_size(root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes the next checkpoint will take: the newest one's size, or for the first one the model's tensors and,
    with an optimizer, twice that again (Adam's two moments; its state is empty before the first update)."""
    newest = latest_checkpoint(root)
    if newest is not None:
        return sum(p.stat().st_size for p in newest.iterdir())
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in model.state_dict().values()}
    model_bytes = sum(storages.values())  # tied weights (embedding = output layer) are saved once
    return model_bytes * (3 if optimizer is not None else 1)


def check_free_space(root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Raise :class:`CheckpointError` when ``root`` has too little free space for the checkpoint of ``step``."""
    needed = int(expected_size(root, model, optimizer) * FREE_SPACE_MARGIN)
    free = shutil.disk_usage(root).free
    if free < needed:
        raise CheckpointError(
            f"checkpoint of step {step}: expected at least {needed / 2**20:.1f} MiB free in {root}; found "
            f"{free / 2**20:.1f} MiB; nothing was written and the previous checkpoints are intact; free space "
            "(or lower checkpoint.keep_last, or set checkpoint.dir to a larger disk), then resume with --resume"
        )


def _publish(tmp: Path, final: Path) -> Path:
    """Rename the finished temporary folder to its final name: the one step that makes it visible."""
    if final.exists():
        # rename() cannot replace a non-empty folder: move the old one aside first. A crash in between
        # leaves both under temporary names, so the next-older checkpoint is the newest complete one.
        aside = final.with_name(f"{TEMP_PREFIX}old-{final.name}-{os.getpid()}")
        os.rename(final, aside)
        os.rename(tmp, final)
        shutil.rmtree(aside)
    else:
        os.rename(tmp, final)
    fsync_path(final.parent)
    return final


def remove_stale_temps(root: Path) -> None:
    """Delete temporary folders left by saves that crashed before their rename."""
    for path in root.glob(f"{TEMP_PREFIX}*"):
        shutil.rmtree(path, ignore_errors=True)


def prune_checkpoints(root: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints; return the deleted folders."""
    if keep_last < 1:
        raise ValueError(f"expected keep_last >= 1; found {keep_last}; keep at least the newest checkpoint")
    old = list_checkpoints(root)[:-keep_last]
    for path in old:
        shutil.rmtree(path)
    return old


# -------------------------------------------------------------------------------------------- reading


def is_complete(path: Path) -> bool:
    """The folder has a manifest and every file it lists, at the size it lists."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        return all((path / n).stat().st_size == size for n, size in manifest["files"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints in ``root``, oldest first; temporary and incomplete folders are skipped."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for path in root.glob(f"{PREFIX}*"):
        step = path.name[len(PREFIX) :]
        if path.is_dir() and step.isdigit() and is_complete(path):
            found.append((int(step), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint in ``root``, or ``None``."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
    map_location: str | torch.device = "cpu",
) -> TrainingState:
    """Restore a checkpoint in place (model, optimizer, scheduler, RNG) and return the training state."""
    path = Path(path)
    if not is_complete(path):
        raise CheckpointError(
            f"expected a complete checkpoint folder with {MANIFEST}; found {path} incomplete or missing; "
            "pass a folder returned by latest_checkpoint()"
        )

    def load(name: str) -> Any:
        return torch.load(path / name, map_location=map_location, weights_only=True)

    model.load_state_dict(load("model.pt"))
    for obj, name in ((optimizer, "optimizer.pt"), (scheduler, "scheduler.pt")):
        if obj is None:
            continue
        if not (path / name).exists():
            raise CheckpointError(
                f"expected {name} in {path}; found none (saved without it); resume without that object "
                "or from a checkpoint that has it"
            )
        obj.load_state_dict(load(name))
    if restore_rng:
        restore_rng_state(load("rng.pt"))
    raw = json.loads((path / "trainer_state.json").read_text())
    return TrainingState(step=raw["step"], data_position=raw["data_position"], extra=raw["extra"])


def load_optimizer_moments(path: str | Path, optimizer: torch.optim.Optimizer) -> None:
    """Start ``optimizer`` from the moments (Adam's running averages) saved in checkpoint ``path``.

    Only the per-parameter state is taken; the learning rate, betas and the other hyperparameters stay this
    run's. The parameters must be the ones the checkpoint's optimizer had, in the same order and shapes (the same
    architecture), else a CheckpointError says which differs.
    """
    path = Path(path)
    if not is_complete(path) or not (path / "optimizer.pt").exists():
        raise CheckpointError(
            f"optim.moments_from: expected a complete checkpoint folder with optimizer.pt; "
            f"found {path} incomplete, missing or without it; pass a step_N folder of a run's "
            "checkpoints (e.g. a warm start's OUT/sft/checkpoints/step_N)"
        )
    saved = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved_ids = [i for group in saved["param_groups"] for i in group["params"]]
    if len(saved_ids) != len(params):
        raise CheckpointError(
            f"optim.moments_from={path}: expected moments for {len(params)} parameters; found "
            f"{len(saved_ids)}; use a checkpoint of the same model architecture"
        )
    for param, key in zip(params, saved_ids, strict=True):
        state = saved["state"].get(key)
        if state is None:
            continue
        if state["exp_avg"].shape != param.shape:
            raise CheckpointError(
                f"optim.moments_from={path}: expected a moment of shape {tuple(param.shape)}; "
                f"found {tuple(state['exp_avg'].shape)}; use a checkpoint of the same model "
                "architecture"
            )
        optimizer.state[param] = {
            k: v.to(param.device) if torch.is_tensor(v) and v.dim() else v.clone() for k, v in state.items()
        }


def earlier_run(run_dir: str | Path, ckpt_dir: str | Path) -> str:
    """What a run folder holds of an earlier run, as a phrase ('' when nothing would be lost by starting there):
    its metrics.jsonl's last step and its newest complete checkpoint."""
    held = []
    metrics = Path(run_dir) / "metrics.jsonl"
    lines = metrics.read_text(encoding="utf-8", errors="replace").splitlines() if metrics.is_file() else []
    if any(line.strip() for line in lines):
        try:
            held.append(f"metrics.jsonl up to step {json.loads(lines[-1])['step']}")
        except (ValueError, KeyError, TypeError):  # a cut or foreign last line: the file still holds a run
            held.append("metrics.jsonl")
    newest = latest_checkpoint(ckpt_dir) if Path(ckpt_dir).is_dir() else None
    if newest is not None:
        held.append(f"checkpoint {newest}")
    if (Path(run_dir) / "policy").is_dir():
        held.append("policy/")
    return ", ".join(held)
