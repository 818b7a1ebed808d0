"""A stand-in for torchtune 0.6.1's `tune` CLI: the modules `maya emulate`'s reader of `tune run` uses
(`torchtune._cli.tune.TuneCLIParser`, `torchtune._cli.run.Run`), their code as 0.6.1 has it (torchrun's parser copied,
the recipe and config found by name, `sys.path.append(os.getcwd())`, `_is_distributed_args` counting `sys.argv`,
`_run_distributed`/`_run_single_device(args, is_builtin)`), two built-in recipes, and no torchao: torchtune cannot be in
any extra (docs/frameworks-and-versions.md), so the reader runs on the fast path against this."""

from pathlib import Path

RUN = """
import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torchtune
from torch.distributed.run import get_args_parser as get_torchrun_args_parser

ROOT = Path(torchtune.__file__).parent.parent
RECIPES = [  # torchtune._recipe_registry: two of 0.6.1's
    SimpleNamespace(name="full_finetune_single_device", file_path="full_finetune_single_device.py",
        supports_distributed=False,
        configs=[SimpleNamespace(
            name="llama3_2/1B_full_single_device", file_path="llama3_2/1B_full_single_device.yaml"
        )]),
    SimpleNamespace(name="full_finetune_distributed", file_path="full_finetune_distributed.py",
        supports_distributed=True,
        configs=[SimpleNamespace(name="llama3_2/1B_full", file_path="llama3_2/1B_full.yaml")]),
]


class Run:
    def __init__(self, subparsers):
        self._parser = subparsers.add_parser("run", prog="tune run",
            usage="tune run [TORCHRUN-OPTIONS] <recipe> --config <config> [RECIPE-OPTIONS]")
        for action in get_torchrun_args_parser()._actions:
            if action.dest == "training_script":
                action.dest = "recipe"
            elif action.dest == "training_script_args":
                action.dest = "recipe_args"
            elif action.dest == "help":
                continue
            self._parser._add_action(action)
        self._parser.set_defaults(func=self._run_cmd)

    @classmethod
    def create(cls, *args, **kwargs):
        return cls(*args, **kwargs)

    def _run_distributed(self, args, is_builtin):
        raise AssertionError("the reader runs no recipe")

    def _run_single_device(self, args, is_builtin):
        raise AssertionError("the reader runs no recipe")

    def _is_distributed_args(self, args):
        total = len(sys.argv) - 2
        script_args = len(args.recipe_args) + 1
        return total > script_args

    def _run_cmd(self, args):
        supports_distributed = True
        try:
            config_idx = args.recipe_args.index("--config") + 1
            config_str = args.recipe_args[config_idx]
        except ValueError:
            self._parser.error("The '--config' argument is required.")
        recipe = next((r for r in RECIPES if r.name == args.recipe), None)
        if recipe is None:
            recipe_path, is_builtin = os.path.splitext(args.recipe)[0].replace("/", "."), False
        else:
            recipe_path, is_builtin = str(ROOT / "recipes" / recipe.file_path), True
            supports_distributed = recipe.supports_distributed
        configs = [c for r in ([recipe] if recipe else []) + RECIPES for c in r.configs if c.name == config_str]
        config_path = str(ROOT / "recipes" / "configs" / configs[0].file_path) if configs else config_str
        args.recipe = recipe_path
        args.recipe_args[config_idx] = config_path
        sys.path.append(os.getcwd())
        if self._is_distributed_args(args):
            if not supports_distributed:
                self._parser.error(f"Recipe {recipe.name} does not support distributed training."
                    "Please run without torchrun commands.")
            self._run_distributed(args, is_builtin=is_builtin)
        else:
            self._run_single_device(args, is_builtin=is_builtin)
"""

TUNE = """
import argparse

from torchtune._cli.run import Run


class TuneCLIParser:
    def __init__(self):
        self._parser = argparse.ArgumentParser(prog="tune", add_help=True)
        self._parser.set_defaults(func=lambda args: self._parser.print_help())
        Run.create(self._parser.add_subparsers(title="subcommands"))

    def parse_args(self):
        return self._parser.parse_args()

    def run(self, args):
        args.func(args)
"""


def install(folder: Path, on_import: str = "") -> Path:
    """The fake `torchtune` package in `folder` (put it first on the path); `on_import`: its `__init__`'s code."""
    cli = folder / "torchtune" / "_cli"
    cli.mkdir(parents=True)
    (folder / "torchtune" / "__init__.py").write_text(on_import)
    (cli / "__init__.py").write_text("")
    (cli / "run.py").write_text(RUN)
    (cli / "tune.py").write_text(TUNE)
    return folder / "recipes"
