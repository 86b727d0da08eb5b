#!/usr/bin/env bash
# GPU smoke test: vLLM generation throughput and two GRPO steps on one GPU with a small local causal LM.
#
#   scripts/gpu_smoke.sh MODEL_DIR [TASKS_JSONL] [--backend vllm|transformers] [--steps N] [--out DIR]
#                        [-- KEY=VALUE ...]
#
# MODEL_DIR: a Hugging Face causal LM folder (config.json, weights, tokenizer with a chat template), e.g.
#   Qwen2.5-0.5B-Instruct, or the demo's trained policy runs/demo/policy. Nothing is downloaded.
# TASKS_JSONL: tasks whose layers are in the layer store $SWEBOX_LAYER_STORE (default: the `layers` folder
#   beside the task file); default runs/demo/corpus/tasks.jsonl, which `make demo` builds.
# It prints the generation throughput (tokens/s over a batch of prompts, after a warm-up batch) and each
# GRPO step's time with its parts, then the run folder (default runs/gpu_smoke). The learner and the vLLM
# engine share the GPU (generation.vllm_gpu_memory_utilization). KEY=VALUE pairs after `--` override the
# config (configs/grpo_tiny_cpu.yaml plus this script's settings), e.g. -- rollout.group_size=8.
# --backend transformers runs the same path without vLLM (on the CPU when there is no GPU): how CI checks it.
set -euo pipefail

die() { echo "gpu_smoke.sh: $*" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

[ "$#" -ge 1 ] || die "expects MODEL_DIR first (a local causal LM folder); see --help"
case "$1" in -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
model="$1"; shift
tasks="$repo/runs/demo/corpus/tasks.jsonl"
if [ "$#" -gt 0 ] && [ "${1#--}" = "$1" ]; then tasks="$1"; shift; fi
backend=vllm
steps=2
out="runs/gpu_smoke"
overrides=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --backend) [ "$#" -ge 2 ] || die "--backend expects vllm or transformers"; backend="$2"; shift 2 ;;
    --steps) [ "$#" -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "--steps expects a whole number >= 1"
             steps="$2"; shift 2 ;;
    --out) [ "$#" -ge 2 ] || die "--out expects a folder"; out="$2"; shift 2 ;;
    --) shift; overrides=("$@"); break ;;
    *) die "unknown option '$1'; see --help" ;;
  esac
done
case "$backend" in vllm|transformers) ;; *) die "--backend expects vllm or transformers; found '$backend'" ;; esac
[ -f "$model/config.json" ] || die "expected a model folder with config.json at '$model'; found none; pass a local \
causal LM folder (e.g. runs/demo/policy after \`make demo\`)"
[ -f "$tasks" ] || die "expected a tasks file at '$tasks'; found none; run \`make demo\` (it synthesises \
runs/demo/corpus/tasks.jsonl) or pass TASKS_JSONL"
export SWEBOX_LAYER_STORE="${SWEBOX_LAYER_STORE:-$(cd "$(dirname "$tasks")" && pwd)/layers}"
[ -d "$SWEBOX_LAYER_STORE" ] || die "expected the tasks' layer store at '$SWEBOX_LAYER_STORE'; set SWEBOX_LAYER_STORE"

python="${PYTHON:-}"
for candidate in "$repo/.venv/bin/python" "$(command -v python3 || true)"; do
  [ -n "$python" ] && break
  [ -n "$candidate" ] && [ -x "$candidate" ] && python="$candidate"
done
[ -n "$python" ] || die "no python found; set PYTHON=/path/to/python"
if [ "$backend" = vllm ]; then
  "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || die "--backend vllm needs a CUDA GPU; torch sees none (nvidia-smi; or --backend transformers)"
  "$python" -c "import vllm" 2>/dev/null || die "vLLM is not installed; pip install 'swebox[vllm]'"
fi

export SMOKE_MODEL="$model" SMOKE_TASKS="$tasks" SMOKE_BACKEND="$backend" SMOKE_STEPS="$steps" SMOKE_OUT="$out"
export SMOKE_CONFIG="$repo/configs/grpo_tiny_cpu.yaml"
exec "$python" - "${overrides[@]}" <<'PY'
import os, sys, time

import torch
from swebox.trainers.run.config import load_config
from swebox.trainers.rl.rollout import prompt_ids
from swebox.trainers.rl.trainer import Trainer

env = os.environ
gpu = torch.cuda.is_available()
settings = [
    "model.init=pretrained", f"model.path={env['SMOKE_MODEL']}", f"model.tokenizer={env['SMOKE_MODEL']}",
    f"model.dtype={'bfloat16' if gpu else 'float32'}", f"generation.backend={env['SMOKE_BACKEND']}",
    "generation.max_new_tokens=128", "generation.max_context_tokens=4096", "generation.vllm_enforce_eager=true",
    "generation.vllm_gpu_memory_utilization=0.4", f"total_steps={env['SMOKE_STEPS']}", "rollout.tasks_per_step=2",
    "rollout.group_size=4", "rollout.max_parallel_episodes=8", "optim.lr=1e-6", "optim.micro_batch_size=4",
    f"env.tasks={env['SMOKE_TASKS']}", "ray.address=''", f"logging.run_dir={env['SMOKE_OUT']}",
    "logging.wandb=disabled", "logging.progress=false", "checkpoint.every_steps=0",
]
cfg = load_config(env["SMOKE_CONFIG"], [*settings, *sys.argv[1:]])
device = torch.cuda.get_device_name(0) if gpu else "CPU"
print(f"gpu_smoke: {cfg.model.path} on {device}, generation backend {cfg.generation.backend}", flush=True)

trainer = Trainer(cfg, use_ray=False, echo=lambda *_: None)  # the learner and one in-process rollout worker
worker = trainer.pool.worker
prompt = prompt_ids(worker.tokenizer, "Write a Python function that reverses a linked list.")  # as rollouts do
batch, new_tokens = 32, cfg.generation.max_new_tokens
worker.backend.generate([prompt] * 2, 8)  # warm-up: kernels, CUDA graphs, caches
started = time.monotonic()
outputs = worker.backend.generate([prompt] * batch, new_tokens)
seconds = time.monotonic() - started
tokens = sum(len(o.token_ids) for o in outputs)
print(f"generation: {batch} prompts x <= {new_tokens} new tokens: {tokens} tokens in {seconds:.2f} s = "
      f"{tokens / seconds:.0f} tokens/s", flush=True)

for record in trainer.train():
    parts = ", ".join(f"{k.split('/')[1][:-2]} {record[k]:.2f}" for k in (
        "timing/rollout_s", "timing/generate_s", "timing/env_s", "timing/grade_s", "timing/update_s",
        "timing/sync_s") if isinstance(record.get(k), (int, float)))
    print(f"step {record['step']}: {record['timing/step_s']:.2f} s ({parts}); reward/mean "
          f"{record['reward/mean']:.3f}, policy/kl {record['policy/kl']:.4f}", flush=True)
print(f"gpu_smoke: ok; metrics in {cfg.logging.run_dir}/metrics.jsonl")
PY
