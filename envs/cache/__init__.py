"""swebox.envs.cache: build, pack, store and restore environment layers (see docs/cache.md)."""

from __future__ import annotations

from .budget import DEFAULT_BUDGET_MB, IOBudget, weight_mb
from .builder import BuilderConfig, EnvBuildError, build_env
from .interpreters import Interpreter, InterpreterNotFound, find_interpreter
from .layer_cache import LayerCache, LayerCacheConfig, LayerHandle, QuotaError
from .layer_owner import LayerOwnerError
from .manifest import Manifest
from .packing import FORMATS, MAPPED_ROOT_UID, UnsafeArchiveError, pack, unpack
from .spec import EnvSpec
from .store import BuildFailure, LayerBuildFailed, LayerCorruptError, LayerStore
from .task_layer import build_task_layer, task_layer_key
from .transfer import copy_layers

__all__ = [
    "DEFAULT_BUDGET_MB",
    "FORMATS",
    "MAPPED_ROOT_UID",
    "BuildFailure",
    "BuilderConfig",
    "EnvBuildError",
    "EnvSpec",
    "IOBudget",
    "Interpreter",
    "InterpreterNotFound",
    "LayerBuildFailed",
    "LayerCache",
    "LayerCacheConfig",
    "LayerCorruptError",
    "LayerHandle",
    "LayerOwnerError",
    "LayerStore",
    "Manifest",
    "QuotaError",
    "UnsafeArchiveError",
    "build_env",
    "build_task_layer",
    "copy_layers",
    "find_interpreter",
    "pack",
    "task_layer_key",
    "unpack",
    "weight_mb",
]
