"""Which optional extra of swebox a missing module comes with, and the one line that says how to install it.

A base install (``pip install swebox``) has the sandbox, the layer cache and the tasks; the trainer, the viewer,
the SkyRL bridge and the rest need their extras (setup.cfg ``extras_require``). A command that reaches a module
of an extra that is not installed ends with one line, for the viewer without Flask ``needs the 'view' extra
(flask is not installed); install it: pip install 'swebox[view]'`` after the command's name (exit 2), instead of
a ``ModuleNotFoundError`` traceback. A module that
belongs to no extra is a bug, not a missing extra, and keeps its traceback.
"""

from __future__ import annotations

EXTRA_OF = {
    "torch": "train",
    "transformers": "train",
    "ray": "train",
    "wandb": "train",
    "omegaconf": "train",
    "matplotlib": "train",
    "openai": "train",
    "rich": "train",
    "pyarrow": "train",  # also in 'skyrl'; 'train' is what most commands that read parquet need
    "skyrl_gym": "skyrl",
    "flask": "view",
    "libcst": "synth",
    "datasets": "hf",
    "vllm": "vllm",
    "swebench": "swe-recipes",
    "swesmith": "swe-recipes",
    "unidiff": "logs",
    "dotenv": "logs",
    "requests": "logs",
}
"""Top-level module name -> the extra of setup.cfg that installs it."""

COMMAND_EXTRA = {"skyrl": "skyrl", "view": "view", "tasks": "synth"}
"""A command whose own extra wins when its missing module is shared (pyarrow: `skyrl prepare` needs 'skyrl')."""


def missing_extra(exc: BaseException, command: str = "") -> str:
    """The extra that installs the module ``exc`` found missing ('' when it is no extra's)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return ""
    top = exc.name.split(".")[0]
    extra = EXTRA_OF.get(top, "")
    if top == "pyarrow" and COMMAND_EXTRA.get(command) == "skyrl":
        return "skyrl"
    return extra


def hint(exc: ModuleNotFoundError, command: str) -> str:
    """The one line for a missing extra."""
    extra = missing_extra(exc, command)
    return (
        f"swebox {command}: needs the '{extra}' extra ({exc.name.split('.')[0]} is not installed); install it: "
        f"pip install 'swebox[{extra}]'"
    )
