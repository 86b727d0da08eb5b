"""A Python 3.12 venv with the real SkyRL 0.4 (``skyrl`` 0.4.0, ``skyrl-gym`` 0.4.0, ``ray`` 2.57.0, its pin).

skyrl 0.4 requires Python >= 3.12, so its tests drive a venv of their own (:func:`tests.venvs.cached_venv`).
``skyrl[fsdp]`` would add vLLM, flash-attn and more that only a GPU uses; the list here is skyrl's own
dependencies plus the modules of its ``skyrl-train`` extra that its config, generator and entry point import,
so SkyRL's own generator loop, config building and ``validate_cfg`` run on a CPU. torch is whatever build pip
finds for 3.12 (on this machine's disk, a CUDA build that runs on the CPU; nothing here asks for a GPU).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.venvs import cached_venv, python, venv_path

SKYRL = "skyrl==0.4.0"
REQUIREMENTS = [
    SKYRL,
    "skyrl-gym==0.4.0",
    "ray==2.57.0",
    "torch",
    # skyrl-train's extra, the part its config/generator/entry point import (no vllm, flash-attn, nixl, s5cmd)
    "loguru",
    "jaxtyping",
    "torchdata",
    "httpx",
    "aiohttp",
    "orjson>=3.11.9",
    "pybase64>=1.4.2",
    "pydantic",
    "omegaconf",
    # swebox's own dependencies, and what its tests use
    "gymnasium>=1.0",
    "pyyaml>=6",
    "tqdm>=4.60",
    "pyarrow>=14",
    "pytest",
]


def python312() -> str:
    """The 3.12 interpreter; '' when there is none."""
    return python("3.12")


def skyrl_venv_wanted() -> bool:
    """Build it only when asked (``SWEBOX_TEST_SKYRL=1``, ``make test-skyrl``) or already built: pip finds only
    a CUDA build of torch for 3.12 here, so the venv is ~6 GB and takes ~36 min to make, more than the whole
    suite's budget on a fresh machine."""
    built = (venv_path("skyrl04-py312", python312(), REQUIREMENTS) / ".complete").exists()
    return os.environ.get("SWEBOX_TEST_SKYRL") == "1" or built


def skyrl_venv() -> Path:
    """The venv folder (made on first use; pip needs the package index the first time)."""
    return cached_venv("skyrl04-py312", python312(), REQUIREMENTS, pip_timeout=2400)
