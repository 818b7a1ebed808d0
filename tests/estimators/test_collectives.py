"""Collective model: cluster topologies, the algorithm and protocol choice, the fit to measured NCCL times
and the Vidur collectives reader."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from maya.core.clusters import ClusterSpecError, UnknownCluster, cluster_names
from maya.estimators import CollectiveModel, load_cluster
from maya.estimators.collective_data import CollectiveDataError, load_collectives
from maya.estimators.collective_fit import fit, predict
from maya.estimators.collective_params import CollectiveParams, shipped_params

GiB = 2.0**30
PAIRS = "a100-pcie-nvlink-pairs-4gpu"


def test_pairwise_topology_rings_cross_pcie_between_pairs():
    node = load_cluster(PAIRS)
    assert node.link_between(0, 1) == node.link_between(2, 3) == "nvlink"
    assert node.link_between(1, 2) == node.link_between(0, 3) == "pcie"
    assert node.ring([0, 1]) == ["nvlink", "nvlink"]
    assert sorted(node.ring([0, 1, 2, 3])) == ["nvlink", "nvlink", "pcie", "pcie"]
    assert node.ring([0, 2]) == ["pcie", "pcie"]
    assert node.ring([3]) == []
    dgx = load_cluster("dgx-a100")
    assert set(dgx.ring(range(8))) == {"nvswitch"} and dgx.link_between(0, 7) == "nvswitch"
    assert set(load_cluster("a40-nvlink-pairs-8gpu").ring([0, 1])) == {"shm"}  # no peer-to-peer access


def test_pairwise_node_prices_the_pcie_hop():
    model = CollectiveModel(PAIRS)
    pair = model.time("allreduce", GiB, ranks=2).seconds[0]
    across_pairs = model.time("allreduce", GiB, ranks=2, gpus=[0, 2]).seconds[0]
    four = model.time("allreduce", GiB, ranks=4).seconds[0]
    assert across_pairs > 3 * pair  # NVLink bridge against PCIe Gen4
    assert four > across_pairs  # the 4-GPU ring is as slow as PCIe, with more data per GPU
    assert model.time("send", GiB, ranks=2, gpus=[1, 2]).seconds[0] > 3 * model.time("send", GiB, ranks=2).seconds[0]
    pcie_only = CollectiveModel(replace(load_cluster(PAIRS), nvlink=None))
    assert pcie_only.time("allreduce", GiB, ranks=4).seconds[0] == pytest.approx(four, rel=1e-3)  # PCIe sets it


def test_large_messages_run_at_the_learned_share_of_the_spec_line_rate():
    params = shipped_params()
    model = CollectiveModel("dgx-h100")
    n, size = 8, 64 * GiB
    ring = model.time("allreduce", size, ranks=n, algorithm="ring").seconds[0]
    bus_gbs = 2 * (n - 1) / n * size / ring / 1e9
    assert bus_gbs == pytest.approx(450 * params.links["nvswitch"].efficiency, rel=0.01)
    nvls = model.time("allreduce", size, ranks=n)
    assert nvls.algorithm[0] == "nvls" and nvls.seconds[0] < ring
    a100 = CollectiveModel("dgx-a100", measured=None)
    assert a100.time("allreduce", size, ranks=8).algorithm[0] == "ring"  # no NVLS on A100


@pytest.mark.parametrize("cluster", ["dgx-a100", "dgx-h100", PAIRS, "a40-nvlink-pairs-8gpu", "pcie-gen5-8gpu"])
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"])
@pytest.mark.parametrize("ranks,nodes", [(2, 1), (4, 1), (32, 8)])
def test_monotone_in_size(cluster, collective, ranks, nodes):
    if collective == "sendrecv" and ranks > 2:
        ranks, nodes = 2, 2
    sizes = np.logspace(3, 34, 63, base=2)
    times = CollectiveModel(cluster).time(collective, sizes, ranks=ranks, nodes=nodes).seconds
    assert (np.diff(times) > 0).all()


def test_small_messages_take_a_low_latency_protocol_and_trees_win_across_many_nodes():
    a100 = CollectiveModel("dgx-a100", measured=None)
    assert a100.time("allreduce", 1024, ranks=8).protocol[0] in ("LL", "LL128")
    assert a100.time("allreduce", 64 * GiB, ranks=8).protocol[0] == "simple"
    model = CollectiveModel("dgx-h100")
    assert model.time("allreduce", 64 * 1024, ranks=256).algorithm[0] == "tree"
    assert model.time("all_reduce", GiB, ranks=1).seconds[0] == 0.0
    local = model.time("send", 256 * 2**20, ranks=2, nodes=1).seconds[0]
    remote = model.time("send", 256 * 2**20, ranks=2, nodes=2).seconds[0]
    assert local < remote


def test_bad_requests_name_the_problem():
    model = CollectiveModel(PAIRS)
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        model.time("gather", GiB, ranks=4)
    with pytest.raises(ValueError, match="put 8 on a node of 4 GPUs"):
        model.time("allreduce", GiB, ranks=8, nodes=1)
    with pytest.raises(ValueError, match="not distinct GPUs"):
        model.time("allreduce", GiB, ranks=2, gpus=[0, 5])
    with pytest.raises(ValueError, match="no measured network 'x'"):
        CollectiveModel(PAIRS, network="x")


def test_predict_frame_with_local_gpus():
    frame = pd.DataFrame(
        {
            "collective": ["allreduce", "allreduce", "sendrecv", "allgather"],
            "bytes": [GiB, GiB, GiB, GiB],
            "ranks": [2, 2, 2, 4],
            "gpus": [(0, 1), (1, 2), None, ()],
        }
    )
    out = CollectiveModel(PAIRS, measured=None).predict(frame)
    assert (out["duration_ns"] > 0).all()
    assert out.loc[1, "duration_ns"] > 3 * out.loc[0, "duration_ns"]
    assert list(out["algorithm"]) == ["ring", "ring", "p2p", "ring"]


def test_cluster_specs(tmp_path):
    assert {
        "dgx-h100",
        "dgx-a100",
        "dgx-b200",
        "hgx-h200",
        "pcie-gen5-8gpu",
        PAIRS,
        "h100-nvl-nvlink-pairs-4gpu",
        "a40-nvlink-pairs-8gpu",
    } <= set(cluster_names())
    h100 = load_cluster("dgx-h100")
    assert h100.gpus_per_node == 8 and h100.nvlink.gbs == 450 and h100.network.nic_gbs == 50
    assert load_cluster(PAIRS).pcie_gbs == pytest.approx(31.5, abs=0.1)
    with pytest.raises(UnknownCluster, match="unknown cluster 'dgx-z'"):
        load_cluster("dgx-z")
    custom = tmp_path / "mine.json"
    custom.write_text(
        json.dumps(
            {
                "name": "mine",
                "gpus_per_node": 2,
                "pcie": {"generation": 5},
                "nvlink": {"fabric": "bridge", "bidirectional_gbs": 100, "groups": [[0, 1]]},
                "network": {"link": "roce", "nics_per_node": 2, "nic_gbps": 200},
            }
        )
    )
    mine = load_cluster(custom)
    assert mine.network.nic_gbs == 25 and mine.ring([0, 1]) == ["nvlink", "nvlink"]
    assert CollectiveModel(mine).time("allreduce", GiB, ranks=4, nodes=2).seconds[0] > 0
    old = tmp_path / "old.json"
    old.write_text(
        json.dumps(
            {
                "name": "old",
                "gpus_per_node": 4,
                "intra_node": {"link": "nvlink", "busbw_gbs": 1},
                "inter_node": {"link": "roce", "nics_per_node": 1, "nic_busbw_gbs": 1},
            }
        )
    )
    with pytest.raises(ClusterSpecError, match="describe the links by their spec sheets"):
        load_cluster(old)
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "name": "bad",
                "gpus_per_node": 4,
                "pcie": {"generation": 4},
                "nvlink": {"fabric": "bridge", "bidirectional_gbs": 100, "groups": [[0, 4]]},
            }
        )
    )
    with pytest.raises(ClusterSpecError, match="disjoint lists of GPUs 0..3"):
        load_cluster(bad)


# The fit, on measurements made from known parameters: it must find them again, and do so every time.


def _measured(params: CollectiveParams, rng: np.random.Generator, tmp_path) -> pd.DataFrame:
    curves = [
        ("a100_dgx", "all_reduce", 8, 8),
        ("a100_dgx", "all_reduce", 4, 4),
        ("a100_dgx", "all_reduce", 2, 1),
        ("a100_dgx", "all_reduce", 16, 8),
        ("a100_dgx", "send_recv", 2, 2),
        ("a100_pairwise_nvlink", "all_reduce", 2, 2),
        ("a100_pairwise_nvlink", "all_reduce", 4, 4),
        ("a100_pairwise_nvlink", "send_recv", 2, 1),
        ("h100_pairwise_nvlink", "all_reduce", 4, 4),
        ("a40_pairwise_nvlink", "send_recv", 2, 2),
    ]
    sizes = np.unique(np.geomspace(2048, 2**29, 40).astype(int))
    rows = []
    for network, collective, ranks, per_node in curves:
        rows.append(
            pd.DataFrame(
                {
                    "network": network,
                    "collective": collective,
                    "num_workers": ranks,
                    "devices_per_node": per_node,
                    "size_bytes": sizes,
                    "time_ms_median": 1.0,
                }
            )
        )
    raw, path = pd.concat(rows, ignore_index=True), tmp_path / "measured.parquet"
    raw.to_parquet(path)
    shape = load_collectives(path)  # rows in the reader's order, to price them
    key = ["network", "collective", "ranks", "per_node", "bytes"]
    priced = shape.assign(us=predict(shape, params)).set_index(key)["us"]
    keys = zip(
        raw["network"],
        raw["collective"].str.replace("_", ""),
        raw["num_workers"],
        raw["devices_per_node"].clip(upper=raw["num_workers"]),
        raw["size_bytes"].astype(float),
    )
    raw["time_ms_median"] = priced.loc[list(keys)].to_numpy() / 1e3
    raw["time_ms_median"] *= rng.lognormal(0.0, 0.02, len(raw))
    raw.to_parquet(path)
    return load_collectives(path)


@pytest.mark.slow
def test_fit_recovers_known_parameters_and_is_reproducible(tmp_path):
    truth = shipped_params()
    frame = _measured(truth, np.random.default_rng(0), tmp_path)
    first, second = fit(frame), fit(frame)
    assert first.params == second.params
    assert first.params.base_us == {"LL": 6.6, "LL128": 14.0, "simple": 8.4}  # NCCL's tuning model, not fitted
    assert {k: v.hop_us for k, v in first.params.links.items()} == {
        "nvlink": 3.4,
        "nvswitch": 3.4,
        "pcie": 5.7,
        "shm": 5.7,
    }
    error = np.abs(predict(frame, first.params) / frame["measured_us"] - 1)
    assert error.mean() < 0.03
    for cluster, ranks, gpus in [
        ("dgx-a100", 8, None),
        (PAIRS, 2, None),
        (PAIRS, 2, [0, 2]),
        ("a40-nvlink-pairs-8gpu", 2, None),
    ]:  # NVSwitch, bridge, PCIe, host memory
        fitted, true = (
            CollectiveModel(cluster, p).time("allreduce", 16 * GiB, ranks, gpus=gpus).seconds[0]
            for p in (first.params, truth)
        )
        assert fitted == pytest.approx(true, rel=0.03)


@pytest.mark.slow
def test_held_out_network_is_priced_on_the_default_network(tmp_path):
    frame = _measured(shipped_params(), np.random.default_rng(1), tmp_path)
    params = fit(frame, exclude=["a100_pairwise_nvlink"]).params
    assert "a100_pairwise_nvlink" not in params.networks
    held = frame[frame["network"] == "a100_pairwise_nvlink"]
    assert np.isfinite(predict(held, params)).all()


def test_reader_checks_columns_sizes_and_copies(tmp_path):
    raw = pd.DataFrame(
        {
            "network": ["a100_dgx"] * 2 + ["h100_pairwise_nvlink"] * 2,
            "collective": "send_recv",
            "num_workers": 2,
            "devices_per_node": 2,
            "size_elements": [2048, 4096] * 2,
            "time_ms_median": [0.01, 0.02] * 2,
        }
    )
    path = tmp_path / "c.parquet"
    raw.to_parquet(path)
    frame = load_collectives(path)
    assert list(frame["bytes"]) == [2048, 4096] * 2  # Vidur's `size` holds bytes
    assert frame["duplicate_of"].isna().tolist() == [True, True, False, False]
    assert set(frame["duplicate_of"].dropna()) == {"a100_dgx"}
    raw.drop(columns="time_ms_median").to_parquet(path)
    with pytest.raises(CollectiveDataError, match="missing time_ms_median"):
        load_collectives(path)
    raw.assign(network="tpu_pod").to_parquet(path)
    with pytest.raises(CollectiveDataError, match="tpu_pod have no cluster spec"):
        load_collectives(path)
    raw.assign(time_ms_median=-1.0).to_parquet(path)
    with pytest.raises(CollectiveDataError, match="non-positive time"):
        load_collectives(path)


def test_shipped_parameters_name_their_data():
    params = shipped_params()
    assert params.provenance["rows"] > 10_000 and len(params.digest) == 64
    assert set(params.networks) == {"a100_dgx", "a100_pairwise_nvlink", "a40_pairwise_nvlink"}


def test_shipped_parameters_were_fitted_on_the_shipped_measurements():
    import hashlib

    from maya.estimators.collective_data import shipped_dataset

    if not shipped_dataset().is_file():
        pytest.skip("data/vidur/collectives.parquet is not shipped in this checkout")
    digest = hashlib.sha256(shipped_dataset().read_bytes()).hexdigest()
    assert shipped_params().provenance["sha256"] == digest, (
        "data/collectives/nccl.json was fitted on other measurements: rerun python -m maya.estimators.collective_fit"
    )


def test_a_send_timed_on_the_sender_ends_one_fifo_early_where_nccls_p2p_transport_reads():
    from maya.estimators.collectives import P2P_READ_FIFO_BYTES

    sizes = np.array([64.0, 128.0]) * 2**20
    a100 = CollectiveModel(
        PAIRS, measured=None
    )  # A100 (sm_80) pairs on NVLink: the receiver reads from the sender's FIFO
    transfer = a100.time("send", sizes, ranks=2)
    sender = a100.time("send", sizes, ranks=2, sender=True)
    assert list(transfer.protocol) == list(sender.protocol) == ["simple", "simple"]
    seconds_per_byte = (transfer.seconds[1] - transfer.seconds[0]) / (sizes[1] - sizes[0])
    early = transfer.seconds - sender.seconds
    assert early == pytest.approx([P2P_READ_FIFO_BYTES * seconds_per_byte] * 2, rel=1e-6)  # one FIFO's worth
    assert a100.time("send", 2**20, ranks=2, sender=True).seconds[0] > 0  # below a FIFO: the latency remains
    assert (
        a100.time("allreduce", sizes, ranks=2, sender=True).seconds == a100.time("allreduce", sizes, ranks=2).seconds
    ).all()
    for model, kwargs in [
        (a100, {"gpus": [1, 2]}),  # PCIe between the pairs: written, not read
        (a100, {"nodes": 2}),  # across nodes
        (CollectiveModel("h100-nvl-nvlink-pairs-4gpu", measured=None), {}),  # Hopper: NCCL writes by default
        (CollectiveModel("a40-nvlink-pairs-8gpu", measured=None), {}),
    ]:  # host memory
        assert (
            model.time("send", sizes, ranks=2, sender=True, **kwargs).seconds
            == model.time("send", sizes, ranks=2, **kwargs).seconds
        ).all()


def test_nvls_pays_nccls_nvls_latency_and_loses_small_messages_to_the_ring():
    params = shipped_params()
    model = CollectiveModel("dgx-h100")
    tiny = model.time("allreduce", 1024.0, ranks=8, algorithm="nvls").seconds[0]
    assert tiny * 1e6 == pytest.approx(params.nvls_us, rel=1e-3) and params.nvls_us == 25.0  # tuning.cc hwLat
    small = model.time("allreduce", np.array([1024.0, 65536.0]), ranks=8)
    assert set(small.algorithm) == {"ring"} and (small.seconds < tiny).all()
    assert model.time("allreduce", 64 * GiB, ranks=8).algorithm[0] == "nvls"


def test_point_to_point_takes_ll_only_up_to_nccls_threshold_and_never_ll128():
    from maya.estimators.collectives import P2P_LL_THRESHOLD

    sizes = np.logspace(3, 30, 55, base=2)
    for cluster in ("dgx-h100", "dgx-a100", PAIRS):
        chosen = CollectiveModel(cluster, measured=None).time("send", sizes, ranks=2)
        assert "LL128" not in set(chosen.protocol)
        assert set(chosen.protocol[sizes > P2P_LL_THRESHOLD]) == {"simple"}


def test_a_ring_across_a_described_network_pays_nccls_network_steps():
    """tuning.cc: a ring over `nodes` nodes crosses the network `nodes - 1` times (twice that for an
    all-reduce) at NCCL's network step latency; its other steps cost at least NCCL's per-step network
    overhead (1 us, three times for Simple). An undescribed network keeps its learned step latency."""
    from maya.estimators.collectives import NCCL_NET_HOP_US

    params = shipped_params()
    model = CollectiveModel("dgx-h100")  # 8 x 400 Gb/s InfiniBand: a described network
    tiny = 8.0
    for name, ranks, nodes, steps, inter in [("allgather", 512, 64, 511, 63), ("allreduce", 16, 2, 30, 2)]:
        ring = model.time(name, tiny, ranks=ranks, nodes=nodes, algorithm="ring")
        protocol = ring.protocol[0]
        nvswitch = params.links["nvswitch"].hop_us * (1.0 if protocol == "simple" else params.hop_ratio[protocol])
        intra = max(nvswitch, 3.0 if protocol == "simple" else 1.0)
        expected = params.base_us[protocol] + (steps - inter) * intra + inter * NCCL_NET_HOP_US["ring"][protocol]
        assert ring.seconds[0] * 1e6 == pytest.approx(expected, rel=1e-3)
    # the 512-rank all-gather's latency: 63 network steps at NCCL's figure, not the undescribed networks' mean
    undescribed = CollectiveModel(load_cluster("dgx-h100").without_network())
    described_us = model.time("allgather", tiny, ranks=512, algorithm="ring").seconds[0] * 1e6
    learned_us = undescribed.time("allgather", tiny, ranks=512, algorithm="ring").seconds[0] * 1e6
    assert described_us != pytest.approx(learned_us, rel=1e-3)
    tree = model.time("allreduce", tiny, ranks=16, algorithm="tree")
    p = tree.protocol[0]
    hop = params.links["nvswitch"].hop_us * (1.0 if p == "simple" else params.hop_ratio[p])
    assert tree.seconds[0] * 1e6 == pytest.approx(
        params.base_us[p] + 2 * (7 * hop + 1 * NCCL_NET_HOP_US["tree"][p]), rel=1e-3
    )
