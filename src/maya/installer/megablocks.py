"""MegaBlocks' Python code without its CUDA build, which emulated ranks run (`emulator/standins/megablocks_ops.py`).

MegaBlocks' setup builds its extension (`megablocks_ops`) wherever it finds a CUDA toolkit, and the registry's
release pins a torch older than Maya's (`torch<2.7.1`), so `pip install megablocks` either fails to build or replaces
torch. This installs its Python code alone (`python_code.py`), with Stanford's block-sparse kernels (`stanford-stk`,
Triton), without their dependencies:

    python -m maya.installer.megablocks                     # megablocks==0.10.0 and stanford-stk==0.7.1
    python -m maya.installer.megablocks git+URL[@ref] | FOLDER

Its grouped-GEMM path (`mlp_impl="grouped"`) also needs grouped_gemm (`python -m maya.installer.grouped_gemm`).
"""

from __future__ import annotations

import typer

from maya.installer import python_code

MEGABLOCKS = python_code.PythonCode(
    module="megablocks",
    distributions=("megablocks",),
    default="megablocks==0.10.0",
    companions=("stanford-stk==0.7.1",),
    version_file="_version.py",
)
"""The registry's release, with the block-sparse kernels its layers import."""


def install_command(source: str = MEGABLOCKS.default) -> str:
    """The command that installs MegaBlocks' Python code from `source` into this interpreter's environment."""
    return "python -m maya.installer.megablocks" + ("" if source == MEGABLOCKS.default else f" {source}")


def missing_hint(reason: str) -> str | None:
    """How to install MegaBlocks, when a failed capture's `reason` is a rank's import of it that failed."""
    if "No module named 'megablocks" not in reason and "No module named 'stk'" not in reason:
        return None
    return (
        "the script needs MegaBlocks (and stanford-stk, which it imports), not installed: on a machine without a GPU "
        f"install their Python code without MegaBlocks' CUDA build (`{install_command()}`); Maya runs its extension's "
        "calls as the torch ops that compute the same"
    )


def installed() -> tuple[str, str] | None:
    """The installed MegaBlocks release's distribution and version (None: not installed)."""
    return python_code.installed(MEGABLOCKS)


def main(
    source: str = typer.Argument(
        MEGABLOCKS.default, help="NAME==VERSION from the registry, git+URL[@ref], or a folder"
    ),
) -> None:
    """Install MegaBlocks' Python code without its CUDA build (the release asked for, already installed, is kept)."""
    python_code.run(MEGABLOCKS, source)


if __name__ == "__main__":
    typer.run(main)
