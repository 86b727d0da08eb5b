"""Benchmark sandbox start/reset/exec for the overlay and extract backends (placeholder until the sandbox lands)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("swebox bench sandbox: not implemented yet")
