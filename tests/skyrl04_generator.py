"""Run inside the SkyRL 0.4 venv (tests/skyrl_venv.py): swebox's env driven by SkyRL's own generator loop.

``python -m tests.skyrl04_generator DATA_DIR OVERRIDES_JSON`` builds the config the way
``python -m swebox.trainers.skyrl_entry`` does (SkyRL's CLI overrides, the ``environment.skyrl_gym.swebox``
section), reads ``DATA_DIR/train.parquet`` with SkyRL's ``PromptDataset``, prepares the batch with SkyRL's
``prepare_generator_input`` (two samples of each row) and runs ``SkyRLGymGenerator.generate``, whose
``agent_loop`` builds each env with ``skyrl_gym.make("swebox", env_config=<that section>, extras=row)``. The
model is scripted (an ``InferenceEngineInterface`` that answers from a list per trajectory): sample 0 applies
the gold patch and submits, sample 1 submits without a change. Prints one JSON line: the rewards, stop
reasons, rollout metrics and the env_config the config produced.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.base import TRAINING_PHASE_TRAIN
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from swebox.trainers import skyrl_entry
from swebox.trainers.policy.models import build_builtin_tokenizer

from tests.calc import GOLD, SUBMIT, apply_patch

SCRIPTS = {0: [apply_patch(GOLD), SUBMIT], 1: [SUBMIT]}
"""The scripted model's replies per repetition id (the session id's suffix)."""


class ScriptedEngine(InferenceEngineInterface):
    """SkyRL's inference-engine contract answered from :data:`SCRIPTS` (token ids from the real tokenizer)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.turns: dict[str, int] = {}

    @property
    def model_name(self) -> str:
        return "scripted"

    async def generate(self, input_batch: Any, model: str | None = None) -> dict[str, Any]:
        session = str(input_batch["session_ids"][0])
        turn = self.turns.get(session, 0)
        self.turns[session] = turn + 1
        script = SCRIPTS[int(session.rsplit("_", 1)[1])]
        text = script[min(turn, len(script) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return {
            "responses": [text],
            "response_ids": [ids],
            "stop_reasons": ["stop"],
            "response_logprobs": None,
            "prompt_logprobs": None,
            "rollout_expert_indices": None,
            "rollout_sample_support": None,
        }

    async def finish_session(self, session_id: Any) -> None:
        return None

    def get_endpoint_url(self) -> str:
        raise NotImplementedError("the scripted engine has no HTTP endpoint")

    async def chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def render_chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def update_named_weights(self, request: Any) -> None:
        raise NotImplementedError

    async def load_lora_adapter(self, lora_name: str, lora_path: str) -> dict[str, Any]:
        raise NotImplementedError

    async def teardown(self) -> None:
        return None

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> None:
        return None

    async def pause_generation(self) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def get_world_size(self) -> int:
        return 1


def main(data_dir: str, overrides: list[str]) -> dict[str, Any]:
    cfg = skyrl_entry.build_config(overrides)
    skyrl_entry.register()
    tokenizer = build_builtin_tokenizer()
    dataset = PromptDataset([f"{data_dir}/train.parquet"], tokenizer, cfg.trainer.max_prompt_length, num_workers=1)
    rows = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    batch, _ = prepare_generator_input(
        rows, 2, {"max_generate_length": 512}, cfg.environment.env_class, TRAINING_PHASE_TRAIN, 0
    )
    generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, ScriptedEngine(tokenizer), tokenizer)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    # SkyRL 0.4 hands per-token rewards to the trainer: the episode's reward sits on its last response token
    rewards = [[float(sum(r)), float(r[-1])] if isinstance(r, list) else [float(r), float(r)] for r in out["rewards"]]
    return {
        "rewards": rewards,
        "stop_reasons": out["stop_reasons"],
        "metrics": {k: v for k, v in (out["rollout_metrics"] or {}).items() if "swebox" in k or "env/" in k},
        "env_config": dict(cfg.environment.skyrl_gym.swebox),
        "config_class": type(cfg).__name__,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
