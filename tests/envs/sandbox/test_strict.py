"""The one strict dict -> dataclass reader (swebox.envs.sandbox.strict)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from swebox.envs.sandbox.strict import checked_fields, strict_from_dict


@dataclass
class Record:
    name: str
    size: int = 1
    tags: list[str] = field(default_factory=list)


class RecordError(ValueError):
    pass


def test_a_dict_of_its_fields_builds_the_record_and_an_instance_passes_through():
    record = strict_from_dict(Record, {"name": "a", "tags": ["x"]})
    assert record == Record("a", 1, ["x"])
    assert strict_from_dict(Record, record) is record
    data = {"name": "b"}
    checked = checked_fields(Record, data)
    assert checked == data and checked is not data  # a copy: the caller may change it


def test_unknown_keys_name_themselves_the_valid_ones_and_the_fix():
    with pytest.raises(RecordError) as info:
        strict_from_dict(Record, {"name": "a", "sise": 2}, error=RecordError)
    message = str(info.value)
    assert "Record: unknown keys ['sise']; expected a subset of ['name', 'size', 'tags']." in message
    assert "Fix their spelling" in message
    with pytest.raises(ValueError, match=r"^rows.jsonl:3: unknown keys \['x'\].*put it under metadata$"):
        checked_fields(Record, {"name": "a", "x": 1}, what="rows.jsonl:3", fix="put it under metadata")


def test_a_missing_required_key_and_a_non_mapping_are_errors():
    with pytest.raises(ValueError, match=r"Record: missing key 'name' \(required: \['name'\]\); found keys \['size'\]"):
        strict_from_dict(Record, {"size": 2})
    with pytest.raises(ValueError, match=r"Record: expected a dict \(a JSON object\) of its fields.*found list: \[1\]"):
        strict_from_dict(Record, [1])
    with pytest.raises(ValueError, match="found NoneType"):
        strict_from_dict(Record, None)
