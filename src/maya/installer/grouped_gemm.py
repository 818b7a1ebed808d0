"""grouped_gemm's Python code without its CUDA build, which emulated ranks run (`emulator/standins/grouped_gemm_backend.py`).

grouped_gemm's setup always builds its extension: it asks the GPU for its compute capability and runs nvcc, so
`pip install` fails on a machine without both. This installs its Python code alone (`python_code.py`). NVIDIA's fork,
which Megatron-LM and nanotron name, is the default (on the registry as `nv-grouped-gemm`; its kernels are those of
v1.1.4, Megatron-LM's pin); Trevor Gale's original (`grouped_gemm` 0.x) has `gmm` alone:

    python -m maya.installer.grouped_gemm                          # nv-grouped-gemm==1.1.4.post8
    python -m maya.installer.grouped_gemm grouped_gemm==0.3.0      # Gale's original
    python -m maya.installer.grouped_gemm git+https://github.com/fanshiqing/grouped_gemm@main
    python -m maya.installer.grouped_gemm ./grouped_gemm-checkout  # a folder holding grouped_gemm/
"""

from __future__ import annotations

import typer

from maya.installer import python_code

GROUPED_GEMM = python_code.PythonCode(
    module="grouped_gemm", distributions=("nv-grouped-gemm", "grouped_gemm"), default="nv-grouped-gemm==1.1.4.post8"
)
"""NVIDIA's fork on the registry by default (the fork from git and Gale's original install as `grouped_gemm`)."""


def install_command(source: str = GROUPED_GEMM.default) -> str:
    """The command that installs grouped_gemm's Python code from `source` into this interpreter's environment."""
    return "python -m maya.installer.grouped_gemm" + ("" if source == GROUPED_GEMM.default else f" {source}")


def missing_hint(reason: str) -> str | None:
    """How to install grouped_gemm, when a failed capture's `reason` is a rank's import of it that failed (Python's
    message, or nanotron's, Megatron-LM's and MegaBlocks' that name it)."""
    named = ("No module named 'grouped_gemm'", "Grouped GEMM is not available", "Grouped GEMM not available")
    if not any(text in reason for text in named):  # Python's, nanotron's and Megatron-LM's; MegaBlocks'
        return None
    return (
        "the script needs grouped_gemm, which is not installed: on a machine without a GPU install its Python code "
        f"without its CUDA build (`{install_command()}`); Maya runs its calls as the torch ops that compute the same"
    )


def installed() -> tuple[str, str] | None:
    """The installed grouped_gemm release's distribution and version (None: not installed)."""
    return python_code.installed(GROUPED_GEMM)


def main(
    source: str = typer.Argument(
        GROUPED_GEMM.default, help="NAME==VERSION from the registry, git+URL[@ref], or a folder"
    ),
) -> None:
    """Install grouped_gemm's Python code without its CUDA build (the release asked for, already installed, is
    kept)."""
    python_code.run(GROUPED_GEMM, source)


if __name__ == "__main__":
    typer.run(main)
