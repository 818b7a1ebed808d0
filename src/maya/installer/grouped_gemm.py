"""grouped_gemm's Python code without its CUDA build, which emulated ranks run (`emulator/standins/grouped_gemm_backend.py`).

grouped_gemm's setup always builds its extension: it asks the GPU for its compute capability and runs nvcc, so
`pip install` fails on a machine without both. Its Python code (the `grouped_gemm` package: `ops.gmm`, `ops.permute`,
...) needs neither. This takes the package's source, from the package registry, a git repository or a folder, and
installs that package alone, under its own distribution name and version, for this interpreter; an emulated rank
then answers its extension's calls with Maya's stand-in. NVIDIA's fork, which Megatron-LM and nanotron name, is the
default (on the registry as `nv-grouped-gemm`; its kernels are those of v1.1.4, Megatron-LM's pin); Trevor Gale's
original (`grouped_gemm` 0.x) has `gmm` alone:

    python -m maya.installer.grouped_gemm                          # nv-grouped-gemm==1.1.4.post8
    python -m maya.installer.grouped_gemm grouped_gemm==0.3.0      # Gale's original
    python -m maya.installer.grouped_gemm git+https://github.com/fanshiqing/grouped_gemm@main
    python -m maya.installer.grouped_gemm ./grouped_gemm-checkout  # a folder holding grouped_gemm/
"""

from __future__ import annotations

import ast
import email.parser
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

DEFAULT = "nv-grouped-gemm==1.1.4.post8"
"""NVIDIA's fork on the package registry: the kernels of v1.1.4, the release Megatron-LM's `grouped_gemm_util` names
(nanotron names the fork's main branch, whose kernels are the same)."""
PACKAGE = "grouped_gemm"
"""The module every release installs."""
DISTRIBUTIONS = ("nv-grouped-gemm", "grouped_gemm")
"""The names releases install under (the fork on the registry; the fork from git, and Gale's original)."""
NO_GPU_ENV = {"TORCH_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": "/nonexistent-cuda"}
"""Lets the package's setup describe itself without a GPU or a CUDA toolkit (`pip download` runs it for metadata)."""
_LITERAL = r"""\b{}\s*=\s*["']([^"']+)["']"""


class SourceError(ValueError):
    """A source that holds no grouped_gemm package to install."""


def install_command(source: str = DEFAULT) -> str:
    """The command that installs grouped_gemm's Python code from `source` into this interpreter's environment."""
    return "python -m maya.installer.grouped_gemm" + ("" if source == DEFAULT else f" {source}")


def missing_hint(reason: str) -> str | None:
    """How to install grouped_gemm, when a failed capture's `reason` is a rank's import of it that failed (its own
    message, or nanotron's and Megatron-LM's that name it)."""
    if "No module named 'grouped_gemm'" not in reason and "Grouped GEMM is not available" not in reason:
        return None
    return (
        "the script needs grouped_gemm, which is not installed: on a machine without a GPU install its Python code "
        f"without its CUDA build (`{install_command()}`); Maya runs its calls as the torch ops that compute the same"
    )


def installed() -> tuple[str, str] | None:
    """The installed grouped_gemm distribution and its version (None: not installed)."""
    for distribution in DISTRIBUTIONS:
        version = installed_version(distribution)
        if version is not None:
            return distribution, version
    return None


def source_tree(source: str, scratch: Path) -> Path:
    """The folder holding the package's source (`grouped_gemm/`, and its setup.py or PKG-INFO), fetched into
    `scratch` if needed."""
    if source.startswith("git+"):
        url, ref = git_ref(source[len("git+") :])
        tree = scratch / "git"
        _run(["git", "clone", "--quiet", "--no-checkout", url, str(tree)], f"{source}: git clone failed")
        _run(["git", "-C", str(tree), "-c", "advice.detachedHead=false", "checkout", "--quiet", ref or "HEAD"],
             f"{source}: git checkout of {ref or 'HEAD'} failed")  # fmt: skip
    elif "==" in source:
        _download(source, scratch)
        archives = list(scratch.glob("*.tar.gz"))
        if len(archives) != 1:
            raise SourceError(f"{source}: the registry gave {len(archives)} source archives, expected one")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(scratch / "sdist", filter="data")
        unpacked = list((scratch / "sdist").iterdir())
        if len(unpacked) != 1:
            raise SourceError(f"{source}: its source archive holds {len(unpacked)} top folders, expected one")
        tree = unpacked[0]
    else:
        tree = Path(source)
        if not tree.is_dir():
            raise SourceError(
                f"{source}: not a folder; give NAME==VERSION from the registry, git+URL[@ref] or a folder"
            )
    if not (tree / PACKAGE / "__init__.py").is_file():
        raise SourceError(f"{source}: no {PACKAGE}/__init__.py in {tree}")
    return tree


def git_ref(url: str) -> tuple[str, str]:
    """A git URL and the ref after the `@` that ends its path (a tag, a branch, a commit; none: the default branch).
    An `@` before the host (`ssh://git@host/...`) is the user's."""
    scheme, sep, rest = url.partition("://")
    host_end = len(scheme) + len(sep) + (rest.find("/") if sep and "/" in rest else 0)
    at = url.rfind("@")
    return (url[:at], url[at + 1 :]) if at > host_end else (url, "")


def _run(command: list[str], failed: str) -> None:
    """Run `command`; a failure (or a missing program) is a SourceError saying `failed`."""
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise SourceError(f"{failed}: {error}") from None


def _download(requirement: str, into: Path) -> None:
    """The registry's source archive of `requirement` (its setup runs for metadata, without a GPU)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--no-binary", ":all:", "--no-build-isolation", requirement, "-d", str(into)]  # fmt: skip
    try:
        subprocess.run(command, env={**os.environ, **NO_GPU_ENV}, check=True)
    except subprocess.CalledProcessError as error:
        raise SourceError(f"{requirement}: pip could not download its source ({error})") from None


def identity(tree: Path) -> tuple[str, str]:
    """The source's distribution name and version: from its PKG-INFO (a registry archive), else from its setup.py's
    literals, the version else from `__version__` in grouped_gemm/__init__.py (the fork's main)."""
    info = tree / "PKG-INFO"
    if info.is_file():
        fields = email.parser.Parser().parsestr(info.read_text())
        if fields["Name"] and fields["Version"]:
            return fields["Name"], fields["Version"]
    setup = (tree / "setup.py").read_text() if (tree / "setup.py").is_file() else ""
    name = re.search(_LITERAL.format("name"), setup)
    version = re.search(_LITERAL.format("version"), setup)
    declared = re.search(r"^__version__\s*=\s*(.+)$", (tree / PACKAGE / "__init__.py").read_text(), re.MULTILINE)
    if version is None and declared is None:
        raise SourceError(f"{tree}: no version in its setup.py or {PACKAGE}/__init__.py")
    return name.group(1) if name else PACKAGE, version.group(1) if version else ast.literal_eval(declared.group(1))


def python_project(tree: Path, into: Path) -> Path:
    """A project of the package's Python code alone, under its own name and version (`identity`), in `into`."""
    name, version = identity(tree)
    project = into / "project"
    shutil.copytree(tree / PACKAGE, project / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*_test.py"))
    if (tree / "LICENSE").is_file():
        shutil.copy(tree / "LICENSE", project / "LICENSE")
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
        f'description = "grouped_gemm\'s Python code without its CUDA extension (installed by maya.installer)"\n\n'
        f'[tool.setuptools]\npackages = ["{PACKAGE}"]\n'
    )
    return project


def install(source: str = DEFAULT) -> tuple[str, str]:
    """Install grouped_gemm's Python code from `source` for this interpreter, in place of any other release (they
    share the `grouped_gemm` folder); the installed distribution and version."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory(prefix="maya-grouped-gemm-") as scratch:
        tree = source_tree(source, Path(scratch))
        name, _ = identity(tree)
        wheels = Path(scratch) / "wheel"  # built first: a failed build leaves the installed release alone
        subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                        str(python_project(tree, Path(scratch)))], check=True)  # fmt: skip
        others = [d for d in DISTRIBUTIONS if installed_version(d) is not None and canonical(d) != canonical(name)]
        if others:
            subprocess.run([*pip, "uninstall", "--quiet", "--yes", *others], check=True)
        subprocess.run([*pip, "install", "--quiet", "--no-deps", *map(str, wheels.glob("*.whl"))], check=True)
    return installed() or (name, "?")


def canonical(name: str) -> str:
    """A distribution name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def main(
    source: str = typer.Argument(DEFAULT, help="NAME==VERSION from the registry, git+URL[@ref], or a folder"),
) -> None:
    """Install grouped_gemm's Python code without its CUDA build (the release asked for, already installed, is
    kept)."""
    present = installed()
    if "==" in source and present is not None:
        name, version = source.split("==", 1)
        if (canonical(present[0]), present[1]) == (canonical(name), version):
            typer.echo(f"{present[0]} {version} is already installed")
            return
    try:
        distribution, version = install(source)
    except (SourceError, subprocess.CalledProcessError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{distribution} {version} installed (grouped_gemm's Python code; Maya's stand-in runs its calls)")


if __name__ == "__main__":
    typer.run(main)
