"""Old module names keep working: ``import swebox.envs.swe_env`` is the module now at ``swebox.envs.episodes.episode``.

Issue #30 moved modules into folders by role (docs/architecture.md). READMEs, user configs, Harbor's ``--env``
strings and other people's code name the old modules, so :class:`OldNames`, a meta-path finder installed by
``swebox.envs`` and ``swebox.trainers`` on import, answers for every old name in :data:`MOVED`: importing it
returns THE SAME module object as the new name (one module, so ``mock.patch("swebox.envs.swe_env.X")`` patches the
code that runs), and ``python -m OLD.NAME`` runs the new module's code as ``__main__``. Standard library only:
``import swebox.envs.sandbox`` must load nothing else. New code names the new modules.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType

MOVED = {
    "swebox.envs.episode_state": "swebox.envs.episodes.episode_state",
    "swebox.envs.grade_cache": "swebox.envs.episodes.grade_cache",
    "swebox.envs.groups": "swebox.envs.episodes.groups",
    "swebox.envs.gym_env": "swebox.envs.frameworks.gym_env",
    "swebox.envs.harbor_env": "swebox.envs.frameworks.harbor_env",
    "swebox.envs.layers_resolver": "swebox.envs.episodes.layers_resolver",
    "swebox.envs.skyrl_env": "swebox.envs.frameworks.skyrl_env",
    "swebox.envs.skyrl_prepare": "swebox.envs.frameworks.skyrl_prepare",
    "swebox.envs.swe_env": "swebox.envs.episodes.episode",
    "swebox.envs.task_episodes": "swebox.envs.episodes.task_episodes",
    "swebox.envs.tasks.cli": "swebox.scripts.tasks_cli",
    "swebox.envs.tasks.diff_truth": "swebox.envs.tasks.graders.diff_truth",
    "swebox.envs.tasks.diffs": "swebox.envs.tasks.graders.diffs",
    "swebox.envs.tasks.grade_monitor": "swebox.envs.tasks.graders.grade_monitor",
    "swebox.envs.tasks.grade_slots": "swebox.envs.tasks.graders.grade_slots",
    "swebox.envs.tasks.grading": "swebox.envs.tasks.graders.grading",
    "swebox.envs.tasks.harbor": "swebox.envs.tasks.harbor_format.folders",
    "swebox.envs.tasks.harbor_cli": "swebox.scripts.harbor_cli",
    "swebox.envs.tasks.harbor_dockerfile": "swebox.envs.tasks.harbor_format.dockerfile",
    "swebox.envs.tasks.harbor_export": "swebox.envs.tasks.harbor_format.export",
    "swebox.envs.tasks.harbor_verify": "swebox.envs.tasks.harbor_format.verify",
    "swebox.envs.tasks.junit": "swebox.envs.tasks.graders.junit",
    "swebox.envs.tasks.log_canaries": "swebox.envs.tasks.graders.log_canaries",
    "swebox.envs.tasks.log_grading": "swebox.envs.tasks.graders.log_grading",
    "swebox.envs.tasks.log_monitor": "swebox.envs.tasks.graders.log_monitor",
    "swebox.envs.tasks.log_parsers": "swebox.envs.tasks.graders.log_parsers",
    "swebox.envs.tasks.provenance": "swebox.envs.tasks.graders.provenance",
    "swebox.envs.tasks.pytest_runner": "swebox.envs.tasks.graders.pytest_runner",
    "swebox.envs.tasks.rewrite_cache": "swebox.envs.tasks.graders.rewrite_cache",
    "swebox.envs.tasks.rewrite_tests": "swebox.envs.tasks.graders.rewrite_tests",
    "swebox.envs.tasks.runner_origins": "swebox.envs.tasks.graders.runner_origins",
    "swebox.envs.tasks.swebench_harness": "swebox.envs.tasks.graders.swebench_harness",
    "swebox.envs.tasks.synth.cli": "swebox.scripts.synth_cli",
    "swebox.envs.tasks.verdict": "swebox.envs.tasks.graders.verdict",
    "swebox.envs.tasks.verify": "swebox.envs.tasks.graders.verify",
    "swebox.trainers.checkpoint": "swebox.trainers.run.checkpoint",
    "swebox.trainers.cli": "swebox.scripts.train_cli",
    "swebox.trainers.config": "swebox.trainers.run.config",
    "swebox.trainers.eval_records": "swebox.trainers.evaluation.eval_records",
    "swebox.trainers.eval_search": "swebox.trainers.evaluation.eval_search",
    "swebox.trainers.gen_server": "swebox.trainers.policy.gen_server",
    "swebox.trainers.generation": "swebox.trainers.policy.generation",
    "swebox.trainers.grpo": "swebox.trainers.rl.grpo",
    "swebox.trainers.learner": "swebox.trainers.rl.learner",
    "swebox.trainers.models": "swebox.trainers.policy.models",
    "swebox.trainers.plot": "swebox.trainers.run.plot",
    "swebox.trainers.ray_actors": "swebox.trainers.distributed.ray_actors",
    "swebox.trainers.ray_connect": "swebox.trainers.distributed.ray_connect",
    "swebox.trainers.ray_pool": "swebox.trainers.distributed.ray_pool",
    "swebox.trainers.rollout": "swebox.trainers.rl.rollout",
    "swebox.trainers.sampling": "swebox.trainers.policy.sampling",
    "swebox.trainers.sft": "swebox.trainers.finetune.sft",
    "swebox.trainers.sft_data": "swebox.trainers.finetune.sft_data",
    "swebox.trainers.tracking": "swebox.trainers.run.tracking",
    "swebox.trainers.trainer": "swebox.trainers.rl.trainer",
    "swebox.trainers.trajectories": "swebox.trainers.run.trajectories",
}
"""Old dotted module name -> the module's name now."""


class _SameModule(importlib.abc.Loader):
    """Loads an old name as the module of its new name: no second copy, no code run twice."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # the import system keeps a module's own __name__/__spec__ when create_module returns one with them set
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name

    def get_code(self, fullname: str) -> CodeType | None:
        """For ``python -m OLD.NAME`` (runpy asks the loader for the code to run as ``__main__``)."""
        spec = importlib.util.find_spec(self.new)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"{fullname}: moved to {self.new}, which has no code to run")
        return spec.loader.get_code(self.new)

    def is_package(self, fullname: str) -> bool:
        return False


class OldNames(importlib.abc.MetaPathFinder):
    """Finds the modules named in :data:`MOVED` under their old names."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(name)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(name, _SameModule(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` once (it answers only for old names, so it shadows nothing)."""
    if not any(isinstance(finder, OldNames) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldNames())
