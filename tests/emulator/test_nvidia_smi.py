"""`nvidia-smi topo -m` for the virtual GPUs: the matrix LitGPT's `check_nvlink_connectivity` reads before a
multi-GPU run (it parses the `GPU0` header row and wants `NV#` between every pair)."""

import re
from pathlib import Path

import pytest

from maya.core import hardware
from maya.emulator.launcher import _config, nvlinks
from maya.emulator.nvidia_smi import main as nvidia_smi
from maya.emulator.nvidia_smi import topology


def litgpt_reads(lines: list[str]) -> tuple[int, bool]:
    """(GPUs, all pairs on NVLink) as LitGPT 0.5's `_check_nvidia_connectivity` parses `nvidia-smi topo -m`."""
    start = next(i for i, line in enumerate(lines) if "GPU0" in line)
    count = len([h for h in lines[start].split() if re.match(r"^GPU\d+$", h)])
    rows = lines[start + 1 : start + 1 + count]
    return count, all("NV" in c for row in rows for c in row.split()[1 : 1 + count] if c != "X")


@pytest.mark.parametrize("name, links", [("h100-sxm", 18), ("a100-sxm-80gb", 12), ("b200", 18), ("l4", 0)])
def test_nvlinks_per_gpu_follow_the_catalog(name, links):
    """NVLink 2-4 carry 50 GB/s a link both ways, NVLink 5 100 GB/s: the catalog's bandwidth gives the count."""
    hw = hardware.get(name)
    assert nvlinks(hw) == links
    assert f"nvlinks={links}\n" in _config(hw, Path("/tmp/x"), 0, 8)


def test_topology_joins_every_pair_by_the_gpus_nvlinks():
    lines = topology(4, 18)
    assert litgpt_reads(lines) == (4, True)
    assert lines[1].split()[:5] == ["GPU0", "X", "NV18", "NV18", "NV18"]
    assert litgpt_reads(topology(2, 0)) == (2, False)  # PCIe only: NODE, and LitGPT warns as on such a machine


def test_topo_reads_the_links_from_the_rank_config(tmp_path, monkeypatch, capsys):
    config = tmp_path / "config"
    config.write_text("devices=8\nnvlinks=12\n")
    monkeypatch.setenv("MAYA_EMU_CONFIG", str(config))

    class Lib:  # the NVML stub's calls topo makes
        def __getattr__(self, name):
            def call(*args):
                if name == "nvmlDeviceGetCount_v2":
                    args[0]._obj.value = 8
                return 0

            return call

    assert nvidia_smi(["topo", "-m"], lib=Lib()) == 0
    assert litgpt_reads(capsys.readouterr().out.splitlines()) == (8, True)


def test_other_topo_queries_are_refused_by_name(capsys):
    assert nvidia_smi(["topo", "-p2p", "r"]) == 2
    assert "option 'topo -p2p' is not emulated" in capsys.readouterr().err
