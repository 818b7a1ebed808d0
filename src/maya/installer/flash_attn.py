"""flash-attn's Python code without its CUDA build, which emulated ranks run (`emulator/standins/flash_attn_2_cuda.py`).

flash-attn's extension only a CUDA build makes (hours of nvcc; the package registry holds its source alone). Its
Python code installs without it: its setup skips the build under `FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE`, and
`FLASH_ATTENTION_FORCE_BUILD=TRUE` skips its search for a prebuilt wheel (a CUDA build for a GPU machine). An
emulated rank then runs its calls on torch's port of the same kernels. `python -m maya.installer.flash_attn`
installs it for this interpreter (scripts/setup does, for the tests of the stand-in).
"""

from __future__ import annotations

import os
import subprocess
import sys

from maya.installer import installed_version

PINNED = "flash-attn==2.8.3.post2"
"""The release whose extension API the stand-in speaks (`flash_attn_2_cuda.SPEAKS`)."""
BUILD_ENV = {"FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE", "FLASH_ATTENTION_FORCE_BUILD": "TRUE"}
"""flash-attn's own switches: no CUDA build, no prebuilt wheel."""


def install_command() -> str:
    """The command that installs flash-attn's Python code into the environment of `pip`."""
    switches = " ".join(f"{k}={v}" for k, v in BUILD_ENV.items())
    return f"{switches} pip install --no-build-isolation {PINNED}"


def missing_hint(reason: str) -> str | None:
    """How to install flash-attn, when a failed capture's `reason` is a rank's import of it that failed (the script's
    own import, or transformers' check for `attn_implementation="flash_attention_2"`)."""
    if "No module named 'flash_attn'" not in reason and "flash_attn seems to be not installed" not in reason:
        return None
    return (
        "the script needs flash-attn, which is not installed: on a machine without a GPU install its Python code "
        f"without its CUDA build (`{install_command()}`); Maya runs its calls on torch's port of the same kernels"
    )


def installed() -> str | None:
    """The installed flash-attn's version (None: not installed)."""
    return installed_version("flash_attn")


def main() -> None:
    """Install flash-attn's Python code for this interpreter unless the pinned release is installed (pip, no build
    isolation: its setup imports torch)."""
    if installed() == PINNED.split("==")[1]:
        return
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*command, "--no-build-isolation", PINNED], env={**os.environ, **BUILD_ENV}, check=True)


if __name__ == "__main__":
    main()
