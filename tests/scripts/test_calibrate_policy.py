"""``swebox tasks calibrate --policy hf:MODEL_FOLDER``: a local model plays real episodes (the gold and empty
policies are played in tests/envs/tasks/test_calibrate.py)."""

from __future__ import annotations

import argparse
import json

from swebox.envs.tasks import save_jsonl
from swebox.scripts.tasks_cli import add_arguments

from tests.calc import CALC_ENV, calc_task


def test_an_hf_policy_plays_k_episodes_per_task(tmp_path, calc_layer, capsys):
    import torch
    from swebox.trainers.policy.models import build_builtin_tokenizer, build_model
    from swebox.trainers.run.config import ModelConfig

    root = tmp_path / "layers"
    root.mkdir()
    (root / CALC_ENV.key()).symlink_to(calc_layer, target_is_directory=True)
    tok = build_builtin_tokenizer()
    torch.manual_seed(0)
    build_model(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2), tok).save_pretrained(
        tmp_path / "policy"
    )
    tok.save_pretrained(tmp_path / "policy")
    save_jsonl([calc_task()], tmp_path / "t.jsonl")
    parser = argparse.ArgumentParser(prog="swebox tasks")
    add_arguments(parser.add_subparsers(dest="sub", required=True))
    out = tmp_path / "cal.json"
    args = parser.parse_args(
        [
            "calibrate",
            str(tmp_path / "t.jsonl"),
            "--layers",
            str(root),
            "--out",
            str(out),
            "--runs",
            "1",
            "--policy",
            f"hf:{tmp_path / 'policy'}",
            "--policy-runs",
            "2",
            "--set",
            "env.max_turns=2",
            "--set",
            "generation.max_new_tokens=8",
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr()
    # a random model: two played episodes (format errors, no fix), none resolved, none broken
    entry = json.loads(out.read_text())["tasks"][0]
    assert entry["policy"] == {"name": f"hf:{tmp_path / 'policy'}", "resolved": 0, "runs": 2, "errors": 0}, printed.err
    assert "resolved 0 of 2 runs over 1 tasks" in printed.out
