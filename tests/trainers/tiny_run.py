"""A real tiny training run for the trajectory and viewer tests: the GRPO trainer over the calc fixture project.

Real sandboxes, real grading, the real learner and trainer loop; only token generation is scripted, so the run
holds every kind of rollout the viewer shows: a resolved fix (three turns: look, apply, submit), a wrong fix
(test_add fails), a format error followed by an empty submission, and a command that times out.
"""

from __future__ import annotations

import threading
from pathlib import Path

from swebox.envs.tasks import Task
from swebox.trainers.policy.generation import Generated
from swebox.trainers.rl.rollout import LocalWorkerPool, swe_episode_factory
from swebox.trainers.rl.trainer import Trainer
from swebox.trainers.run.config import load_config

from tests.calc import GOLD, GOLD_DIV, SUBMIT, apply_patch, bash, calc_task

WRONG_ADD = GOLD.replace("+    return a + b", "+    return a * b")
SCRIPTS = {
    "calc-add": [
        [bash("cat /testbed/calc/ops.py"), apply_patch(GOLD), SUBMIT],
        [apply_patch(WRONG_ADD), SUBMIT],
        ["I think the bug is in add, but I will not say how.", SUBMIT],
        [bash("sleep 30"), SUBMIT],
    ],
    "calc-div": [[apply_patch(GOLD_DIV), SUBMIT], [SUBMIT]],
}
SMALL = [
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "generation.max_new_tokens=512",
    "generation.max_context_tokens=4096",
    "env.max_turns=4",
    # 3 s: the scripted `sleep 30` times out; every other command (git apply, cat, the submission) must not, also
    # on a loaded machine, where 1 s was a thin margin and a late `git apply` changed the run's rewards
    "env.command_timeout_s=3",
    "rollout.group_size=4",
    "optim.micro_batch_size=4",
    "logging.wandb=disabled",
    "logging.progress=false",
    "rollout.max_parallel_episodes=2",
    "checkpoint.every_steps=0",
]


def calc_tasks() -> list[Task]:
    div = calc_task(
        instance_id="calc-div",
        patch=GOLD_DIV,
        problem_statement="div(7, 2) returns 3, not 3.5.",
        FAIL_TO_PASS=["tests/test_ops.py::test_div"],
    )
    return [calc_task(), div]


class ScriptedBackend:
    """Each new episode takes the next script of its task (round robin); later turns follow that script."""

    def __init__(self, tokenizer) -> None:
        self.tok, self.lock, self.started = tokenizer, threading.Lock(), dict.fromkeys(SCRIPTS, 0)

    def generate(self, prompts, max_new_tokens, seeds=None):
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            task = "calc-div" if "div(7, 2)" in text else "calc-add"
            turn = text.count("<|im_start|>assistant") - 1
            scripts = SCRIPTS[task]
            if turn == 0:
                with self.lock:
                    script = scripts[self.started[task] % len(scripts)]
                    self.started[task] += 1
            else:
                script = next(s for s in scripts if s[0] in text)
            reply = script[min(turn, len(script) - 1)]
            tokens = [*self.tok.encode(reply, add_special_tokens=False), self.tok.eos_token_id]
            out.append(Generated(tokens, [-0.5] * len(tokens), "stop"))
        return out

    def update_weights(self, state):
        pass


def make_trainer(run_dir: Path, layer: Path, *overrides: str) -> Trainer:
    """A trainer over the calc tasks with a scripted backend; call ``.step()`` or ``.train()``."""
    from swebox.envs.tasks import save_jsonl
    from swebox.trainers.policy.models import build_model, build_tokenizer

    tasks_file = Path(run_dir).parent / "calc-tasks.jsonl"
    save_jsonl(calc_tasks(), tasks_file)
    cfg = load_config(
        None, [*SMALL, f"logging.run_dir={run_dir}", f"env.tasks={tasks_file}", "rollout.tasks_per_step=2", *overrides]
    )

    tokenizer = build_tokenizer(cfg.model)
    pool = LocalWorkerPool(
        cfg, swe_episode_factory(cfg, layers=[layer]), model=build_model(cfg.model, tokenizer), tokenizer=tokenizer
    )
    pool.worker.backend = ScriptedBackend(pool.worker.tokenizer)
    return Trainer(cfg, pool, echo=lambda *_: None)
