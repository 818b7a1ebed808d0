"""`nvidia-smi topo -m` for the virtual GPUs: the matrix LitGPT's `check_nvlink_connectivity` reads before a
multi-GPU run (it parses the `GPU0` header row and wants `NV#` between every pair)."""

import re
from pathlib import Path

import pytest

from maya.core import hardware
from maya.emulator.launcher import _config, nvlink_bridged, nvlinks
from maya.emulator.nvidia_smi import main as nvidia_smi
from maya.emulator.nvidia_smi import topology


def litgpt_reads(lines: list[str]) -> tuple[int, bool]:
    """(GPUs, all pairs on NVLink) as LitGPT 0.5's `_check_nvidia_connectivity` parses `nvidia-smi topo -m`."""
    start = next(i for i, line in enumerate(lines) if "GPU0" in line)
    count = len([h for h in lines[start].split() if re.match(r"^GPU\d+$", h)])
    rows = lines[start + 1 : start + 1 + count]
    return count, all("NV" in c for row in rows for c in row.split()[1 : 1 + count] if c != "X")


@pytest.mark.parametrize(
    "name, links, bridged",
    [
        ("h100-sxm", 18, False),
        ("a100-sxm-80gb", 12, False),
        ("b200", 18, False),
        ("v100-sxm-32gb", 6, False),
        ("l4", 0, False),
        ("a100-pcie-40gb", 12, True),
        ("h100-pcie", 12, True),
        ("h100-nvl", 12, True),
        ("a40", 4, True),
    ],
)
def test_nvlinks_per_gpu_follow_the_catalog(name, links, bridged):
    """NVLink 2-4 carry 50 GB/s a link both ways, NVLink 5 100 GB/s, a graphics die's half-width link 28.125 GB/s:
    the catalog's bandwidth gives the count; PCIe cards (and graphics dies) bridge GPUs in pairs, SXM parts join
    every pair through NVSwitches."""
    hw = hardware.get(name)
    assert nvlinks(hw) == links and nvlink_bridged(hw) == bridged
    assert f"nvlinks={links}\nnvlink_bridged={int(bridged)}\n" in _config(hw, Path("/tmp/x"), 0, 8)


def test_bridged_gpus_are_nvlinked_in_pairs_only():
    """On PCIe cards GPU 2i and 2i+1 share a bridge; other pairs go through PCIe (LitGPT then warns, as it would)."""
    lines = topology(4, 12, bridged=True)
    assert [line.split()[1:5] for line in lines[1:5]] == [
        ["X", "NV12", "NODE", "NODE"],
        ["NV12", "X", "NODE", "NODE"],
        ["NODE", "NODE", "X", "NV12"],
        ["NODE", "NODE", "NV12", "X"],
    ]
    assert litgpt_reads(lines) == (4, False) and litgpt_reads(topology(2, 12, bridged=True)) == (2, True)


def test_topology_joins_every_pair_by_the_gpus_nvlinks():
    lines = topology(4, 18)
    assert litgpt_reads(lines) == (4, True)
    assert lines[1].split()[:5] == ["GPU0", "X", "NV18", "NV18", "NV18"]
    assert litgpt_reads(topology(2, 0)) == (2, False)  # PCIe only: NODE, and LitGPT warns as on such a machine


@pytest.mark.parametrize("bridged", [0, 1])
def test_topo_reads_the_links_from_the_rank_config(tmp_path, monkeypatch, capsys, bridged):
    config = tmp_path / "config"
    config.write_text(f"devices=8\nnvlinks=12\nnvlink_bridged={bridged}\n")
    monkeypatch.setenv("MAYA_EMU_CONFIG", str(config))

    class Lib:  # the NVML stub's calls topo makes
        def __getattr__(self, name):
            def call(*args):
                if name == "nvmlDeviceGetCount_v2":
                    args[0]._obj.value = 8
                return 0

            return call

    assert nvidia_smi(["topo", "-m"], lib=Lib()) == 0
    assert litgpt_reads(capsys.readouterr().out.splitlines()) == (8, not bridged)


def test_other_topo_queries_are_refused_by_name(capsys):
    assert nvidia_smi(["topo", "-p2p", "r"]) == 2
    assert "option 'topo -p2p' is not emulated" in capsys.readouterr().err
