"""The wandb ``rollouts`` Table of a real offline run, read back with the wandb SDK."""

from __future__ import annotations

import json
import time

from swebox.trainers.run import tracking


def _records(step: int) -> list[dict]:
    long_diff = "diff --git a/x b/x\n" + "+" * 5000
    return [
        {
            "task_id": f"t{step}",
            "reward": 1.0,
            "resolved": True,
            "num_turns": 3,
            "diff": long_diff,
            "turns": [{"observation": "first"}, {"observation": "<returncode>1</returncode> last"}],
        },
        {"task_id": "u", "reward": 0.0, "resolved": False, "num_turns": 0, "diff": "", "turns": []},
    ]


def test_rollouts_table_in_an_offline_run(tmp_path, wandb_env):
    import wandb

    tracker = tracking.Tracker(tmp_path / "run", mode="offline", echo=lambda *_: None)
    for step in (1, 2):
        tracker.log_rollouts(step, _records(step))
        tracker.log(step, {"reward/mean": 0.5})
    tracker.finish()
    folder = tracker.sync_dir / "files" / "media" / "table"
    for _ in range(600):  # wandb-core, a separate process, may still be writing after finish()
        files = sorted(folder.glob("rollouts_*.table.json")) if folder.is_dir() else []
        if len(files) == 2:
            break
        time.sleep(0.1)
    assert len(files) == 2
    tables = [wandb.Table.from_json(json.loads(p.read_text()), None) for p in files]
    assert all(t.columns == list(tracking.ROLLOUT_COLUMNS) for t in tables)
    rows = sorted((row for t in tables for row in t.data), key=lambda r: r[0])
    assert [r[0] for r in rows] == ["t1", "t2", "u", "u"]
    assert rows[0][1:4] == [1.0, True, 3] and rows[0][5] == "<returncode>1</returncode> last"
    assert len(rows[0][4]) < 2100 and rows[0][4].startswith("diff --git") and "[...]" in rows[0][4]
    assert rows[2][4] == "" and rows[2][5] == ""
    log = tracker.sync_dir / f"run-{(tmp_path / 'run' / 'wandb_run_id').read_text().strip()}.wandb"
    for _ in range(600):  # wandb-core may still be flushing the run's record
        if b"table-file" in log.read_bytes():
            break
        time.sleep(0.1)
    assert b"rollouts" in log.read_bytes() and b"table-file" in log.read_bytes()  # history rows point at them


def test_no_wandb_run_no_table(tmp_path):
    tracker = tracking.Tracker(tmp_path / "run", mode="disabled")
    tracker.log_rollouts(1, _records(1))  # nothing to send to; metrics.jsonl and trajectories/ are the record
    tracker.finish()
    assert not (tmp_path / "run" / "wandb").exists()
