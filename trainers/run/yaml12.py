"""YAML values read the way YAML 1.2 reads them: only ``true``/``false`` are booleans, ``1e-3`` is a number.

PyYAML implements YAML 1.1, where ``off``, ``on``, ``no``, ``yes``, ``y`` and ``n`` are booleans too: a
string field written ``env.audit: off`` would reach the config as ``False`` (and OmegaConf would store it as the
string ``'False'``). Bool fields lose nothing: OmegaConf still reads ``on``/``off``/``yes``/``no`` given to a bool
field as booleans. Floats follow YAML 1.2 (an exponent needs no dot) and dates stay text, as in OmegaConf's own
loader.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_BOOL = "tag:yaml.org,2002:bool"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"  # a date stays the text it is, as in OmegaConf


class Yaml12Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2's booleans and floats."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Yaml12Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load(text: str) -> Any:
    """The value of a YAML document (``yaml.safe_load`` with YAML 1.2's booleans and floats)."""
    return yaml.load(text, Loader=Yaml12Loader)  # a SafeLoader subclass: no arbitrary objects
