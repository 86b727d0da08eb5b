"""Every shipped CPU config trains on real tokens: one step of each on the calc fixture task (real sandboxes, real
grading, its own context and turn settings) leaves trajectories in the loss (batch/masked_frac < 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from swebox.envs.tasks.synth.statement import Failure, problem_statement
from swebox.trainers.rl.rollout import swe_episode_factory
from swebox.trainers.rl.trainer import Trainer
from swebox.trainers.run.config import load_config

from tests.calc import calc_task

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CPU_CONFIGS = sorted(
    p.name
    for p in CONFIGS.glob("*.yaml")
    if load_config(p).generation.backend == "transformers" and load_config(p).model.init == "random"
)


def failure(test: str, call: str, message: str) -> Failure:
    """A failing calc test as pytest's JUnit XML reports it (test-code frame, then the error line)."""
    path, _, name = test.partition("::")
    details = f"{path}:7: in {name.split('::')[-1]}\n    assert {call}\nE   {message}\n"
    return Failure(test, message, details)


# the calc task's statement as `swebox tasks synth` writes statements (envs/tasks/synth/statement.py): the listed tests,
# three of them detailed; as long as the demo corpus's longest (toolz: 1,662 characters, 1,649 prompt tokens)
STATEMENT = problem_statement(
    "calc-0.1",
    [
        failure(
            f"tests/test_ops.py::TestAddition::test_add_of_consecutive_ints_{k}",
            f"add({k}, {k + 1}) == {2 * k + 1}",
            f"AssertionError: assert {-1 - k} == {2 * k + 1}\n +  where {-1 - k} = add({k}, {k + 1})",
        )
        for k in range(14)
    ],
    passing=40,
)


def test_the_statement_is_as_long_as_a_synthesised_one():
    assert 1500 <= len(STATEMENT) <= 1900, len(STATEMENT)


def test_the_cpu_configs_are_found():
    assert {"grpo_tiny_cpu.yaml", "demo.yaml"} <= set(CPU_CONFIGS)


@pytest.mark.e2e
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", CPU_CONFIGS)
def test_a_step_of_each_cpu_config_trains_on_real_tokens(name, calc_layer, tmp_path):
    # only the batch is made smaller (one group of 4), every setting that decides masking is the config's own
    cfg = load_config(
        CONFIGS / name,
        [
            "total_steps=1",
            "rollout.tasks_per_step=1",
            "rollout.group_size=4",
            "optim.micro_batch_size=4",
            f"logging.run_dir={tmp_path}",
            "logging.wandb=disabled",
            "logging.progress=false",
            "checkpoint.every_steps=0",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
        ],
    )
    factory = swe_episode_factory(cfg, layers=[str(calc_layer)])
    trainer = Trainer(
        cfg, tasks=[calc_task(problem_statement=STATEMENT)], episode_factory=factory, echo=lambda *_: None
    )
    [record] = trainer.train()
    trajs = trainer.last.trajectories
    assert not any(t.failed for t in trajs), [t.error for t in trajs if t.failed]
    assert record["batch/masked_frac"] < 1.0, [(t.truncated, len(t.prompt_ids) + len(t.response_ids)) for t in trajs]
