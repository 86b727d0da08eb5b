"""The exploit audit in the trainer: env.audit is a typed config field, a 'dropped' rollout is masked out of the
loss, audit/* step metrics, and the flag per rollout and per turn in the trajectory record."""

from __future__ import annotations

import pytest
from swebox.envs.episodes.episode import StepResult
from swebox.trainers.rl.step_metrics import rollout_metrics
from swebox.trainers.rl.trainer import Trainer
from swebox.trainers.run import trajectories as tj
from swebox.trainers.run.config import ConfigError, load_config

from tests.trainers.rl.test_rollout import stub_task
from tests.trainers.rl.test_trainer import SMALL

FINDING = {"rule": "git_history", "severity": "exploit", "reason": "r", "turn": 1, "evidence": "git log --all"}


class Probing:
    """One turn; every other episode of a task probes git history and is 'dropped' by the audit."""

    made = 0

    def __init__(self) -> None:
        Probing.made += 1
        self.probes = Probing.made % 2 == 0

    def submit_reply(self) -> None:  # no action style: an episode that fills the context ends unsubmitted
        return None

    def close(self) -> None:
        pass

    def reset(self):
        return "task"

    def step(self, reply: str) -> StepResult:
        findings = [FINDING] if self.probes else []
        audit = {
            "mode": "drop",
            "flagged": self.probes,
            "rules": ["git_history"] if self.probes else [],
            "action": "dropped" if self.probes else "none",
            "findings": findings,
        }
        metrics = {
            "env/resolved": 1.0,
            "env/turns": 1.0,
            "audit/flagged": float(self.probes),
            "audit/git_history": float(self.probes),
        }
        info = {
            "action": {"tool": "bash", "arguments": {"command": "git log --all"}},
            "audit_turn": findings,
            "audit": audit,
            "provenance": {"task": {"id": "t"}},
            "metrics": metrics,
        }
        return StepResult("", 1.0, True, False, info)


def test_env_audit_is_a_typed_field_of_the_env_section():
    assert load_config(None, ["env.audit=drop"]).env.audit == "drop"
    assert load_config(None, []).env.audit == "report"
    with pytest.raises(ConfigError, match="env.audit: expected one of off, report, zero, drop"):
        load_config(None, ["env.audit=strict"])


def test_dropped_rollouts_are_masked_and_counted(tmp_path):
    cfg = load_config(None, [*SMALL, f"logging.run_dir={tmp_path / 'run'}", "env.audit=drop"])
    trainer = Trainer(
        cfg,
        tasks=[stub_task("t0"), stub_task("t1")],
        echo=lambda *_: None,
        episode_factory=lambda task, n: [Probing() for _ in range(n)],
    )
    try:
        trajs = trainer.pool.run_groups(trainer.tasks, 4)
        _, _, valid = trainer._signals(trajs)
        dropped = [(t.audit or {}).get("action") == "dropped" for t in trajs]
        assert any(dropped) and not all(dropped)
        assert valid.tolist() == [not d for d in dropped]
        metrics = rollout_metrics(trajs)
        assert metrics["audit/flagged"] == pytest.approx(sum(dropped) / len(trajs))
        assert metrics["audit/git_history"] == metrics["audit/flagged"]
        records = tj.step_records(1, trajs, [t.reward for t in trajs], [0.0] * len(trajs), valid.tolist())
        flagged = next(r for r in records if r["audit"]["flagged"])
        assert flagged["turns"][0]["audit"] == ["git_history"] and flagged["provenance"] == {"task": {"id": "t"}}
        assert next(r for r in records if not r["audit"]["flagged"])["turns"][0]["audit"] == []
        line = tj.index_line(flagged)
        assert set(line) == set(tj.INDEX_FIELDS) and line["audit_flagged"] and line["audit_rules"] == ["git_history"]
    finally:
        trainer.close()
