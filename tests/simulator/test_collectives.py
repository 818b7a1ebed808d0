"""The simulator prices every collective and send/recv with the collective model on the links its members
use: a pair joined by NVLink, GPUs across the PCIe hop of a pairwise node, ranks on two nodes."""

import numpy as np
import pytest

from maya.core import hardware
from maya.estimators import CollectiveModel
from maya.simulator import simulate
from maya.simulator.durations.estimated import CollectiveDurations
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder

PAIRS = "a100-pcie-nvlink-pairs-4gpu"
NELEMS = 64 << 20  # bf16: 128 MiB
US = 1_000


def _device_ns(sim, rank: int) -> np.ndarray:
    return next(r.program for r in sim.replicas if r.rank == rank).device


def _coll_seqs(sim, rank: int) -> list[int]:
    program = next(r.program for r in sim.replicas if r.rank == rank)
    return [op.call for launch in program.launches for op in launch]


@pytest.mark.slow
def test_send_recv_priced_on_the_link_between_its_ends(tmp_path):
    b = TraceBuilder(4, hardware="a100-pcie-80gb", nproc_per_node=4)
    b.communicator("pp", [0, 1, 2, 3])
    b.rank(0).collective("send", "pp", US, nelems=NELEMS, peer=1)  # NVLink bridge
    b.rank(1).collective("recv", "pp", US, nelems=NELEMS, peer=0)
    b.rank(1).collective("send", "pp", US, nelems=NELEMS, peer=2)  # across the pairs: PCIe
    b.rank(2).collective("recv", "pp", US, nelems=NELEMS, peer=1)
    b.rank(3).kernel(US)
    sim = simulate(load(b.write(tmp_path / "run")), hardware.get("a100-pcie-80gb"), CollectiveDurations(PAIRS))
    model = CollectiveModel(PAIRS)
    nbytes = 2 * NELEMS
    nvlink = model.time("send", nbytes, ranks=2, gpus=[0, 1]).seconds[0] * 1e9
    pcie = model.time("send", nbytes, ranks=2, gpus=[1, 2]).seconds[0] * 1e9
    first, second = (_device_ns(sim, 1)[seq] for seq in _coll_seqs(sim, 1))
    assert first == pytest.approx(nvlink, rel=1e-6) and second == pytest.approx(pcie, rel=1e-6)
    assert pcie > 3 * nvlink


def test_collectives_priced_on_their_members_gpus_and_nodes(tmp_path):
    b = TraceBuilder(4, hardware="a100-pcie-80gb", nproc_per_node=2)  # two nodes of two GPUs
    b.communicator("tp", [0, 1])
    b.communicator("pp", [0, 1, 2, 3])
    b.rank(0).allreduce("tp", US, nelems=NELEMS)
    b.rank(1).allreduce("tp", US, nelems=NELEMS)
    b.rank(1).collective("send", "pp", US, nelems=NELEMS, peer=2)  # rank 2 is on the other node
    b.rank(2).collective("recv", "pp", US, nelems=NELEMS, peer=1)
    b.rank(3).kernel(US)
    sim = simulate(load(b.write(tmp_path / "run")), hardware.get("a100-pcie-80gb"), CollectiveDurations(PAIRS))
    model = CollectiveModel(PAIRS)
    nbytes = 2 * NELEMS
    allreduce, send = (_device_ns(sim, 1)[seq] for seq in _coll_seqs(sim, 1))
    assert allreduce == pytest.approx(model.time("allreduce", nbytes, ranks=2, gpus=[0, 1]).seconds[0] * 1e9, rel=1e-6)
    assert send == pytest.approx(model.time("send", nbytes, ranks=2, nodes=2).seconds[0] * 1e9, rel=1e-6)


@pytest.mark.slow
def test_layout_columns_are_written_into_copies_of_read_only_columns(tmp_path, monkeypatch):
    """A priced frame whose layout columns share read-only Arrow buffers (as a trace's columns do once its
    `TraceSet` is released) is priced as one of its own: the layouts are written into copies."""
    import pyarrow as pa

    from maya.simulator import pricing

    b = TraceBuilder(4, hardware="a100-pcie-80gb", nproc_per_node=2)
    b.communicator("tp", [0, 1])
    for rank in (0, 1):
        b.rank(rank).allreduce("tp", US, nelems=NELEMS)
    run = b.write(tmp_path / "run")
    gpu, durations = hardware.get("a100-pcie-80gb"), CollectiveDurations(PAIRS)
    expected = _device_ns(simulate(load(run), gpu, durations), 1)
    own = pricing.priced_frame

    def read_only(program, traces, iterations=None):
        frame = own(program, traces, iterations)
        table = pa.table({c: frame[c].to_numpy("float64") for c in ("comm_size", "comm_nodes")})
        shared = table.to_pandas(split_blocks=True)
        assert not shared["comm_size"].to_numpy().flags.writeable
        return frame.assign(**{c: shared[c] for c in shared})

    monkeypatch.setattr(pricing, "priced_frame", read_only)
    assert np.array_equal(_device_ns(simulate(load(run), gpu, durations), 1), expected)
