"""Cluster specs (`data/clusters/<name>.json`): the links between a node's GPUs and between nodes, as
spec sheets give them (sources in `data/clusters/README.md`). What NCCL reaches on each link is learned
(`maya.estimators.collective_params`), not written here.

A node's GPUs talk over NVLink — through NVSwitch (every pair) or bridges (`groups`: the GPUs a bridge
joins) — else over PCIe through the host (a PCIe switch or the CPU); on a node without peer-to-peer access
(`p2p: false`, e.g. GPUs passed to a virtual machine) every transfer is staged through host memory.
`link_between` and `ring` give the link class of each hop NCCL's ring or a send/recv crosses. A node whose `network` is absent has an
inter-node network its source does not describe. A node that is a machine whose collectives were measured says so
(`measured_as`, checked against the nodes that machine was: `measured_machines`), and its collectives inside a node
are then priced from those measurements, unless a run puts another GPU in it (`ClusterSpec.on_gpu`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from . import hardware as catalog
from .paths import data_dir

NVLINK, NVSWITCH, PCIE, SHM, NETWORK = "nvlink", "nvswitch", "pcie", "shm", "network"
"""Link classes a hop can cross: NVLink between two GPUs (a bridge), NVLink through NVSwitch, PCIe
peer-to-peer through the host, host memory (no peer-to-peer access: NCCL's SHM transport), the network."""
INTRA_LINKS = (NVLINK, NVSWITCH, PCIE, SHM)
FABRICS = ("nvswitch", "bridge")
NETWORK_LINKS = ("infiniband", "roce")
PCIE_GBS_PER_LANE = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
"""PCIe line rate per lane and direction, GB/s (8/16/32 GT/s with 128b/130b coding; Gen6 64 GT/s PAM4 with FLIT)."""


class UnknownCluster(KeyError):
    def __str__(self) -> str:
        return f"unknown cluster {self.args[0]!r}; known: {', '.join(cluster_names())}"


class ClusterSpecError(ValueError):
    """A cluster spec file is malformed."""


@dataclass(frozen=True)
class NVLinkSpec:
    gbs: float
    """Per GPU and direction (the spec sheet's bidirectional figure halved), all of its links together."""
    fabric: str
    """`nvswitch`: every GPU reaches every other at `gbs`; `bridge`: only the GPUs of one of `groups`."""
    groups: tuple[tuple[int, ...], ...] = ()
    nvls: bool = False
    """NVLink SHARP (in-switch reduction, NVSwitch 3 and later)."""


@dataclass(frozen=True)
class NetworkSpec:
    link: str
    nics_per_node: int
    nic_gbs: float
    """Line rate of one NIC per direction, GB/s (Gb/s / 8)."""


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpus_per_node: int
    pcie_gbs: float
    """Line rate of each GPU's PCIe link per direction, GB/s."""
    nvlink: NVLinkSpec | None = None
    network: NetworkSpec | None = None
    """None: the inter-node network is not described (priced as the networks measured with no description)."""
    p2p: bool = True
    """Whether GPUs reach each other's memory (else NCCL stages every transfer through host memory)."""
    hardware: str | None = None
    description: str = ""
    host_factor: float | None = None
    """The nodes' host CPU time for framework code (Python, dispatch) per second of it on the emulating CPU; None:
    not stated (the simulator then assumes 1)."""
    measured_as: str | None = None
    """The measured machine these nodes are (a machine of `data/collectives/measured.json`): collectives inside a
    node that it measured are priced from its measurements; None: from the model alone."""
    unmeasured: str = ""
    """Why a measured machine's measurements do not price these nodes (a run put another GPU in them: `on_gpu`)."""

    def link_between(self, a: int, b: int) -> str:
        """Link class between local GPUs `a` and `b` of one node."""
        nv = self.nvlink
        if not self.p2p:
            return SHM
        if nv is not None and nv.fabric == "nvswitch":
            return NVSWITCH
        if nv is not None and any(a in g and b in g for g in nv.groups):
            return NVLINK
        return PCIE

    def link_gbs(self, link: str) -> float:
        """Spec line rate per direction of an intra-node link class."""
        return self.nvlink.gbs if link in (NVLINK, NVSWITCH) and self.nvlink is not None else self.pcie_gbs

    def ring(self, gpus: Sequence[int]) -> list[str]:
        """Link class of each hop of NCCL's ring through the local GPUs `gpus` of one node: GPUs one bridge
        joins sit next to each other, so the ring crosses PCIe once per group (none when one group holds them
        all). A single GPU has no hops."""
        gpus = sorted(set(gpus))
        if len(gpus) < 2:
            return []
        order = [g for group in self._groups(gpus) for g in group]
        return [self.link_between(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]

    def _groups(self, gpus: list[int]) -> list[list[int]]:
        nv = self.nvlink
        if nv is not None and nv.fabric == "nvswitch":
            return [gpus]
        groups: list[list[int]] = []
        for g in gpus:
            home = next((h for h in groups if self.link_between(h[0], g) in (NVLINK, NVSWITCH)), None)
            home.append(g) if home is not None else groups.append([g])
        return groups

    def summary(self) -> str:
        """The nodes and network in words."""
        nv = self.nvlink
        inside = (
            "no peer-to-peer access (transfers staged through host memory)"
            if not self.p2p
            else f"NVLink {nv.gbs:g} GB/s per direction through NVSwitch"
            if nv and nv.fabric == "nvswitch"
            else f"NVLink {nv.gbs:g} GB/s per direction within bridged GPUs "
            f"({', '.join('-'.join(map(str, g)) for g in nv.groups)}), PCIe {self.pcie_gbs:.1f} GB/s "
            "between them"
            if nv
            else f"PCIe {self.pcie_gbs:.1f} GB/s per direction"
        )
        net = self.network
        across = (
            f"{net.nics_per_node} x {net.link} {net.nic_gbs * 8:g} Gb/s NICs per node"
            if net
            else "an undescribed network"
        )
        measured = f"; collectives inside a node as measured on {self.measured_as}" if self.measured_as else ""
        if self.unmeasured:
            measured = f"; collectives inside a node priced by the model: {self.unmeasured}"
        return f"{self.gpus_per_node} GPUs per node, {inside}; {across}{measured}"

    def on_gpu(self, gpu: catalog.Hardware) -> ClusterSpec:
        """These nodes holding `gpu`: without their measured machine (and saying why) when `gpu` is not its GPU."""
        if self.measured_as is None:
            return self
        machine = measured_machines()[self.measured_as]
        if catalog.same_gpu(catalog.get(machine.hardware), gpu):
            return self
        why = f"{self.measured_as} was measured with {machine.hardware} GPUs, not {gpu.name}"
        return replace(self, measured_as=None, unmeasured=why)

    def without_network(self) -> ClusterSpec:
        """The same nodes on an undescribed network."""
        return replace(self, network=None)


@dataclass(frozen=True)
class MeasuredMachine:
    """The nodes a measured machine's collectives were timed on (`data/collectives/measured.json`'s `reference`):
    a cluster measured as it must have its GPU (where the cluster names one), GPUs per node and NVLink fabric."""

    hardware: str
    gpus_per_node: int
    fabric: str | None
    """NVLink fabric (`FABRICS`); None: no NVLink."""

    @classmethod
    def of(cls, spec: ClusterSpec) -> MeasuredMachine:
        if spec.hardware is None:
            raise ClusterSpecError(
                f"cluster {spec.name!r} names no hardware: it cannot be a measured machine's reference"
            )
        return cls(spec.hardware, spec.gpus_per_node, spec.nvlink.fabric if spec.nvlink else None)

    def to_json(self) -> dict:
        return {"hardware": self.hardware, "gpus_per_node": self.gpus_per_node, "fabric": self.fabric}

    def runs_on(self, name: str) -> bool:
        """Whether the catalog part `name` is this machine's GPU but for its memory (an unknown name is not)."""
        try:
            return name == self.hardware or catalog.same_gpu(catalog.get(name), catalog.get(self.hardware))
        except catalog.UnknownHardware:
            return False

    def mismatch(self, spec: ClusterSpec) -> str | None:
        """What of `spec`'s nodes differs from this machine's, in words; None: nothing."""
        fabric = spec.nvlink.fabric if spec.nvlink else None
        if spec.hardware is not None and not self.runs_on(spec.hardware):
            return f"{spec.hardware} GPUs, where it was measured with {self.hardware}"
        if spec.gpus_per_node != self.gpus_per_node:
            return f"{spec.gpus_per_node} GPUs per node, where it was measured with {self.gpus_per_node}"
        if fabric != self.fabric:
            return f"NVLink fabric {fabric}, where it was measured on {self.fabric}"
        return None


def measured_machines_path() -> Path:
    return data_dir() / "collectives" / "measured.json"


@lru_cache(maxsize=1)
def measured_machines() -> dict[str, MeasuredMachine]:
    """The measured machines by name, each with the nodes it was (read from the measured curves' file)."""
    path = measured_machines_path()
    try:
        machines = json.loads(path.read_bytes())["machines"]
        return {name: MeasuredMachine(**m["reference"]) for name, m in machines.items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ClusterSpecError(
            f"{path}: cannot read the measured machines ({e!r:.80}); rebuild it with "
            "`python -m maya.estimators.collective_fit`"
        ) from None


def clusters_dir() -> Path:
    return data_dir() / "clusters"


def cluster_names() -> list[str]:
    return sorted(p.stem for p in clusters_dir().glob("*.json"))


MAX_GPUS_PER_NODE = 4096
"""More GPUs than any NVLink domain holds: beyond it a spec is a typo."""
MAX_GBS = 1e6
"""GB/s beyond any link (a petabyte per second): beyond it a spec is a typo."""
MAX_HOST_FACTOR = 100.0
"""A host factor above this is a typo (a host a hundred times slower than the emulating CPU)."""


def cluster_file(name_or_path: str | Path) -> Path:
    """The spec file of a shipped cluster's name (`dgx-h100`; unknown: `UnknownCluster`) or of a `.json` path (as
    given, read or not)."""
    path = Path(name_or_path)
    if path.suffix == ".json":
        return path
    path = clusters_dir() / f"{name_or_path}.json"
    if not path.is_file():
        raise UnknownCluster(str(name_or_path))
    return path


def load_cluster(name_or_path: str | Path) -> ClusterSpec:
    """A shipped cluster by name (`dgx-h100`) or a spec file of the same form. Raises `UnknownCluster` for an
    unknown name and `ClusterSpecError` (a ValueError) naming the file and the field for a file that cannot be
    read or does not describe a cluster."""
    path = cluster_file(name_or_path)
    try:
        raw = json.loads(path.read_bytes())
    except OSError as e:
        raise ClusterSpecError(f"{path}: cannot be read ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError
        raise ClusterSpecError(f"{path}: not JSON ({e})") from None
    try:
        return parse_cluster(raw)
    except ClusterSpecError as e:
        raise ClusterSpecError(f"{path}: {e}") from None


def parse_cluster(raw: dict) -> ClusterSpec:
    """A `ClusterSpec` from the JSON form of `data/clusters/README.md`; `ClusterSpecError` names the field that
    is missing or wrong."""
    if not isinstance(raw, dict):
        raise ClusterSpecError(f"a cluster spec is a JSON object, not {type(raw).__name__}")
    if "intra_node" in raw:
        raise ClusterSpecError(
            "the `intra_node`/`inter_node` bus-bandwidth form is gone: describe the links by "
            "their spec sheets (`nvlink`, `pcie`, `network`, see data/clusters/README.md)"
        )
    name = _get(raw, "name", str)
    gpus = _count(raw, "gpus_per_node", MAX_GPUS_PER_NODE)
    pcie = _get(raw, "pcie", dict)
    generation = _get(pcie, "generation", int, "pcie.")
    if generation not in PCIE_GBS_PER_LANE:
        raise ClusterSpecError(f"PCIe generation {generation!r} unknown; known: {sorted(PCIE_GBS_PER_LANE)}")
    lanes = _count(pcie, "lanes", 32, "pcie.", default=16)
    nvlink = _nvlink(_get(raw, "nvlink", dict), gpus) if raw.get("nvlink") else None
    network = None
    if raw.get("network"):
        net = _get(raw, "network", dict)
        link = _get(net, "link", str, "network.")
        if link not in NETWORK_LINKS:
            raise ClusterSpecError(f"network link {link!r}; expected one of {NETWORK_LINKS}")
        network = NetworkSpec(
            link, _count(net, "nics_per_node", 64, "network."), _rate(net, "nic_gbps", "network.") / 8
        )
    hardware = raw.get("hardware")
    if hardware is not None and not isinstance(hardware, str):
        raise ClusterSpecError(f"hardware must be a hardware catalog name, not {hardware!r:.40}")
    measured_as = raw.get("measured_as")
    if measured_as is not None and not (isinstance(measured_as, str) and measured_as):
        raise ClusterSpecError(f"measured_as must be the name of a measured machine, not {measured_as!r:.40}")
    spec = ClusterSpec(
        name=name,
        gpus_per_node=gpus,
        pcie_gbs=PCIE_GBS_PER_LANE[generation] * lanes,
        nvlink=nvlink,
        network=network,
        p2p=_flag(raw, "p2p", True),
        hardware=hardware,
        description=_get(raw, "description", str, default=""),
        host_factor=_factor(raw, "host_factor"),
        measured_as=measured_as,
    )
    if measured_as is not None:
        machines = measured_machines()
        if measured_as not in machines:
            raise ClusterSpecError(
                f"measured_as {measured_as!r} is no measured machine; known: {', '.join(sorted(machines))}"
            )
        wrong = machines[measured_as].mismatch(spec)
        if wrong is not None:
            raise ClusterSpecError(f"cluster {name!r} is measured as {measured_as!r} but has {wrong}")
    return spec


def _nvlink(raw: dict, gpus: int) -> NVLinkSpec:
    fabric = _get(raw, "fabric", str, "nvlink.")
    if fabric not in FABRICS:
        raise ClusterSpecError(f"NVLink fabric {fabric!r}; expected one of {FABRICS}")
    groups = _get(raw, "groups", list, "nvlink.", default=[])
    if not all(isinstance(group, list) and all(_is_int(g) for g in group) for group in groups):
        raise ClusterSpecError("nvlink.groups must be lists of GPU indices")
    groups = tuple(tuple(group) for group in groups)
    if fabric == "bridge":
        members = [g for group in groups for g in group]
        if not groups or len(members) != len(set(members)) or not all(0 <= g < gpus for g in members):
            raise ClusterSpecError(f"bridged NVLink needs `groups`: disjoint lists of GPUs 0..{gpus - 1}")
    return NVLinkSpec(
        gbs=_rate(raw, "bidirectional_gbs", "nvlink.") / 2,
        fabric=fabric,
        groups=groups,
        nvls=_flag(raw, "nvls", False, "nvlink."),
    )


_REQUIRED = object()


def _get(raw: dict, key: str, kind: type, where: str = "", default=_REQUIRED):
    if key not in raw:
        if default is _REQUIRED:
            raise ClusterSpecError(f"{where}{key} is missing")
        return default
    value = raw[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ClusterSpecError(f"{where}{key} must be {_KINDS[kind]}, not {value!r:.40}")
    return value


_KINDS = {str: "a string", int: "an integer", dict: "an object", list: "a list", bool: "true or false"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(raw: dict, key: str, maximum: int, where: str = "", default=_REQUIRED) -> int:
    value = _get(raw, key, int, where, default)
    if not 1 <= value <= maximum:
        raise ClusterSpecError(f"{where}{key} must be between 1 and {maximum}, not {value}")
    return value


def _rate(raw: dict, key: str, where: str = "") -> float:
    value = raw.get(key)
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_GBS):
        raise ClusterSpecError(f"{where}{key} must be a rate above 0 and at most {MAX_GBS:g}, not {value!r:.40}")
    return float(value)


def _factor(raw: dict, key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_HOST_FACTOR):
        raise ClusterSpecError(f"{key} must be a number above 0 and at most {MAX_HOST_FACTOR:g}, not {value!r:.40}")
    return float(value)


def _flag(raw: dict, key: str, default: bool, where: str = "") -> bool:
    return _get(raw, key, bool, where, default)
