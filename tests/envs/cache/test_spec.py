from __future__ import annotations

import hashlib

import pytest
from swebox.envs.cache.spec import EnvSpec, parse_pypi, source_kind


def test_key_is_sha256_of_canonical_json():
    spec = EnvSpec(source="pypi:toolz==1.0.0")
    expected_json = (
        '{"commit":"","install":["pip install -e ."],"python":"3.11","setup":[],'
        '"source":"pypi:toolz==1.0.0","test_deps":["pytest"]}'
    )
    assert spec.canonical_json() == expected_json
    assert spec.key() == "env-" + hashlib.sha256(expected_json.encode()).hexdigest()[:20]
    assert len(spec.key()) == 24


def test_key_changes_with_every_field_and_roundtrips():
    base = EnvSpec(source="/repos/demo", commit="a" * 40)
    variants = [
        EnvSpec(source="/repos/demo", commit="b" * 40),
        EnvSpec(source="/repos/demo", commit="a" * 40, python="3.12"),
        EnvSpec(source="/repos/demo", commit="a" * 40, install=("pip install .",)),
        EnvSpec(source="/repos/demo", commit="a" * 40, test_deps=("pytest", "hypothesis")),
        EnvSpec(source="/repos/demo", commit="a" * 40, setup=("echo hi",)),
    ]
    assert len({base.key(), *(v.key() for v in variants)}) == 6
    for spec in [base, *variants]:
        again = EnvSpec.from_dict(spec.to_dict())
        assert again == spec and again.key() == spec.key()
    # lists from JSON become tuples, so the spec stays hashable and equal
    assert EnvSpec.from_dict({"source": "pypi:a==1", "install": ["x"]}).install == ("x",)


def test_source_kinds():
    assert source_kind("pypi:x==1") == "pypi"
    assert source_kind("/abs/repo") == "local"
    assert source_kind("git+https://example.org/r.git") == "git"
    assert parse_pypi("pypi:semver==3.0.2") == ("semver", "3.0.2")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "toolz"}, "EnvSpec.source"),
        ({"source": "pypi:toolz"}, "exact pin"),
        ({"source": "pypi:toolz>=1"}, "exact pin"),
        ({"source": "pypi:toolz==1", "commit": "abc1234"}, "EnvSpec.commit"),
        ({"source": "/repo"}, "EnvSpec.commit"),
        ({"source": "/repo", "commit": "HEAD"}, "EnvSpec.commit"),
        ({"source": "pypi:toolz==1", "python": "3"}, "EnvSpec.python"),
        ({"source": "pypi:toolz==1", "python": "python3.11"}, "EnvSpec.python"),
        ({"source": "pypi:toolz==1", "install": "pip install -e ."}, "EnvSpec.install"),
        ({"source": "pypi:toolz==1", "test_deps": ["pytest", 3]}, "EnvSpec.test_deps"),
    ],
)
def test_bad_specs_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EnvSpec(**kwargs)


def test_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(ValueError, match=r"unknown keys \['pyhton'\]"):
        EnvSpec.from_dict({"source": "pypi:a==1", "pyhton": "3.11"})
    with pytest.raises(ValueError, match="missing key 'source'"):
        EnvSpec.from_dict({"python": "3.11"})
    with pytest.raises(ValueError, match="expected a dict"):
        EnvSpec.from_dict(["pypi:a==1"])


def test_the_pinned_interpreter_layer_is_part_of_the_key():
    """Two builds of Python 3.9 (another patch release, or the same one built differently) are two interpreter
    layers with two keys: pinned, they give two env keys; the same pin gives the same key; no pin keeps the key
    a spec had before the field existed."""
    a, b = "python-3.9.18-" + "a" * 20, "python-3.9.18-" + "b" * 20
    base = dict(source="/repos/demo", commit="a" * 40, python="3.9")
    unpinned, on_a, on_b = EnvSpec(**base), EnvSpec(**base, interpreter=a), EnvSpec(**base, interpreter=b)
    assert len({unpinned.key(), on_a.key(), on_b.key()}) == 3
    assert EnvSpec(**base, interpreter=a).key() == on_a.key()
    assert EnvSpec(**{**base, "python": "3.9.18"}, interpreter=a).key() != on_a.key()
    assert "interpreter" not in unpinned.to_dict() and '"interpreter"' not in unpinned.canonical_json()
    assert on_a.to_dict()["interpreter"] == a
    assert EnvSpec.from_dict(on_a.to_dict()) == on_a and EnvSpec.from_dict(on_a.to_dict()).key() == on_a.key()


@pytest.mark.parametrize(
    ("python", "interpreter"),
    [
        ("3.9", "python-3.10.13-" + "a" * 20),  # another version than the spec's
        ("3.9.18", "python-3.9.17-" + "a" * 20),
        ("3.9", "python-3.9.18"),  # no content hash
        ("3.9", "/root/.pyenv/versions/3.9.18"),  # a path, not a layer
    ],
)
def test_a_pin_that_does_not_name_a_layer_of_the_spec_version_is_refused(python, interpreter):
    with pytest.raises(ValueError, match=r"EnvSpec\.interpreter: expected the key of an interpreter layer"):
        EnvSpec(source="pypi:toolz==1.0.0", python=python, interpreter=interpreter)
