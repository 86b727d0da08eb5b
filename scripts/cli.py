"""The ``swebox`` command: one sub-command per job (bench, cache, tasks, train, eval, plot)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swebox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    from swebox.scripts import bench_sandbox

    bench_sandbox.add_arguments(bench_sub.add_parser("sandbox", help=bench_sandbox.__doc__.splitlines()[0]))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
