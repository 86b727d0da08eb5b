"""scripts/demo_levers.py: the offline loop of docs/benchmarks.md reads a demo run's warm start and updates it."""

from __future__ import annotations

import gzip
import json

import torch
from swebox.scripts import demo, demo_levers
from swebox.trainers.policy.models import build_model, build_tokenizer
from swebox.trainers.run import checkpoint as ckpt
from swebox.trainers.run.config import load_config

APPLY = "```bash\necho fixed\n```"


def test_it_takes_each_tasks_last_turn_and_makes_grpo_updates_from_the_sft_moments(tmp_path, capsys):
    cfg = load_config(demo.DEFAULT_CONFIG, [])
    tokenizer = build_tokenizer(cfg.model)
    model = build_model(cfg.model, tokenizer)
    run = tmp_path / "run"
    model.save_pretrained(run / "sft" / "policy")
    tokenizer.save_pretrained(run / "sft" / "policy")
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    ckpt.save_checkpoint(run / "sft" / "checkpoints", 1, model, optimizer)
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"}]
    resolved = {
        "task_id": "t1",
        "resolved": True,
        "prompt": prompt,
        "turns": [{"text": "```bash\nls\n```", "observation": "a.py"}, {"text": APPLY, "observation": ""}],
    }
    failed = {**resolved, "task_id": "t2", "resolved": False}
    (run / "trajectories").mkdir()
    with gzip.open(run / "trajectories" / "step_000001.jsonl.gz", "wt") as f:
        f.write(json.dumps(failed) + "\n" + json.dumps(resolved) + "\n")

    contexts = demo_levers.apply_turn_contexts(run, tokenizer)
    assert list(contexts) == ["t1"]  # a task without a resolved episode has no expert turn to learn
    context, target = contexts["t1"]
    assert tokenizer.decode(target) == APPLY + tokenizer.eos_token
    assert tokenizer.decode(context).endswith("a.py<|im_end|>\n<|im_start|>assistant\n")

    assert (
        demo_levers.main(
            ["--run", str(run), "--steps", "2", "--moments", "rollout.group_size=2", "generation.max_new_tokens=8"]
        )
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(len(line["expert_prob"]) == 1 and 0 <= line["expert_prob"][0] <= 1 for line in lines)
