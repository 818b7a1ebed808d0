"""A measured machine's collectives priced from its own measurements (`measured_as`), and the model for the rest."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware
from maya.core.clusters import ClusterSpecError, cluster_file, load_cluster
from maya.estimators import CollectiveModel, collectives
from maya.estimators.collective_data import VIDUR_CLUSTERS, load_collectives, shipped_dataset
from maya.estimators.collective_measured import build, bus_factor, shipped_measured
from maya.simulator.durations.estimated import cluster_spec

MiB = 2.0**20
MEASURED_CLUSTERS = sorted({*VIDUR_CLUSTERS.values(), "a100-roce-1600g"})


@pytest.fixture(scope="module")
def dgx_rows() -> pd.DataFrame:
    frame = load_collectives(shipped_dataset())
    return frame[(frame["network"] == "a100_dgx") & (frame["nodes"] == 1)]


def test_the_dgx_prices_its_own_large_all_reduces_as_measured_where_the_model_alone_is_too_slow(dgx_rows):
    rows = dgx_rows[(dgx_rows["collective"] == "allreduce") & (dgx_rows["ranks"] == 8)]
    rows = rows[rows["bytes"] >= 48 * MiB]
    measured = rows["measured_us"].to_numpy()
    priced = CollectiveModel("dgx-a100").time("allreduce", rows["bytes"].to_numpy(), 8).seconds * 1e6
    alone = CollectiveModel("dgx-a100", measured=None).time("allreduce", rows["bytes"].to_numpy(), 8).seconds * 1e6
    assert np.median(np.abs(priced / measured - 1)) < 0.03
    assert np.median(alone / measured - 1) > 0.15  # the shared fit's single NVSwitch share (docs: +23.5% at 64 MiB)


def test_all_gather_and_reduce_scatter_are_half_the_measured_all_reduce_and_sends_add_the_receivers_wait():
    model = CollectiveModel("dgx-a100")
    sizes = np.array([32, 48, 96, 1024]) * MiB  # from the top of the blend; the 8-GPU ones under the 4-GPU ones' floor
    curve = shipped_measured().curve("a100_dgx", "allreduce", 8)
    for name in ("allgather", "reducescatter"):
        assert model.time(name, sizes[:3], 8).seconds * 1e6 == pytest.approx(curve.time_us(sizes[:3]) / 2)
    alone = CollectiveModel("dgx-a100", measured=None)
    sent = shipped_measured().curve("a100_dgx", "sendrecv", 2).time_us(sizes)
    wait = (alone.time("send", sizes, 2).seconds - alone.time("send", sizes, 2, sender=True).seconds) * 1e6
    assert model.time("send", sizes, 2, sender=True).seconds * 1e6 == pytest.approx(sent)
    assert model.time("send", sizes, 2).seconds * 1e6 == pytest.approx(sent + wait)
    assert (wait > 0).all()  # Ampere on NVLink: the receiver reads the sender's last FIFO after it returns


def test_past_the_largest_measured_size_the_curve_runs_at_its_largest_octaves_bus_bandwidth():
    sizes = np.array([64, 128, 256]) * MiB
    seconds = CollectiveModel("dgx-a100").time("allreduce", sizes, 8).seconds
    bus_gbs = bus_factor("allreduce", 8) * np.diff(sizes) / np.diff(seconds) / 1e9
    assert bus_gbs == pytest.approx(shipped_measured().curve("a100_dgx", "allreduce", 8).large_bus_gbs, rel=1e-6)
    assert 180 < bus_gbs[0] < 260  # the measured 16-64 MiB slope, not the fit's 151 GB/s


@pytest.mark.parametrize("cluster", MEASURED_CLUSTERS)
def test_time_stays_continuous_and_rising_in_size_on_every_measured_cluster(cluster):
    model = CollectiveModel(cluster)
    sizes = np.logspace(3, 34, 250, base=2)
    fine = 2 ** np.arange(22, 26, 1 / 64)  # 4-64 MiB, where the curve takes over from the model, in 1.1% steps
    for collective, ranks in [("allreduce", 2), ("allreduce", 4), ("allgather", 4), ("reducescatter", 4), ("send", 2)]:
        assert (np.diff(model.time(collective, sizes, ranks).seconds) > 0).all()
        steps = np.diff(np.log(model.time(collective, fine, ranks).seconds))
        assert steps.max() < 0.03, (collective, ranks)  # no jump (the 16 MiB cut jumped +11% to +15%)


@pytest.mark.parametrize("cluster", MEASURED_CLUSTERS)
def test_time_never_falls_with_more_gpus_of_a_node_on_every_measured_cluster(cluster):
    model = CollectiveModel(cluster)
    sizes = np.logspace(3, 34, 125, base=2)
    for collective in ("allreduce", "allgather", "reducescatter"):
        times = np.array([model.time(collective, sizes, n).seconds for n in range(2, model.cluster.gpus_per_node + 1)])
        assert (np.diff(times, axis=0) >= 0).all(), collective


def test_gpu_counts_not_measured_are_the_model_scaled_between_their_neighbours():
    measured, alone = CollectiveModel("dgx-a100"), CollectiveModel("dgx-a100", measured=None)
    size = 64 * MiB
    us = [measured.time("allreduce", size, n).seconds[0] * 1e6 for n in (4, 6, 8)]
    ratio = [us[i] / (alone.time("allreduce", size, n).seconds[0] * 1e6) for i, n in enumerate((4, 6, 8))]
    assert us[0] < us[1] < us[2]  # the model alone gave 6 GPUs 811 us, more than the measured 8 GPUs' 675
    assert min(ratio[0], ratio[2]) <= ratio[1] <= max(ratio[0], ratio[2])


def test_the_bus_bandwidth_past_the_largest_measured_size_is_capped_at_the_links_line_rate():
    assert shipped_measured().curve("a100_pairwise_nvlink", "sendrecv", 2).large_bus_gbs > 300  # the fitted slope
    sizes = np.array([1024.0, 2048.0]) * MiB
    seconds = CollectiveModel("a100-pcie-nvlink-pairs-4gpu").time("send", sizes, 2, sender=True).seconds
    assert np.diff(sizes) / np.diff(seconds) / 1e9 == pytest.approx(300.0)  # NVLink bridge, per direction


def test_what_the_machine_did_not_measure_is_priced_by_the_model():
    measured, alone = CollectiveModel("dgx-a100"), CollectiveModel("dgx-a100", measured=None)
    big = np.array([64.0, 256.0]) * MiB
    for args, kwargs in [
        (("allreduce", big, 16), {}),  # across nodes: Vidur's network is not the spec's InfiniBand
        (("allreduce", big, 8, 2), {}),  # 4 GPUs on each of 2 nodes (the 4-GPU curve exists)
        (("allreduce", big, 2, 2), {}),  # one GPU on each of 2 nodes (the 2-GPU curve exists)
        (("broadcast", big, 8), {}),  # a collective it did not time
        (("allreduce", big, 8), {"algorithm": "ring"}),  # the model's algorithm asked for by name
    ]:
        assert (measured.time(*args, **kwargs).seconds == alone.time(*args, **kwargs).seconds).all()
    pairs = CollectiveModel("a100-pcie-nvlink-pairs-4gpu")
    pairs_alone = CollectiveModel("a100-pcie-nvlink-pairs-4gpu", measured=None)
    across = {"gpus": [1, 2]}  # PCIe between the bridges: Vidur measured GPUs 0 and 1 (NVLink)
    assert (pairs.time("send", big, 2, **across).seconds == pairs_alone.time("send", big, 2, **across).seconds).all()
    assert (pairs.time("send", big, 2).seconds != pairs_alone.time("send", big, 2).seconds).all()


def test_an_unmeasured_machine_gets_the_model_and_a_cluster_file_says_what_it_was_measured_as(tmp_path):
    big = np.array([64.0, 256.0]) * MiB
    dgx = load_cluster("dgx-a100")
    assert dgx.measured_as == "a100_dgx" and load_cluster("dgx-h100").measured_as is None
    assert dgx.summary().endswith("collectives inside a node as measured on a100_dgx")
    assert "measured" not in load_cluster("dgx-h100").summary()
    unmeasured = CollectiveModel(replace(dgx, measured_as=None)).time("allreduce", big, 8).seconds
    assert (unmeasured == CollectiveModel("dgx-a100", measured=None).time("allreduce", big, 8).seconds).all()
    h100 = CollectiveModel("dgx-h100")
    assert h100.machine is None
    assert (h100.time("allgather", big, 8).seconds == CollectiveModel("dgx-h100", measured=None).time(
        "allgather", big, 8
    ).seconds).all()  # fmt: skip
    raw = json.loads(cluster_file("dgx-a100").read_text())
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**raw, "name": "mine", "measured_as": "a100_dgx"}))
    assert (CollectiveModel(mine).time("allreduce", big, 8).seconds == CollectiveModel("dgx-a100").time(
        "allreduce", big, 8
    ).seconds).all()  # fmt: skip
    mine.write_text(json.dumps({**raw, "name": "mine", "measured_as": "my_lab_node"}))
    with pytest.raises(ClusterSpecError, match="measured_as 'my_lab_node' is no measured machine.*a100_dgx"):
        load_cluster(mine)  # when loaded (`maya clusters mine.json`), not when first priced
    with pytest.raises(ValueError, match="measured must be"):
        CollectiveModel("dgx-a100", measured="a100_dgx")
    mine.write_text(json.dumps({**raw, "name": "mine", "measured_as": 3}))
    with pytest.raises(ClusterSpecError, match="measured_as"):
        load_cluster(mine)


def test_curves_take_the_median_per_quarter_octave_never_falling_and_the_shipped_file_is_rebuilt_alike(dgx_rows):
    sizes = 2.0 ** np.arange(10, 27, 0.125)
    slope_us_per_byte = 1 / 100e3  # 100 GB/s of payload, 175 GB/s of bus bandwidth on 8 GPUs
    noise = np.where(np.arange(len(sizes)) % 2, 1.02, 0.98)
    frame = pd.DataFrame(
        {
            "network": "a100_dgx",
            "collective": "allreduce",
            "ranks": 8,
            "per_node": 8,
            "nodes": 1,
            "bytes": sizes,
            "measured_us": (20 + sizes * slope_us_per_byte) * noise,
            "duplicate_of": None,
        }
    )
    curve = build(frame).curve("a100_dgx", "allreduce", 8)
    assert np.all(np.diff(curve.us) > 0) and len(curve.sizes) == 17 * 4
    assert curve.large_bus_gbs == pytest.approx(bus_factor("allreduce", 8) * 100, rel=0.03)
    assert build(frame.assign(nodes=2)).machines == {}  # multi-node rows are not the spec's network
    assert build(load_collectives(shipped_dataset())).machines == shipped_measured().machines


def test_a_cluster_measured_as_a_machine_must_be_its_nodes_and_a_run_on_another_gpu_takes_the_model(tmp_path):
    raw = json.loads(cluster_file("dgx-a100").read_text())
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**raw, "name": "mine", "hardware": "h100-sxm"}))
    with pytest.raises(ClusterSpecError, match="h100-sxm GPUs, where it was measured with a100-sxm-80gb"):
        load_cluster(mine)
    pairs = json.loads(cluster_file("a100-pcie-nvlink-pairs-4gpu").read_text())
    mine.write_text(json.dumps({**pairs, "name": "mine", "hardware": None, "measured_as": "a100_dgx"}))
    with pytest.raises(ClusterSpecError, match="4 GPUs per node, where it was measured with 8"):
        load_cluster(mine)
    mine.write_text(json.dumps({**raw, "name": "mine", "nvlink": pairs["nvlink"] | {"groups": [[0, 1], [2, 3]]}}))
    with pytest.raises(ClusterSpecError, match="NVLink fabric bridge, where it was measured on nvswitch"):
        load_cluster(mine)
    mine.write_text(json.dumps({**raw, "name": "mine", "hardware": "a100-sxm-40gb"}))
    assert load_cluster(mine).measured_as == "a100_dgx"  # the same GPU but for its memory

    big = np.array([64.0, 256.0]) * MiB
    on_h100 = cluster_spec("dgx-a100", hardware.get("h100-sxm"))
    assert on_h100.measured_as is None
    assert on_h100.summary().endswith(
        "priced by the model: a100_dgx was measured with a100-sxm-80gb GPUs, not h100-sxm"
    )
    assert (CollectiveModel(on_h100).time("allreduce", big, 8).seconds == CollectiveModel(
        "dgx-a100", measured=None
    ).time("allreduce", big, 8).seconds).all()  # fmt: skip
    assert cluster_spec("a100-roce-1600g", hardware.get("a100-sxm-40gb")).measured_as == "a100_dgx"


def test_a_cluster_not_measured_never_reads_the_measured_curves(monkeypatch):
    def unreadable():
        raise AssertionError("read")

    monkeypatch.setattr(collectives, "shipped_measured", unreadable)
    assert CollectiveModel("dgx-h100").time("allreduce", 64 * MiB, 8).seconds[0] > 0
    with pytest.raises(AssertionError, match="read"):
        CollectiveModel("dgx-a100")
