"""scripts/gpu_smoke.sh: its checks, and its whole path on the CPU with the transformers backend (the vLLM branch
differs only in generation.backend; the GPU run itself is not part of CI)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.calc import CALC_ENV, calc_task

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_smoke.sh"


def smoke(*args: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A small local causal LM folder: the tiny random policy and the builtin tokenizer, as save_pretrained."""
    import torch
    from swebox.trainers.policy.models import build_model, build_tokenizer
    from swebox.trainers.run.config import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(init="random", tokenizer="builtin", num_kv_heads=2)
    tokenizer = build_tokenizer(cfg)
    folder = tmp_path / "model"
    build_model(cfg, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "expects MODEL_DIR first"),
        (["/nonexistent"], "expected a model folder with config.json at '/nonexistent'"),
        (["MODEL", "/nonexistent.jsonl"], "expected a tasks file at '/nonexistent.jsonl'"),
        (["MODEL", "TASKS", "--backend", "tpu"], "--backend expects vllm or transformers; found 'tpu'"),
        (["MODEL", "TASKS", "--steps", "0"], "--steps expects a whole number >= 1"),
        (["MODEL", "TASKS", "--frobnicate"], "unknown option '--frobnicate'"),
    ],
)
def test_bad_input(model_dir, tmp_path, args, message):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    (tmp_path / "layers").mkdir()
    args = [str(model_dir) if a == "MODEL" else str(tasks) if a == "TASKS" else a for a in args]
    out = smoke(*args)
    assert out.returncode == 2
    assert message in out.stderr


def test_vllm_needs_a_gpu_and_vllm(model_dir, tmp_path):
    torch = pytest.importorskip("torch")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    (tmp_path / "layers").mkdir()
    out = smoke(str(model_dir), str(tasks))
    assert out.returncode == 2
    expected = "pip install 'swebox[vllm]'" if torch.cuda.is_available() else "needs a CUDA GPU"
    assert expected in out.stderr


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_two_grpo_steps_on_cpu(model_dir, calc_layer, tmp_path):
    from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore

    store = LayerStore(tmp_path / "corpus" / "layers")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer)
    tasks = tmp_path / "corpus" / "tasks.jsonl"
    tasks.write_text("".join(calc_task(instance_id=f"calc-add-{i}").to_json() + "\n" for i in range(2)))
    cache = tmp_path / "node-cache"
    try:
        out = smoke(
            str(model_dir),
            str(tasks),
            "--backend",
            "transformers",
            "--out",
            str(tmp_path / "run"),
            "--",
            "generation.max_new_tokens=16",
            "rollout.group_size=2",
            "env.max_turns=1",
            f"env.cache_dir={cache}",
            timeout=540,
        )
    finally:
        LayerCache(store, LayerCacheConfig(root=str(cache))).close()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("generation: 32 prompts") and line.endswith("tokens/s") for line in lines), lines
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 2 and all("grade" in s and "update" in s for s in steps), steps
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 2
    assert str(tmp_path) not in Path("/proc/mounts").read_text()
