"""The GRPO loop: a step changes the parameters, masked tokens get no gradient, metrics, resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from swebox.envs.episodes.episode import StepResult
from swebox.trainers.policy.models import build_builtin_tokenizer, build_model
from swebox.trainers.rl.learner import Learner, make_batch, token_logprobs
from swebox.trainers.rl.rollout import Trajectory
from swebox.trainers.rl.step_metrics import union_seconds
from swebox.trainers.rl.task_order import TaskSampler
from swebox.trainers.rl.trainer import Trainer
from swebox.trainers.run.config import load_config
from swebox.trainers.run.tracking import STEP_METRICS, read_metrics

from tests.trainers.rl.test_rollout import stub_task

SMALL = [
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "generation.max_new_tokens=2",
    "generation.max_context_tokens=128",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "optim.lr=1e-2",
    "optim.micro_batch_size=3",
    "logging.wandb=disabled",
    "logging.progress=false",
    "rollout.max_parallel_episodes=2",
]


class OneTurn:
    """Reward 1 when the reply's first character has an even code point (a coin flip for a random policy)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id

    def submit_reply(self) -> None:  # no action style: an episode that fills the context ends unsubmitted
        return None

    def close(self) -> None:
        pass

    def reset(self):
        return f"task {self.task_id}"

    def step(self, reply: str) -> StepResult:
        r = float(bool(reply) and ord(reply[0]) % 2 == 0)
        return StepResult("", r, True, False, {"metrics": {"env/resolved": r, "env/turns": 1.0}})


def one_turn_factory(task, n):
    return [OneTurn(task.instance_id) for _ in range(n)]


def make_trainer(tmp_path: Path, *overrides: str) -> Trainer:
    cfg = load_config(None, [*SMALL, f"logging.run_dir={tmp_path / 'run'}", *overrides])
    tasks = [stub_task(f"t{i}") for i in range(3)]
    return Trainer(cfg, tasks=tasks, episode_factory=one_turn_factory, echo=lambda *_: None)


def test_one_step_changes_the_parameters_and_logs_every_metric(tmp_path):
    trainer = make_trainer(tmp_path, "total_steps=1", "checkpoint.every_steps=0")
    before = {k: v.clone() for k, v in trainer.learner.model.state_dict().items()}
    torch.manual_seed(5)  # sampling with a fixed seed: retry a step whose groups all had equal rewards
    record = trainer.step()
    while record["reward/frac_zero_std_groups"] == 1.0:
        record = trainer.step()
    after = trainer.learner.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    for name in STEP_METRICS:
        assert name in record, name
    assert record["policy/kl"] == 0.0 and record["policy/clip_frac"] == 0.0  # one mini-batch: ratio is 1
    assert record["policy/lr"] == pytest.approx(1e-2)
    # the pool now samples from the updated weights
    worker_state = trainer.pool.worker.model.state_dict()
    assert all(torch.equal(worker_state[k], after[k]) for k in after)
    trainer.close()
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == list(range(1, trainer.step_count + 1))


def test_masked_tokens_and_failed_trajectories_get_zero_gradient():
    tok = build_builtin_tokenizer()
    cfg = load_config(None, SMALL)
    torch.manual_seed(0)
    learner = Learner(cfg, build_model(cfg.model, tok))
    # trajectory 0: two model tokens around one observation token; trajectory 1 failed (masked out entirely)
    t0 = Trajectory("a", "g", [10, 11, 12], [20, 21, 22], [1, 0, 1], [-1.0, 0.0, -1.0])
    t1 = Trajectory("b", "g", [10, 11], [30, 31], [1, 1], [-1.0, -1.0], failed=True)
    batch = make_batch([t0, t1], torch.tensor([1.0, 5.0]), torch.tensor([True, False]), tok.pad_token_id)
    assert batch.mask.tolist() == [[0, 0, 1, 0, 1], [0, 0, 0, 0, 0]]  # target positions of 20 and 22 only
    embeds = learner.model.get_input_embeddings()
    inputs = embeds(batch.input_ids).detach().requires_grad_(True)
    logits = learner.model(inputs_embeds=inputs, attention_mask=batch.attention_mask).logits[:, :-1]
    from swebox.trainers.rl import grpo

    logp = grpo.logprobs_from_logits(logits, batch.targets)
    loss, _ = grpo.policy_loss(logp, logp.detach(), batch.advantages, batch.mask)
    grad_logp = torch.autograd.grad(loss, logp, retain_graph=True)[0]
    assert bool((grad_logp[batch.mask == 0] == 0).all()) and bool((grad_logp[batch.mask == 1] != 0).all())
    loss.backward()
    assert float(inputs.grad[1].abs().sum()) == 0.0  # the failed row: no gradient reaches any of its inputs
    # the observation token 21 (input position 4) is seen by the token after it, but its own prediction is masked
    assert float(inputs.grad[0].abs().sum()) > 0.0


def test_learner_logprobs_equal_the_sampling_logprobs_of_the_rollout(tmp_path):
    trainer = make_trainer(tmp_path, "total_steps=1")
    trajs = trainer.pool.run_groups([stub_task("t0")], 4)
    batch = make_batch(trajs, torch.zeros(4), torch.ones(4, dtype=torch.bool), trainer.tokenizer.pad_token_id)
    sampled = batch.old_logprobs.clone()
    with torch.no_grad():
        logp, _ = token_logprobs(trainer.learner.model, batch)
    on = batch.mask.bool()
    assert torch.allclose(logp[on], sampled[on], atol=1e-4)
    trainer.close()


def test_task_sampler_order_is_seeded_and_resumable():
    a = TaskSampler(5, seed=1)
    first = a.take(7)
    assert sorted(first[:5]) == list(range(5)) and a.state() == {"epoch": 1, "index": 2}
    b = TaskSampler(5, seed=1)
    b.load(a.state())
    assert b.take(3) == a.take(3)


def test_union_seconds_counts_overlaps_once():
    assert union_seconds([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_seconds([]) == 0


RUN_SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.trainers.rl.test_rollout import stub_task
from tests.trainers.rl.test_trainer import one_turn_factory, SMALL
from swebox.trainers.run.config import load_config
from swebox.trainers.rl.trainer import Trainer
cfg = load_config(None, [*SMALL, "logging.run_dir={run}", "total_steps=6", "checkpoint.every_steps=2",
                         "checkpoint.keep_last=5", "rollout.max_parallel_episodes=1", *sys.argv[1:]])
trainer = Trainer(cfg, tasks=[stub_task(f"t{{i}}") for i in range(3)], episode_factory=one_turn_factory)
while trainer.step_count < cfg.total_steps:
    trainer.step()
    print("STEP", trainer.step_count, flush=True)
    if {slow} and trainer.step_count == 3:
        time.sleep(60)  # killed here, after checkpoint 2 and a logged step 3
trainer.close()
"""


@pytest.mark.timeout(600)
def test_resume_after_sigkill_continues_from_the_checkpoint(tmp_path):
    root = str(Path(__file__).resolve().parents[3])

    def script(run: Path, slow: bool) -> Path:
        path = tmp_path / f"run_{run.name}_{slow}.py"
        path.write_text(RUN_SCRIPT.format(root=root, run=run, slow=slow))
        return path

    # an uninterrupted reference run
    ref = tmp_path / "ref"
    subprocess.run([sys.executable, str(script(ref, False))], check=True, capture_output=True, timeout=300)
    # the same run killed with SIGKILL after step 3, then resumed
    run = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(script(run, True))], stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.strip() == "STEP 3":
            break
    # killed once step 3's record is in metrics.jsonl (polled: "STEP 3" is printed after the step, but a loaded
    # machine may not have flushed every writer by the time this process reads the line)
    deadline = time.monotonic() + 60
    while [r["step"] for r in read_metrics(run)][-1:] != [3]:
        assert time.monotonic() < deadline, "step 3 never reached metrics.jsonl"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]
    subprocess.run(
        [sys.executable, str(script(run, False)), "checkpoint.resume=true"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    steps = [r["step"] for r in read_metrics(run)]
    assert steps == [1, 2, 3, 4, 5, 6]  # step 3 was redone from checkpoint 2, its torn record dropped
    # same seed, data position and RNG: the resumed run is the uninterrupted one (with one episode at a time;
    # concurrent episodes share torch's RNG in whatever order their threads reach the model)
    ref_rewards = [r["reward/mean"] for r in read_metrics(ref)]
    assert [r["reward/mean"] for r in read_metrics(run)] == ref_rewards
    ref_model = torch.load(ref / "checkpoints" / "step_00000006" / "model.pt", weights_only=True)
    run_model = torch.load(run / "checkpoints" / "step_00000006" / "model.pt", weights_only=True)
    assert all(torch.allclose(ref_model[k], run_model[k], atol=1e-6) for k in ref_model)


def test_the_lr_schedule_counts_training_steps_not_mini_batches():
    """linear over total_steps=4 with 2 mini-batches per step: after 2 steps the lr is half, not 0."""
    cfg = load_config(None, [*SMALL, "total_steps=4", "optim.schedule=linear", "optim.mini_batches=2"])
    tok = build_builtin_tokenizer()
    torch.manual_seed(0)
    learner = Learner(cfg, build_model(cfg.model, tok))
    trajs = [Trajectory("t", "g", [5, 6], [7, 8], [1, 1], [0.0, 0.0]) for _ in range(4)]
    batch = make_batch(trajs, torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, dtype=torch.bool), 0)
    lrs = [learner.update(batch)["policy/lr"] for _ in range(3)]
    assert lrs == pytest.approx([1e-2, 0.75e-2, 0.5e-2])


@pytest.mark.parametrize("advantages", [[1.0, 0.0, -0.5, 0.0, 0.0, 2.0], [0.0] * 6])
def test_rows_with_zero_advantage_are_skipped_and_the_step_is_the_same(advantages):
    """The update does not run rows whose loss is exactly 0. The gradient the optimizer sees equals that of a
    learner that runs every row (up to the order of float sums); when no row is left it is a zero gradient, not
    none, so that AdamW moves the weights exactly as the reference does."""
    cfg = load_config(None, [*SMALL, "optim.micro_batch_size=2", "optim.weight_decay=0.1"])
    tok = build_builtin_tokenizer()
    trajs = [Trajectory("t", "g", [5, 6, 7], [8 + i, 9, 10 + i], [1, 0, 1], [0.0] * 3) for i in range(6)]
    batch = make_batch(trajs, torch.tensor(advantages), torch.ones(6, dtype=torch.bool), tok.pad_token_id)
    learners, grads, ran = [], [], []
    for skip in (True, False):
        torch.manual_seed(0)
        learner = Learner(cfg, build_model(cfg.model, tok))
        if not skip:
            learner._trained_rows = lambda batch, rows: rows  # the reference: every row runs
        seen, forward = [], learner.model.forward
        learner.model.forward = lambda *a, seen=seen, forward=forward, **k: (
            seen.append(len(k["input_ids"])),
            forward(*a, **k),
        )[1]
        steps = []
        learner.optimizer.register_step_pre_hook(
            lambda *_, steps=steps, model=learner.model: steps.append(
                {n: p.grad.clone() for n, p in model.named_parameters()}
            )
        )
        for _ in range(2):
            metrics = {**learner.recompute_old_logprobs(batch), **learner.update(batch)}
            assert {"policy/entropy", "policy/kl", "policy/clip_frac", "policy/grad_norm"} <= set(metrics)
        learners.append(learner)
        grads.append(steps)
        ran.append(sum(seen))
    # the first step starts from the same weights (the second from weights Adam moved by a rounding apart)
    skipped, reference = grads[0][0], grads[1][0]
    assert all(
        torch.allclose(skipped[k], reference[k], rtol=0, atol=1e-5 * float(reference[k].abs().max())) for k in reference
    )
    nonzero = sum(a != 0 for a in advantages)
    assert ran == [2 * (6 + nonzero), 2 * (6 + 6)]  # recompute runs every row, the update only the non-zero ones
    if not nonzero:  # no rounding to differ by: the same weights, moved by weight decay alone
        skipping, reference = (dict(learner.model.named_parameters()) for learner in learners)
        assert all(torch.equal(skipping[k], reference[k]) for k in reference)
        start = dict(Learner(cfg, build_model(cfg.model, tok)).model.named_parameters())
        assert any(not torch.equal(start[k], skipping[k]) for k in start)
