"""A package's Python code without its CUDA build, for packages whose extensions emulated ranks find as stand-ins.

Some packages' setups build a CUDA extension whenever they can (grouped_gemm asks the GPU for its compute capability
and runs nvcc; MegaBlocks builds wherever it finds a CUDA toolkit), and fail on a machine without a GPU; their Python
code needs neither. This takes a package's source, from the package registry, a git repository or a folder, and
installs its Python code alone, under its own distribution name and version, for this interpreter, in place of
another release of the same code; an emulated rank then answers its extension's calls with Maya's stand-in
(`emulator/standins/`). `grouped_gemm.py` and `megablocks.py` name the packages and their commands.
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
from dataclasses import dataclass
from pathlib import Path

import typer

from maya.installer import installed_version

NO_GPU_ENV = {"TORCH_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": "/nonexistent-cuda"}
"""Lets a package's setup describe itself without a GPU or a CUDA toolkit (`pip download` runs it for metadata)."""
_LITERAL = r"""\b{}\s*=\s*["']([^"']+)["']"""


@dataclass(frozen=True)
class PythonCode:
    """A package installed as its Python code alone."""

    module: str
    """The top-level package its releases install (`grouped_gemm`)."""
    distributions: tuple[str, ...]
    """The names its releases install under; installing one replaces the others (they share `module`)."""
    default: str
    """The release installed when none is named: NAME==VERSION from the registry."""
    companions: tuple[str, ...] = ()
    """Requirements (NAME==VERSION) installed beside it without their dependencies (its own pin the registry's torch
    cannot meet)."""
    version_file: str = "__init__.py"
    """The file of the package that declares its `__version__`, where its setup.py has no literal version."""


class SourceError(ValueError):
    """A source that holds no package to install, or that could not be fetched."""


def installed(package: PythonCode) -> tuple[str, str] | None:
    """The installed release's distribution and version (None: not installed)."""
    for distribution in package.distributions:
        version = installed_version(distribution)
        if version is not None:
            return distribution, version
    return None


def source_tree(package: PythonCode, source: str, scratch: Path) -> Path:
    """The folder holding the package's source (`module/`, and its setup.py or PKG-INFO), fetched into `scratch`
    if needed: NAME==VERSION from the registry, git+URL[@ref], or a folder."""
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
    if not (tree / package.module / "__init__.py").is_file():
        raise SourceError(f"{source}: no {package.module}/__init__.py in {tree}")
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


def identity(package: PythonCode, tree: Path) -> tuple[str, str]:
    """The source's distribution name and version: from its PKG-INFO (a registry archive), else from its setup.py's
    literals, the version else from `__version__` in the package's `__init__.py`."""
    info = tree / "PKG-INFO"
    if info.is_file():
        fields = email.parser.Parser().parsestr(info.read_text())
        if fields["Name"] and fields["Version"]:
            return fields["Name"], fields["Version"]
    setup = (tree / "setup.py").read_text() if (tree / "setup.py").is_file() else ""
    name = re.search(_LITERAL.format("name"), setup)
    version = re.search(_LITERAL.format("version"), setup)
    declaring = tree / package.module / package.version_file
    declared = re.search(
        r"^__version__\s*=\s*(.+)$", declaring.read_text() if declaring.is_file() else "", re.MULTILINE
    )
    if version is None and declared is None:
        raise SourceError(f"{tree}: no version in its setup.py or {package.module}/{package.version_file}")
    return (
        name.group(1) if name else package.module,
        version.group(1) if version else ast.literal_eval(declared.group(1)),
    )


def python_project(package: PythonCode, tree: Path, into: Path) -> Path:
    """A project of the package's Python code alone (its subpackages too, not its tests), under its own name and
    version (`identity`), in `into`."""
    name, version = identity(package, tree)
    project = into / "project"
    shutil.copytree(tree / package.module, project / package.module,
                    ignore=shutil.ignore_patterns("__pycache__", "*_test.py"))  # fmt: skip
    if (tree / "LICENSE").is_file():
        shutil.copy(tree / "LICENSE", project / "LICENSE")
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
        f'description = "{package.module}\'s Python code without its CUDA extension (installed by maya.installer)"\n\n'
        f'[tool.setuptools.packages.find]\ninclude = ["{package.module}", "{package.module}.*"]\n'
    )
    return project


def install(package: PythonCode, source: str) -> tuple[str, str]:
    """Install the package's Python code from `source` (and its companions) for this interpreter, in place of any
    other release; the installed distribution and version."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory(prefix=f"maya-{package.module}-") as scratch:
        tree = source_tree(package, source, Path(scratch))
        name, _ = identity(package, tree)
        wheels = Path(scratch) / "wheel"  # built first: a failed build leaves the installed release alone
        subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                        str(python_project(package, tree, Path(scratch)))], check=True)  # fmt: skip
        others = [
            d for d in package.distributions if installed_version(d) is not None and canonical(d) != canonical(name)
        ]
        if others:
            subprocess.run([*pip, "uninstall", "--quiet", "--yes", *others], check=True)
        wheel = [str(w) for w in wheels.glob("*.whl")]
        subprocess.run([*pip, "install", "--quiet", "--no-deps", *wheel, *package.companions], check=True)
    return installed(package) or (name, "?")


def canonical(name: str) -> str:
    """A distribution name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def already_installed(package: PythonCode, source: str) -> str | None:
    """The installed release when `source` names it (NAME==VERSION) and its companions are at their pins, else
    None."""
    present = installed(package)
    companions = all(installed_version(c.split("==")[0]) == c.split("==")[1] for c in package.companions)
    if "==" not in source or present is None or not companions:
        return None
    name, version = source.split("==", 1)
    return f"{present[0]} {version}" if (canonical(present[0]), present[1]) == (canonical(name), version) else None


def run(package: PythonCode, source: str) -> None:
    """The installers' command: install `source` unless it is the release installed, saying what was done; a source
    that cannot be installed exits 1 with its error."""
    present = already_installed(package, source)
    if present:
        typer.echo(f"{present} is already installed")
        return
    try:
        distribution, version = install(package, source)
    except (SourceError, subprocess.CalledProcessError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{distribution} {version} installed (its Python code alone; Maya's stand-in runs its extension)")
