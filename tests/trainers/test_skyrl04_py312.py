"""swebox under the real SkyRL 0.4 (skyrl 0.4.0, skyrl-gym 0.4.0, ray 2.57.0 on Python 3.12: tests/skyrl_venv.py).

- SkyRL's own generator loop (``SkyRLGymGenerator.generate`` over SkyRL's ``PromptDataset`` and
  ``prepare_generator_input``, a scripted inference engine) drives the ``swebox`` env: the gold patch pays 1.0,
  submitting nothing 0.0; the env's settings (its layers, max_turns) reach it only through the config section
  ``environment.skyrl_gym.swebox.*``, as SkyRL's generator hands it over;
- ``python -m swebox.trainers.skyrl_entry``'s config: the launch script's overrides build a config that SkyRL's
  ``validate_cfg`` accepts; a misspelt swebox option or SkyRL key is one line and exit status 2, before Ray.
Not run here: ``BasePPOExp.run()`` (SkyRL's training loop needs GPUs for its FSDP workers and vLLM engines).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from swebox.envs.frameworks.skyrl_prepare import prepare

from tests.calc import calc_task, layer_dirs
from tests.skyrl_venv import python312, skyrl_venv, skyrl_venv_wanted
from tests.venvs import REPO, run_in

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not python312(),
        reason="needs a Python 3.12 interpreter (skyrl 0.4 requires >= 3.12): "
        "pyenv's 3.12 build, python3.12 on PATH, or $SWEBOX_PY312",
    ),
    pytest.mark.skipif(
        not skyrl_venv_wanted(),
        reason="SkyRL 0.4's 3.12 venv is not built (~6 GB, ~36 min: a "
        "CUDA torch is all pip finds for 3.12 here); run `make test-skyrl` to build it and run these",
    ),
]
SCRIPT = REPO / "configs" / "skyrl" / "run_swebox_grpo.sh"


def launch_overrides(data: Path, **values: str) -> list[str]:
    """The SkyRL overrides of configs/skyrl/run_swebox_grpo.sh, its shell variables filled in."""
    values = {
        "DATA": str(data),
        "MODEL": "Qwen/Qwen2.5-Coder-7B-Instruct",
        "NUM_GPUS": "8",
        "MAX_TURNS": "30",
        **values,
    }
    out = []
    for arg in re.findall(r"^  ([a-z_.]+=.+?) \\$", SCRIPT.read_text(), re.M):
        arg = re.sub(r"\$\(date [^)]*\)", "20260101-0000", arg)
        arg = re.sub(r"\$([A-Z_]+)", lambda m: values[m.group(1)], arg)
        out.append(arg.replace('"', ""))
    assert "environment.env_class=swebox" in out and "trainer.run_name=swebox-grpo-20260101-0000" in out, out
    return out


@pytest.fixture(scope="module")
def venv():
    return skyrl_venv()


def test_skyrl_generator_loop_pays_gold_1_and_nothing_0(venv, tmp_path, calc_layer):
    dirs = layer_dirs(tmp_path, calc_layer)
    prepare([calc_task()], tmp_path / "data", {})  # no per-row settings: the config section must carry them
    overrides = [
        "generator.max_turns=5",
        "generator.batched=false",
        "generator.use_conversation_multi_turn=true",
        "trainer.max_prompt_length=8192",
        "environment.skyrl_gym.max_env_workers=2",
        "environment.skyrl_gym.swebox.max_turns=5",
        f"environment.skyrl_gym.swebox.layers.dirs={dirs}",
    ]
    proc = run_in(
        venv,
        "python",
        "-m",
        "tests.skyrl04_generator",
        str(tmp_path / "data"),
        json.dumps(overrides),
        cwd=REPO,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["config_class"] == "SweboxSkyRLConfig"
    assert out["env_config"] == {"max_turns": 5, "layers": {"dirs": str(dirs)}}
    # (sum, last token) of each trajectory's per-token rewards: sample 0 applied the gold patch, 1 submitted nothing
    assert out["rewards"] == [[1.0, 1.0], [0.0, 0.0]], out
    assert out["stop_reasons"] == ["stop", "stop"], out
    resolved = [v for k, v in out["metrics"].items() if k.endswith("env/resolved")]
    errors = [v for k, v in out["metrics"].items() if k.endswith("env/errors")]
    assert resolved == [0.5] and errors == [0.0], out["metrics"]  # SkyRL averaged the env's own metrics


def test_launch_script_config_builds_and_passes_skyrl_validation(venv, tmp_path):
    # console logging: the script's wandb logger wants $WANDB_API_KEY, which validate_cfg checks
    overrides = [*launch_overrides(tmp_path), "trainer.logger=console"]
    code = (
        "import json, sys; from swebox.trainers import skyrl_entry; cfg = skyrl_entry.build_config(sys.argv[1:]); "
        "_, main_base, _ = skyrl_entry.skyrl_modules(); main_base.validate_cfg(cfg); "
        "print(json.dumps([type(cfg).__name__, cfg.environment.env_class, cfg.environment.skyrl_gym.swebox, "
        "cfg.generator.max_turns, cfg.data.train_data]))"
    )
    proc = run_in(venv, "python", "-c", code, *overrides, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        "SweboxSkyRLConfig",
        "swebox",
        {"max_turns": 30, "command_timeout_s": 60, "time_limit_s": 1800, "sandbox": {"memory_mb": 8192}},
        30,
        [f"{tmp_path}/train.parquet"],
    ]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "environment.skyrl_gym.swebox.max_turn=3",
            "environment.skyrl_gym.swebox: EpisodeConfig: unknown keys ['max_turn']; expected a subset of ",
        ),
        (
            "environment.skyrl_gym.swebox.layers.stor=/x",
            "environment.skyrl_gym.swebox: LayerSource: unknown keys ['stor']",
        ),
        ("generator.max_turnz=3", "SkyRL's config: ValueError: Invalid fields {'max_turnz'} for GeneratorConfig."),
    ],
)
def test_a_bad_option_is_one_line_before_ray(venv, tmp_path, override, message):
    proc = run_in(
        venv,
        "python",
        "-m",
        "swebox.trainers.skyrl_entry",
        "environment.env_class=swebox",
        override,
        cwd=tmp_path,
        timeout=300,
        env={"SWEBOX_DEBUG": ""},
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "| INFO" not in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("python -m swebox.trainers.skyrl_entry: error: "), lines
    assert message in lines[0], lines
