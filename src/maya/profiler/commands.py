"""The profiler's own command line (argparse, no dependencies beyond the profiler's), for GPU hosts:

    python -m maya.profiler kernels --out DIR [--families gemm,attention] [--budget-min 12]
    python -m maya.profiler workload --out DIR [--measure] -- python SCRIPT ARGS
    python -m maya.profiler workload --out DIR --suite data/workloads/suite.py [--budget-min 8]

From a source checkout without installation: `python src/maya/profiler/run_on_device.py ...`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .kernels.configs import FAMILIES
from .kernels.request import DEFAULT_BUDGET_MIN, DEVICES, CampaignRequest
from .workloads.cli import add_arguments as add_workload_arguments


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m maya.profiler", description="Measure GPU kernels and workloads with torch.profiler."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    kernels = commands.add_parser("kernels", help="run (or resume) a kernel sweep campaign")
    kernels.add_argument("--out", type=Path, required=True, help="campaign directory (created or resumed)")
    kernels.add_argument("--families", help=f"comma-separated families (default: all of {','.join(FAMILIES)})")
    kernels.add_argument(
        "--budget-min",
        type=float,
        default=DEFAULT_BUDGET_MIN,
        help=f"stop cleanly before this many minutes (default {DEFAULT_BUDGET_MIN:g})",
    )
    kernels.add_argument("--seed", type=int, default=0, help="sweep order seed (default 0)")
    kernels.add_argument("--hardware", help="hardware catalog name of the GPU, e.g. h100-sxm")
    kernels.add_argument(
        "--device",
        default="cuda",
        choices=DEVICES,
        help="cpu only exercises the measurement loop (tests); default cuda",
    )
    kernels.add_argument("--plan", action="store_true", help="print the configs left to measure and exit")
    workload = commands.add_parser(
        "workload", help="trace or measure a training script (-- python SCRIPT ARGS), or run a suite of them"
    )
    add_workload_arguments(workload)
    return parser


def _kernels(args: argparse.Namespace) -> int:
    from .kernels.campaign import NoDevice
    from .kernels.campaign_store import CampaignMismatch

    try:
        request = CampaignRequest.make(
            args.out,
            args.families,
            budget_min=args.budget_min,
            seed=args.seed,
            hardware=args.hardware,
            device=args.device,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.plan:
        print("\n".join(request.plan_lines()))
        return 0
    try:
        result = request.run()
    except (NoDevice, CampaignMismatch) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(result.summary_lines()))
    return 1 if result.stop_reason == "cuda-error" else 0


def _workload(args: argparse.Namespace) -> int:
    from .workloads.cli import UsageError, request_from_args, run_request

    try:
        return run_request(request_from_args(args))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _kernels(args) if args.command == "kernels" else _workload(args)
