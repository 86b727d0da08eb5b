#!/usr/bin/env bash
# GRPO on swebox SWE tasks with SkyRL (skyrl 0.4, `skyrl[fsdp]`: FSDP + vLLM, Python >= 3.12) on a GPU cluster.
#
# What it does: SkyRL's trainer and its SkyRLGymGenerator run the multi-turn loop; every trajectory is a
# swebox episode (env_class "swebox"): a sandbox restored in milliseconds from the node's layer cache, bash
# actions, reward = the task's tests passing after the agent's diff (graded in a fresh sandbox).
#
# Before launching (once per task set):
#   1. layers:  swebox cache build --tasks $TASKS --store $STORE          (env layers; task layers come
#               from `swebox tasks synth --out DIR`, copy them with `swebox cache import --from DIR/layers`)
#      $STORE must be readable from every node (shared filesystem); each node materialises the layers it
#      needs once into its local cache ($SWEBOX_LAYER_CACHE, default /var/tmp/swebox-layers-<uid>).
#   2. dataset: swebox skyrl prepare --tasks $TASKS --out $DATA --store $STORE --max-turns $MAX_TURNS --val-size 32
#   3. nodes:   swebox installed with its skyrl extra on every node (pip install 'swebox[skyrl]' 'skyrl[fsdp]');
#               Ray started on every node (ray start --head / ray start --address=HEAD:6379); the sandbox needs
#               Linux user namespaces and overlayfs (see docs/sandbox.md); run as root or a user with subuids.
#
# Then: bash configs/skyrl/run_swebox_grpo.sh [more SkyRL overrides...]
# Metrics: SkyRL logs the env's get_metrics() aggregated by SWESkyRLEnv.aggregate_metrics (env/reset_s,
# env/exec_s, env/grade_s, env/turns, env/format_errors, env/timeouts, env/resolved, env/f2p_frac,
# env/errors; docs/metrics.md) next to its own reward curves, in wandb with trainer.logger=wandb.
set -euo pipefail

TASKS="${TASKS:?set TASKS to the task file (JSONL)}"
STORE="${STORE:?set STORE to the layer store folder (shared by all nodes)}"
DATA="${DATA:-$HOME/data/swebox}"
MODEL="${MODEL:-Qwen/Qwen2.5-Coder-7B-Instruct}"
NUM_GPUS="${NUM_GPUS:-8}"
MAX_TURNS="${MAX_TURNS:-30}"

# Env settings that are not per row are config keys, environment.skyrl_gym.swebox.* (skyrl 0.4; swebox's config
# subclass adds that section, and SkyRL's generator hands it to the env); the settings written into the dataset
# by `swebox skyrl prepare` win over them. $SWEBOX_SKYRL_SETTINGS (a JSON object) still works, under them.
export SWEBOX_LAYER_STORE="$STORE"

python -m swebox.trainers.skyrl_entry \
  data.train_data="['$DATA/train.parquet']" \
  data.val_data="['$DATA/validation.parquet']" \
  environment.env_class=swebox \
  environment.skyrl_gym.max_env_workers=32 \
  environment.skyrl_gym.swebox.max_turns="$MAX_TURNS" \
  environment.skyrl_gym.swebox.command_timeout_s=60 \
  environment.skyrl_gym.swebox.time_limit_s=1800 \
  environment.skyrl_gym.swebox.sandbox.memory_mb=8192 \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.policy.model.path="$MODEL" \
  trainer.strategy=fsdp \
  trainer.placement.colocate_all=true \
  trainer.placement.policy_num_gpus_per_node="$NUM_GPUS" \
  trainer.train_batch_size=32 \
  trainer.policy_mini_batch_size=32 \
  trainer.max_prompt_length=8192 \
  trainer.epochs=5 \
  trainer.eval_interval=10 \
  trainer.ckpt_interval=10 \
  trainer.logger=wandb \
  trainer.project_name=swebox \
  trainer.run_name="swebox-grpo-$(date +%Y%m%d-%H%M)" \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.num_engines="$NUM_GPUS" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.gpu_memory_utilization=0.7 \
  generator.n_samples_per_prompt=8 \
  generator.max_turns="$MAX_TURNS" \
  generator.use_conversation_multi_turn=true \
  generator.batched=false \
  generator.sampling_params.max_generate_length=4096 \
  "$@"
