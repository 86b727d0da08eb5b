"""swebox.envs.cache: build, pack, store and restore environment layers (see docs/cache.md)."""

from __future__ import annotations

from .budget import DEFAULT_BUDGET_MB, IOBudget, weight_mb
from .layer_cache import LayerCache, LayerCacheConfig, LayerHandle, QuotaError
from .packing import FORMATS, MAPPED_ROOT_UID, UnsafeArchiveError, pack, unpack
from .spec import EnvSpec
from .store import BuildFailure, LayerBuildFailed, LayerCorruptError, LayerStore, Manifest, copy_layers

__all__ = [
    "DEFAULT_BUDGET_MB", "FORMATS", "MAPPED_ROOT_UID", "BuildFailure", "EnvSpec", "IOBudget",
    "LayerBuildFailed", "LayerCache", "LayerCacheConfig", "LayerCorruptError", "LayerHandle", "LayerStore",
    "Manifest", "QuotaError", "UnsafeArchiveError", "copy_layers", "pack", "unpack", "weight_mb",
]
