"""Checkpoints: an exact round trip, resuming gives the same run, crashes never leave a usable half."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from swebox.trainers.run import checkpoint as ckpt


def make_training(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    return model, optimizer, scheduler


def train_steps(model, optimizer, scheduler, n: int) -> list[float]:
    """Steps that consume all three RNGs, so a resume that forgets one of them diverges."""
    trace = []
    for _ in range(n):
        x = torch.randn(8, 4) + float(np.random.rand()) + random.random()
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        trace.append(loss.item())
    return trace


def params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path):
    # uninterrupted: 3 steps, checkpoint, 3 more steps
    model, opt, sched = make_training()
    train_steps(model, opt, sched, 3)
    path = ckpt.save_checkpoint(tmp_path, 3, model, opt, sched, data_position={"epoch": 0, "index": 12})
    expected_trace = train_steps(model, opt, sched, 3)
    expected_params = params(model)

    # a fresh process-like start from other weights and RNG states, resumed from the checkpoint
    model2, opt2, sched2 = make_training(seed=123)
    random.seed(99)
    np.random.seed(99)
    state = ckpt.load_checkpoint(path, model2, opt2, sched2)
    assert state.step == 3 and state.data_position == {"epoch": 0, "index": 12}
    assert sched2.last_epoch == 3
    assert train_steps(model2, opt2, sched2, 3) == expected_trace
    for a, b in zip(params(model2), expected_params, strict=True):
        assert torch.equal(a, b)


def test_checkpoint_holds_every_part(tmp_path):
    model, opt, sched = make_training()
    path = ckpt.save_checkpoint(tmp_path, 7, model, opt, sched, extra={"wandb_id": "abc"})
    assert path.name == "step_00000007"
    names = {p.name for p in path.iterdir()}
    expected = {"model.pt", "optimizer.pt", "scheduler.pt", "rng.pt", "trainer_state.json", "manifest.json"}
    assert names == expected
    assert ckpt.load_checkpoint(path, make_training()[0]).extra == {"wandb_id": "abc"}


def test_keep_last_n(tmp_path):
    model = make_training()[0]
    for step in (1, 2, 3, 4):
        ckpt.save_checkpoint(tmp_path, step, model, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000003", "step_00000004"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000004"]
    with pytest.raises(ValueError, match="keep_last >= 1"):
        ckpt.prune_checkpoints(tmp_path, 0)


def test_ordering_is_numeric_and_resaving_a_step_replaces_it(tmp_path):
    model = make_training()[0]
    ckpt.save_checkpoint(tmp_path, 9, model)
    ckpt.save_checkpoint(tmp_path, 10, model)
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000010"
    with torch.no_grad():
        model[0].weight.fill_(0.5)
    ckpt.save_checkpoint(tmp_path, 10, model)
    fresh = make_training()[0]
    ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path), fresh)
    assert torch.all(fresh[0].weight == 0.5)
    assert len(ckpt.list_checkpoints(tmp_path)) == 2


def test_failed_rename_leaves_the_previous_checkpoint_newest(tmp_path, monkeypatch):
    model = make_training()[0]
    ckpt.save_checkpoint(tmp_path, 1, model)

    def crash(tmp, final):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(ckpt, "_publish", crash)
    with pytest.raises(OSError, match="simulated"):
        ckpt.save_checkpoint(tmp_path, 2, model)
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000001"
    assert any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())  # the half is there, unused
    monkeypatch.undo()
    ckpt.save_checkpoint(tmp_path, 3, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001", "step_00000003"]


def test_killed_process_mid_save_is_never_picked_up(tmp_path):
    # a real crash: the saving process SIGKILLs itself after writing every file, before the rename
    script = textwrap.dedent(f"""
        import os, signal, torch
        from swebox.trainers.run import checkpoint as ckpt
        model = torch.nn.Linear(2, 2)
        ckpt.save_checkpoint({str(tmp_path)!r}, 1, model)
        ckpt._publish = lambda tmp, final: os.kill(os.getpid(), signal.SIGKILL)
        ckpt.save_checkpoint({str(tmp_path)!r}, 2, model)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-step_00000002")]
    assert len(leftovers) == 1 and (leftovers[0] / "manifest.json").exists()  # complete but unpublished
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000001"]


def test_folder_with_a_checkpoint_name_but_missing_files_is_skipped(tmp_path):
    model = make_training()[0]
    good = ckpt.save_checkpoint(tmp_path, 1, model)
    bad = ckpt.save_checkpoint(tmp_path, 2, model)
    os.truncate(bad / "model.pt", 10)  # torn write: the manifest's size no longer matches
    (tmp_path / "step_00000003").mkdir()  # no manifest at all
    assert ckpt.latest_checkpoint(tmp_path) == good
    with pytest.raises(ckpt.CheckpointError, match="incomplete"):
        ckpt.load_checkpoint(bad, model)


def test_loading_an_optimizer_absent_from_the_checkpoint_is_an_error(tmp_path):
    model, opt, _ = make_training()
    path = ckpt.save_checkpoint(tmp_path, 1, model)
    with pytest.raises(ckpt.CheckpointError, match="optimizer.pt"):
        ckpt.load_checkpoint(path, model, opt)


def test_rng_round_trip():
    state = ckpt.capture_rng_state()
    expected = (random.random(), float(np.random.rand()), torch.rand(1).item(), np.random.randn())
    ckpt.restore_rng_state(state)
    assert (random.random(), float(np.random.rand()), torch.rand(1).item(), np.random.randn()) == expected


def test_empty_or_missing_root_has_no_checkpoint(tmp_path):
    assert ckpt.latest_checkpoint(tmp_path / "nowhere") is None
    assert ckpt.latest_checkpoint(tmp_path) is None


def test_moments_from_a_checkpoint_start_a_new_run_with_its_own_hyperparameters(tmp_path):
    """optim.moments_from: the new optimizer takes the saved Adam moments (so its first step is the step the old
    run would have taken with the new lr), keeps its own lr, and refuses another architecture's moments."""
    model, opt, sched = make_training()
    train_steps(model, opt, sched, 3)
    path = ckpt.save_checkpoint(tmp_path, 3, model, opt, sched)

    fresh = make_training(seed=1)[0]
    fresh.load_state_dict(model.state_dict())
    carried = torch.optim.AdamW(fresh.parameters(), lr=5e-3)
    ckpt.load_optimizer_moments(path, carried)
    assert carried.param_groups[0]["lr"] == 5e-3
    for p, q in zip(fresh.parameters(), model.parameters(), strict=True):
        assert torch.equal(carried.state[p]["exp_avg"], opt.state[q]["exp_avg"])
        assert torch.equal(carried.state[p]["exp_avg_sq"], opt.state[q]["exp_avg_sq"])
    # the same gradient then moves the weights exactly like the old optimizer at the new lr
    for group in opt.param_groups:
        group["lr"] = 5e-3
    x = torch.randn(8, 4)
    for m, o in ((fresh, carried), (model, opt)):
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    for a, b in zip(fresh.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)

    other = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    with pytest.raises(ckpt.CheckpointError, match="same model architecture"):
        ckpt.load_optimizer_moments(path, torch.optim.AdamW(other.parameters()))
    with pytest.raises(ckpt.CheckpointError, match="optimizer.pt"):
        ckpt.load_optimizer_moments(tmp_path / "step_00000009", torch.optim.AdamW(fresh.parameters()))
