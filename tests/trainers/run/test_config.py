"""Loading, overriding and validating the trainer's typed configuration."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from swebox.trainers.run import config as cfg

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_tiny_cpu_yaml_loads_with_its_values():
    c = cfg.load_config(CONFIGS / "grpo_tiny_cpu.yaml")
    assert isinstance(c, cfg.TrainConfig) and isinstance(c.model, cfg.ModelConfig)
    assert (c.model.init, c.model.tokenizer, c.generation.backend) == ("random", "builtin", "transformers")
    assert (c.rollout.tasks_per_step, c.rollout.group_size, c.ray.num_cpus) == (4, 4, 2)
    assert c.optim.lr == pytest.approx(3e-4)


def test_qwen_yaml_loads_with_its_values():
    c = cfg.load_config(CONFIGS / "grpo_qwen2.5-coder-7b.yaml")
    assert (c.model.init, c.model.dtype, c.generation.backend) == ("pretrained", "bfloat16", "vllm")
    assert c.ray.address == "auto" and c.algorithm.dynamic_sampling is True
    assert c.logging.tags == ["qwen2.5-coder-7b", "grpo", "dapo"]


@pytest.mark.parametrize("name", ["grpo_tiny_cpu.yaml", "grpo_qwen2.5-coder-7b.yaml"])
def test_yaml_files_set_only_existing_fields(name):
    # load_config rejects unknown keys; this also proves every section of the file is a dataclass section
    import yaml

    data = yaml.safe_load((CONFIGS / name).read_text())
    cfg.check_keys(data, cfg.TrainConfig)
    assert set(data) <= {f.name for f in dataclasses.fields(cfg.TrainConfig)}


def test_overrides_win_over_the_file_and_parse_types():
    c = cfg.load_config(
        CONFIGS / "grpo_tiny_cpu.yaml",
        ["algorithm.clip_high=0.3", "total_steps=3", "algorithm.dual_clip_c=3", "logging.tags=[a,b]"],
    )
    assert c.algorithm.clip_high == pytest.approx(0.3)
    assert c.total_steps == 3 and c.algorithm.dual_clip_c == 3.0 and c.logging.tags == ["a", "b"]
    assert c.rollout.group_size == 4  # untouched keys keep the file's values


def test_unknown_override_key_lists_the_valid_ones():
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load_config(None, ["algorithm.clip_hgh=0.3"])
    message = str(info.value)
    assert "'algorithm.clip_hgh'" in message and "clip_high" in message and "clip_low" in message


def test_unknown_top_level_key_in_a_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("total_steps: 3\nlearning_rate: 0.1\n")
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load_config(path)
    assert "'learning_rate'" in str(info.value) and "optim" in str(info.value)


def test_a_removed_key_says_why_and_what_to_do(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("ray:\n  address: auto\n  learner_num_gpus: 8\n")
    with pytest.raises(
        cfg.ConfigError,
        match=r"'ray.learner_num_gpus' was removed: the learner runs in the "
        r"trainer's own process.*delete the line",
    ):
        cfg.load_config(path)
    with pytest.raises(cfg.ConfigError, match="was removed"):
        cfg.load_config(None, ["ray.learner_num_gpus=1"])


def test_section_given_a_scalar_is_rejected(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algorithm: 3\n")
    with pytest.raises(cfg.ConfigError, match="algorithm: expected a mapping"):
        cfg.load_config(path)


def test_wrong_type_names_the_key():
    with pytest.raises(cfg.ConfigError, match="optim.lr"):
        cfg.load_config(None, ["optim.lr=fast"])


def test_bad_choice_lists_the_allowed_values():
    with pytest.raises(cfg.ConfigError, match="seq-mean-token-mean"):
        cfg.load_config(None, ["algorithm.loss_agg_mode=mean"])


def test_yaml_1_1_words_stay_text_in_text_fields_and_still_set_bool_fields(tmp_path):
    # PyYAML reads `off` as False (YAML 1.1): env.audit: off used to arrive as 'False' and be refused
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  audit: off\n  cost: off\noptim:\n  lr: 1e-3\n")
    c = cfg.load_config(path)
    assert (c.env.audit, c.env.cost, c.optim.lr) == ("off", False, pytest.approx(1e-3))
    c = cfg.load_config(None, ["env.audit=off", "env.cost=yes", "optim.lr=2e-4", "logging.group=2026-12-06"])
    assert (c.env.audit, c.env.cost, c.optim.lr, c.logging.group) == ("off", True, pytest.approx(2e-4), "2026-12-06")
    with pytest.raises(cfg.ConfigError, match="env.cost: Value 'maybe' is not a valid bool"):
        cfg.load_config(None, ["env.cost=maybe"])
    with pytest.raises(cfg.ConfigError, match=r"override 'env.audit=\[1': the value is not valid YAML"):
        cfg.load_config(None, ["env.audit=[1"])


def test_malformed_override():
    with pytest.raises(cfg.ConfigError, match="KEY=VALUE"):
        cfg.load_config(None, ["total_steps"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("algorithm.clip_low=1.5", "algorithm.clip_low"),
        ("algorithm.dual_clip_c=0.5", "algorithm.dual_clip_c"),
        ("rollout.group_size=1", "rollout.group_size"),
        ("generation.max_new_tokens=5000", "generation.max_new_tokens"),
        ("model.init=pretrained", "model.path"),
        ("model.num_heads=3", "model.hidden_size"),
        ("optim.mini_batches=3", "optim.mini_batches"),
        ("generation.backend=openai", "generation.openai_base_url"),
        ("checkpoint.keep_last=0", "checkpoint.keep_last"),
    ],
)
def test_invariants_say_expected_found_and_fix(override, key):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load_config(None, [override])
    message = str(info.value)
    assert message.startswith(f"{key}:") and "expected" in message and "found" in message


def test_openai_backend_is_refused_for_training():
    with pytest.raises(cfg.ConfigError, match="cannot receive weight updates"):
        cfg.load_config(None, ["generation.backend=openai", "generation.openai_base_url=http://127.0.0.1:1/v1"])


def test_tensor_parallel_vllm_is_refused_for_training():
    # weights sync into the engine's in-process model, which holds one shard when tensor-parallel
    with pytest.raises(cfg.ConfigError, match=r"vllm_tensor_parallel_size: expected 1 for training.*found 2"):
        cfg.load_config(None, ["generation.backend=vllm", "generation.vllm_tensor_parallel_size=2"])
    assert cfg.load_config(None, ["generation.backend=vllm"]).generation.vllm_tensor_parallel_size == 1


def test_direct_construction_checks_choices_too():
    with pytest.raises(cfg.ConfigError, match="rollout.on_context_overflow"):
        cfg.RolloutConfig(on_context_overflow="drop")


def test_saved_config_loads_back_equal(tmp_path):
    original = cfg.load_config(CONFIGS / "grpo_qwen2.5-coder-7b.yaml", ["seed=7"])
    cfg.save_config(original, tmp_path / "config.yaml")
    assert cfg.load_config(tmp_path / "config.yaml") == original


def _documented_fields(module) -> dict[str, set[str]]:
    """Class name -> the fields followed by a docstring in ``module``'s source."""
    documented: dict[str, set[str]] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.ClassDef):
            body = node.body
            documented[node.name] = {
                stmt.target.id
                for stmt, nxt in zip(body, body[1:], strict=False)
                if isinstance(stmt, ast.AnnAssign)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            }
    return documented


def test_every_field_has_a_docstring():
    members = inspect.getmembers(cfg, dataclasses.is_dataclass)
    # the sections live in config.py's sibling modules (config_env.py ...), re-exported by it
    sections = [
        cls for _, cls in members if cls.__module__ == cfg.__name__ or cls.__module__.startswith(f"{cfg.__name__}_")
    ]
    assert len(sections) >= 10
    for cls in sections:
        for f in dataclasses.fields(cls):  # documented where it is declared (env's in EpisodeConfig)
            owner = next(base for base in cls.__mro__ if f.name in base.__dict__.get("__annotations__", {}))
            assert f.name in _documented_fields(inspect.getmodule(owner))[owner.__name__], (
                f"{cls.__name__}.{f.name} has no docstring (declared in {owner.__name__})"
            )


def test_the_env_section_is_an_episode_config():
    from swebox.envs.episodes.episode import EpisodeConfig

    c = cfg.load_config(None, ["env.style=xml_function", "env.max_obs_chars=500", "env.sandbox.memory_mb=1024"])
    assert isinstance(c.env, EpisodeConfig)
    episode = c.env.episode()
    assert type(episode) is EpisodeConfig and (episode.style, episode.max_obs_chars) == ("xml_function", 500)
    assert episode.sandbox == {"memory_mb": 1024} and episode.policy().memory_mb == 1024
    # one set of defaults: the episode's own
    assert cfg.EnvConfig().episode() == EpisodeConfig()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("env.action_format=xml_function", "env.style"),
        ("env.max_observation_chars=100", "env.max_obs_chars"),
        ("env.reward=f2p_frac", "env.reward_mode (resolved -> binary, f2p_frac -> fraction)"),
        ("env.memory_mb=1024", "env.sandbox.memory_mb"),
        ("rollout.episode_timeout_s=60", "env.time_limit_s"),
    ],
)
def test_an_old_key_names_its_new_name(old, new, tmp_path):
    key = old.partition("=")[0]
    with pytest.raises(cfg.ConfigError, match=rf"config key '{key}' was renamed: use {re.escape(new)}"):
        cfg.load_config(None, [old])
    section, _, name = key.partition(".")
    path = tmp_path / "old.yaml"
    path.write_text(f"{section}:\n  {name}: {old.partition('=')[2]}\n")
    with pytest.raises(cfg.ConfigError, match=f"'{key}' was renamed"):
        cfg.load_config(path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.style=bash", "env.style: expected one of bash_block"),
        ("env.max_turns=0", "env.max_turns: expected a whole number >= 1"),
        ("env.reward_mode=resolved", "env.reward_mode: expected one of"),
        ("env.sandbox.memry_mb=3", r"env.sandbox: SandboxPolicy: unknown keys \['memry_mb'\]"),
    ],
)
def test_episode_checks_name_the_env_key(override, message):
    with pytest.raises(cfg.ConfigError, match=message):
        cfg.load_config(None, [override])


def test_negative_advantage_scale_is_a_fraction():
    assert cfg.load_config(None, ["algorithm.negative_advantage_scale=0"]).algorithm.negative_advantage_scale == 0
    with pytest.raises(cfg.ConfigError, match=r"algorithm.negative_advantage_scale: expected in \[0, 1\]"):
        cfg.load_config(None, ["algorithm.negative_advantage_scale=-1"])
