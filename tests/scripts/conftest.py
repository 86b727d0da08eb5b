"""Fixtures of the command's tests: the trainer tests' shapes project, for `swebox eval` through its parser."""

from tests.trainers.conftest import shapes_env  # noqa: F401  (a fixture: pytest finds it by name here)
