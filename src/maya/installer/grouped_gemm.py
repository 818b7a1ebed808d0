"""grouped_gemm's Python code without its CUDA build, which emulated ranks run (`emulator/standins/grouped_gemm_backend.py`).

grouped_gemm's setup always builds its extension: it asks the GPU for its compute capability and runs nvcc, so
`pip install` fails on a machine without both. Its Python code (the `grouped_gemm` package: `ops.gmm`, `ops.permute`,
...) needs neither. This takes the package's source, from a git repository, the package registry or a folder, and
installs that package alone, under its own name and version, for this interpreter; an emulated rank then answers its
extension's calls with Maya's stand-in. NVIDIA's fork at the release Megatron-LM names is the default (nanotron
names the same fork); Trevor Gale's original, on the registry, has `gmm` alone:

    python -m maya.installer.grouped_gemm                          # git+https://github.com/fanshiqing/grouped_gemm@v1.1.4
    python -m maya.installer.grouped_gemm grouped_gemm==0.3.0      # the registry's
    python -m maya.installer.grouped_gemm ./grouped_gemm-checkout  # a folder holding setup.py and grouped_gemm/
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import typer

from maya.installer import installed_version

FORK = "git+https://github.com/fanshiqing/grouped_gemm@v1.1.4"
"""NVIDIA's fork at the release Megatron-LM's `grouped_gemm_util` names (nanotron names its main branch)."""
REGISTRY = "grouped_gemm==0.3.0"
"""Trevor Gale's original on the package registry (`gmm` alone; what scripts/setup installs for the tests)."""
PACKAGE = "grouped_gemm"
NO_GPU_ENV = {"TORCH_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": "/nonexistent-cuda"}
"""Lets the package's setup describe itself without a GPU or a CUDA toolkit (`pip download` runs it for metadata)."""
_VERSION = re.compile(r"""\bversion\s*=\s*["']([^"']+)["']""")


class SourceError(ValueError):
    """A source that holds no grouped_gemm package to install."""


def install_command(source: str = FORK) -> str:
    """The command that installs grouped_gemm's Python code from `source` into this interpreter's environment."""
    return "python -m maya.installer.grouped_gemm" + ("" if source == FORK else f" {source}")


def missing_hint(reason: str) -> str | None:
    """How to install grouped_gemm, when a failed capture's `reason` is a rank's import of it that failed (its own
    message, or nanotron's and Megatron-LM's that name it)."""
    if "No module named 'grouped_gemm'" not in reason and "Grouped GEMM is not available" not in reason:
        return None
    return (
        "the script needs grouped_gemm, which is not installed: on a machine without a GPU install its Python code "
        f"without its CUDA build (`{install_command()}`); Maya runs its calls as the torch ops that compute the same"
    )


def installed() -> str | None:
    """The installed grouped_gemm's version (None: not installed)."""
    return installed_version(PACKAGE)


def source_tree(source: str, scratch: Path) -> Path:
    """The folder holding the package's source (`setup.py` and `grouped_gemm/`), fetched into `scratch` if needed."""
    if source.startswith("git+"):
        url, ref = _git_ref(source[len("git+") :])
        tree = scratch / "git"
        subprocess.run(
            [
                "git",
                "-c",
                "advice.detachedHead=false",
                "clone",
                "--quiet",
                "--depth",
                "1",
                *(["--branch", ref] if ref else []),
                url,
                str(tree),
            ],
            check=True,
        )
    elif "==" in source:
        _download(source, scratch)
        archives = list(scratch.glob("*.tar.gz"))
        if len(archives) != 1:
            raise SourceError(f"{source}: the registry gave {len(archives)} source archives, expected one")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(scratch / "sdist", filter="data")
        tree = next((scratch / "sdist").iterdir())
    else:
        tree = Path(source)
    if not (tree / PACKAGE / "__init__.py").is_file():
        raise SourceError(f"{source}: no {PACKAGE}/__init__.py in {tree}")
    return tree


def _git_ref(url: str) -> tuple[str, str]:
    """A git URL and the ref after its last `@` (a tag or branch without `/`; none: the default branch)."""
    at = url.rfind("@")
    return (url[:at], url[at + 1 :]) if at > url.rfind("/") else (url, "")


def _download(requirement: str, into: Path) -> None:
    """The registry's source archive of `requirement` (its setup runs for metadata, without a GPU)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--no-binary", ":all:", "--no-build-isolation", requirement, "-d", str(into)]  # fmt: skip
    subprocess.run(command, env={**os.environ, **NO_GPU_ENV}, check=True)


def python_project(tree: Path, into: Path) -> Path:
    """A project of the package's Python code alone, under its own name and version (from its setup.py), in `into`."""
    setup = tree / "setup.py"
    found = _VERSION.search(setup.read_text()) if setup.is_file() else None
    if not found:
        raise SourceError(f"{tree}: no version in setup.py")
    project = into / "project"
    shutil.copytree(tree / PACKAGE, project / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*_test.py"))
    for notice in ("LICENSE", "README.md"):
        if (tree / notice).is_file():
            shutil.copy(tree / notice, project / notice)
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{PACKAGE}"\nversion = "{found.group(1)}"\n'
        f'description = "grouped_gemm\'s Python code without its CUDA extension (installed by maya.installer)"\n\n'
        f'[tool.setuptools]\npackages = ["{PACKAGE}"]\n'
    )
    return project


def install(source: str = FORK) -> str:
    """Install grouped_gemm's Python code from `source` for this interpreter; its installed version."""
    with tempfile.TemporaryDirectory(prefix="maya-grouped-gemm-") as scratch:
        project = python_project(source_tree(source, Path(scratch)), Path(scratch))
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        subprocess.run([*command, "--no-build-isolation", str(project)], check=True)
    return installed() or "?"


def main(
    source: str = typer.Argument(FORK, help="git+URL[@ref], NAME==VERSION from the registry, or a folder"),
) -> None:
    """Install grouped_gemm's Python code without its CUDA build (a release already installed is kept)."""
    if "==" in source and installed() == source.split("==", 1)[1]:
        return
    try:
        typer.echo(f"grouped_gemm {install(source)} installed (its Python code; Maya's stand-in runs its calls)")
    except (SourceError, subprocess.CalledProcessError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


if __name__ == "__main__":
    typer.run(main)
