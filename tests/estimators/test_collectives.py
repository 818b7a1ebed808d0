"""Collective model: the alpha-beta formulas, link classes, algorithm choice and cluster specs."""
import json

import numpy as np
import pandas as pd
import pytest

from maya.estimators import CollectiveModel, load_cluster
from maya.core.clusters import UnknownCluster, cluster_names
from maya.estimators.collectives import BASE_LATENCY_US, HOP_LATENCY_US

GiB = 2.0**30


def test_ring_allreduce_follows_the_bus_bandwidth_formula():
    model = CollectiveModel("dgx-h100")
    n, size = 8, 4 * GiB
    result = model.time("allreduce", size, ranks=n, algorithm="ring")
    bandwidth_s = 2 * (n - 1) / n * size / (370e9)
    step = ("ring", "simple")
    latency_s = (BASE_LATENCY_US[step] + 2 * (n - 1) * HOP_LATENCY_US["nvlink"][step]) * 1e-6
    assert result.seconds[0] == pytest.approx(bandwidth_s + latency_s)
    assert result.protocol[0] == "simple"


def test_nvlink_faster_than_the_network_and_nvls_chosen_for_large_messages():
    model = CollectiveModel("dgx-h100")
    intra = model.time("allreduce", GiB, ranks=8).seconds[0]
    across = model.time("allreduce", GiB, ranks=8, nodes=8).seconds[0]  # one GPU per node: every hop on IB
    assert intra < across
    assert model.time("allreduce", GiB, ranks=8).algorithm[0] == "nvls"
    assert model.time("allreduce", 1024, ranks=8).protocol[0] == "LL"  # latency bound
    p2p_local = model.time("send", 256 * 2**20, ranks=2, nodes=1).seconds[0]
    p2p_remote = model.time("send", 256 * 2**20, ranks=2, nodes=2).seconds[0]
    assert p2p_local < p2p_remote
    pcie = CollectiveModel("pcie-gen5-8gpu").time("allreduce", GiB, ranks=8).seconds[0]
    assert pcie > model.time("allreduce", GiB, ranks=8, algorithm="ring").seconds[0]


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"])
@pytest.mark.parametrize("ranks,nodes", [(8, 1), (64, 8)])
def test_monotone_in_size(collective, ranks, nodes):
    sizes = np.logspace(3, 33, 31, base=2)
    times = CollectiveModel("dgx-a100").time(collective, sizes, ranks=ranks, nodes=nodes).seconds
    assert (np.diff(times) > 0).all()


def test_tree_wins_small_multi_node_allreduce_and_single_rank_is_free():
    model = CollectiveModel("dgx-h100")
    assert model.time("allreduce", 64 * 1024, ranks=256).algorithm[0] == "tree"
    assert model.time("allreduce", 16 * GiB, ranks=256).algorithm[0] == "ring"
    assert model.time("all_reduce", GiB, ranks=1).seconds[0] == 0.0
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        model.time("gather", GiB, ranks=8)


def test_predict_frame():
    frame = pd.DataFrame({"collective": ["allreduce", "allgather", "allreduce"], "bytes": [GiB, GiB, 2 * GiB],
                          "ranks": [8, 16, 8]})
    out = CollectiveModel("dgx-b200").predict(frame)
    assert (out["duration_ns"] > 0).all()
    assert out.loc[2, "duration_ns"] > out.loc[0, "duration_ns"]
    assert list(out["algorithm"]) == ["nvls", "ring", "nvls"]


def test_cluster_specs(tmp_path):
    assert {"dgx-h100", "dgx-a100", "dgx-b200", "hgx-h200", "pcie-gen5-8gpu"} <= set(cluster_names())
    h100 = load_cluster("dgx-h100")
    assert h100.gpus_per_node == 8 and h100.network_busbw_gbs == min(370.0, 8 * 48.0)
    with pytest.raises(UnknownCluster, match="unknown cluster 'dgx-z'"):
        load_cluster("dgx-z")
    custom = tmp_path / "mine.json"
    custom.write_text(json.dumps({"name": "mine", "gpus_per_node": 4,
                                  "intra_node": {"link": "nvlink", "busbw_gbs": 100},
                                  "inter_node": {"link": "roce", "nics_per_node": 2, "nic_busbw_gbs": 12}}))
    assert CollectiveModel(load_cluster(custom)).cluster.network_busbw_gbs == 24
