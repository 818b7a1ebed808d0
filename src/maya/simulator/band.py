"""A 10–90% band for the predicted iteration time, from the estimators' own held-out residuals.

Where the errors come from (never from end-to-end measurements):

- kernels: each call's band from the kernel estimator (`duration_low_ns`, `duration_high_ns`: the 10th and
  90th percentiles of measured / predicted held out as the call's situation is new: whole workloads held out
  on a GPU measured, whole GPUs on a GPU never measured of an architecture trained on, whole architectures for
  `model_transfer`; measured repeats for exact lookups; `maya.estimators.training`). A composed call (fused
  attention) carries the band of the models it is composed from, and its errors are drawn with that family's
  (its products are GEMMs: one draw moves the GEMMs and the attention's products alike);
- collectives: the 10th, 50th and 90th percentiles of measured / predicted NCCL times on networks the
  collective fit never saw, per scope (intra-, inter-node) and message size
  (`maya.estimators.collective_residuals`);
- host overhead: its per-API costs are engineering defaults with no measurement to hold out, so host time
  is not varied (the band says which share of the iteration is outside it);
- kernels priced from a proxy (llm-foundry's Triton attention as FlashAttention v1): the a-priori uncertainty
  the data's README states, over the share of the iteration they take;
- model discrepancy: what the residuals cannot see (a missing mechanism moves a whole prediction), widths
  calibrated by split conformal on measured suites and judged on suites left out (`maya.simulator.discrepancy`),
  added in quadrature at the end to the larger of the (scaled) replays' band and the a-priori widths. The
  prediction is unchanged; the band says what it is calibrated on (`meaning`).

Errors within a kernel family, or within a collective scope, are taken as fully correlated (one error
draw moves every call of the family: its shapes share kernels and the model's bias) and independent
across families and scopes. A draw is a standard normal `z` per group; each call's log factor follows its
own quantiles through `z` (10th percentile at z = -1.28, median at 0 (the prediction itself for kernels),
90th at +1.28, linear beyond).

Propagation: the iteration time is approximated as its idle and host-bound parts plus each group's
share of the critical rank's compute time (by device time in the steady iterations) and exposed
communication, each scaled by its group's factor; Monte Carlo draws of that sum (Latin hypercube) give its
10th and 90th percentiles. Along the gradient of the sum, the draws reaching those percentiles (its most likely ones)
are then re-priced and replayed by the simulator, so overlap that a slower collective stops hiding
counts: the band is the two replays' iteration times.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .discrepancy import NONE, Discrepancy, apriori_widths, shipped_discrepancy
from .distinct import per_distinct
from .engine import Engine
from .opcodes import COLL, DEVICE_OPS
from .report import rank_reports
from .trace import capture_statuses

if TYPE_CHECKING:
    from .report import Prediction
    from .simulation import Simulation

Z90 = 1.2815515655446004
"""The standard normal's 90th percentile."""
SAMPLES = 4000
SEED = 0
UNMODELLED = np.array([0.0, 0.0, 0.0])


@dataclass
class IterationBand:
    low_ns: float
    high_ns: float
    """The 10th and 90th percentile of the iteration time."""
    shares: dict[str, float]
    """Share of the predicted iteration time in each error group (kernel family, collective scope)."""
    unmodelled_share: float
    """Share of the iteration time no held-out residual covers (host time, kernels priced without a band),
    held fixed."""
    composed_share: float = 0.0
    """Share of the iteration time in composed kernels (fused attention): varied by the residuals of the models
    they are composed from, and, for implementations with public measurements (`estimators/attention_model.py`),
    by their held-out residuals; cuDNN's attention, never measured, carries only its GEMMs' band."""
    simulations: tuple = field(default=(), repr=False, compare=False)
    """The low and high replays (`Simulation`), for figures other than the iteration time (their times carry
    the residuals only: `widen` adds the model discrepancy to a band read off them)."""
    discrepancy: Discrepancy = NONE
    """The model discrepancy the band was calibrated with (`low_ns`, `high_ns` include it)."""
    residual_low_ns: float | None = None
    residual_high_ns: float | None = None
    """The replays' band: the estimators' held-out residuals alone (None: no replay)."""
    apriori: tuple[float, float] = (0.0, 0.0)
    """Log widths (below, above) of kernels priced from a proxy (`discrepancy.apriori_widths`)."""

    def widen(self, center: float, low: float, high: float) -> tuple[float, float]:
        """The calibrated band of another figure than the iteration time, from its residual band [low, high] read
        off the replays (the iteration's a-priori widths taken as that figure's)."""
        return self.discrepancy.band(center, low, high, self.apriori)

    def to_dict(self) -> dict:
        return {
            "low_ns": self.low_ns,
            "high_ns": self.high_ns,
            "low_ms": self.low_ns / 1e6,
            "high_ms": self.high_ns / 1e6,
            "shares": self.shares,
            "unmodelled_share": self.unmodelled_share,
            "composed_share": self.composed_share,
            "residual_low_ns": self.residual_low_ns,
            "residual_high_ns": self.residual_high_ns,
            "apriori": list(self.apriori),
            "discrepancy": {
                "low": self.discrepancy.low,
                "high": self.discrepancy.high,
                "residual_scale": self.discrepancy.residual_scale,
            },
            "meaning": self.discrepancy.meaning,
        }


@dataclass(frozen=True)
class _Groups:
    """Per call of one program: its error group (-1: none), log quantiles (10th, 50th, 90th) and whether it is
    composed."""

    group: np.ndarray
    quantiles: np.ndarray
    composed: np.ndarray


def call_groups(sim: Simulation) -> tuple[list[str], dict[int, _Groups]] | None:
    """The error groups and each program's per-call quantiles; None when the kernels are not priced by a
    kernel estimator (measured or roofline durations carry no residuals)."""
    from maya.estimators.collective_residuals import shipped_residuals

    from .durations.estimated import CALL_FRAME_COLUMNS

    if sim.provider.kernel_estimator is None:
        return None

    residuals = shipped_residuals()
    names: list[str] = []
    per_program: dict[int, _Groups] = {}
    for rank, program in sim.programs.items():
        frame = program.frame
        ops = program.opcodes if frame is None else frame["opcode"].to_numpy()
        group = np.full(program.n, -1)
        quantiles = np.zeros((program.n, 3))
        composed = np.zeros(program.n, dtype=bool)
        kernels = np.isin(ops, DEVICE_OPS) & (ops != COLL)
        if kernels.any():
            family, q, composed[kernels] = _kernel_quantiles(
                sim, frame.loc[kernels, [*CALL_FRAME_COLUMNS, "work_bytes"]]
            )
            quantiles[kernels] = q
            group[kernels] = _codes(names, "kernels: ", family)
        coll = ops == COLL
        if coll.any():
            c = frame.loc[coll, ["comm_nodes", "comm_bytes"]]
            scope = np.where(c["comm_nodes"].fillna(1).to_numpy(dtype="float64") > 1, "inter-node", "intra-node")
            quantiles[coll] = residuals.of(scope, c["comm_bytes"].fillna(0.0).to_numpy(dtype="float64"))
            group[coll] = _codes(names, "collectives: ", scope)
        unmodelled = ~np.isfinite(quantiles).all(axis=1)
        quantiles[unmodelled] = UNMODELLED
        per_program[rank] = _Groups(np.where(unmodelled, -1, group), quantiles, composed)
    return names, per_program


def _kernel_quantiles(sim: Simulation, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call, the family whose errors it carries (`_error_family`), log quantiles of measured / predicted (NaN:
    no band) and whether it is composed."""
    from .durations.estimated import CALL_FRAME_COLUMNS

    frame = calls[list(CALL_FRAME_COLUMNS)].copy()
    frame["family"] = frame["family"].fillna("other")
    frame["bytes"] = calls["work_bytes"]
    frame["hardware"] = sim.hardware.name
    priced = sim.provider.kernel_estimator.predict(frame)
    duration = priced["duration_ns"].to_numpy(dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.minimum(np.log(priced["duration_low_ns"].to_numpy(dtype="float64") / duration), 0.0)
        high = np.maximum(np.log(priced["duration_high_ns"].to_numpy(dtype="float64") / duration), 0.0)
    method = priced["method"].to_numpy()
    return (
        _error_family(frame["family"].astype(str).to_numpy(), method),
        np.column_stack([low, np.zeros(len(low)), high]),
        method == "composed",
    )


def _error_family(family: np.ndarray, method: np.ndarray) -> np.ndarray:
    """The family whose model's errors a call carries: its own, or for a composed call the family its products
    are priced by (`FamilyPredictor.composed_from`: fused attention's are GEMMs)."""
    from maya.estimators.families import PREDICTORS

    out = family.astype(object)
    composed = method == "composed"
    for name in pd.unique(family[composed]):
        here = composed & (family == name)
        out[here] = PREDICTORS[name].composed_from or name
    return out


def _codes(names: list[str], prefix: str, values: np.ndarray) -> np.ndarray:
    """Each `prefix + value` label's index in `names` (`values`: strings), labels not in it appended in order of
    first appearance (in place); labelled once per distinct value."""
    codes, distinct = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=False)
    distinct = [prefix + str(value) for value in distinct]
    for label in distinct:
        if label not in names:
            names.append(label)
    index = {name: i for i, name in enumerate(names)}
    return np.array([index[label] for label in distinct], dtype=np.int64)[codes]


def log_factor(quantiles: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Per call, log(measured / predicted) at standard-normal draw `z` (of its group): through the call's
    10th, 50th and 90th percentiles, linear beyond."""
    q10, q50, q90 = quantiles[..., 0], quantiles[..., 1], quantiles[..., 2]
    return q50 + z / Z90 * np.where(z < 0, q50 - q10, q90 - q50)


def iteration_band(
    sim: Simulation, prediction: Prediction, *, samples: int = SAMPLES, seed: int = SEED
) -> IterationBand | None:
    """The 10–90% band of the prediction's iteration time (None without estimator durations)."""
    grouped = call_groups(sim)
    if grouped is None:
        return None
    names, per_program = grouped
    critical = next(i for i, r in enumerate(sim.replicas) if r.rank == prediction.critical_rank)
    replica = sim.replicas[critical]
    groups = per_program[replica.program.rank]
    steady = _steady_calls(sim, replica.program.rank, replica.program.n)
    device = sim.devices[critical].astype("float64") * steady
    ops = replica.program.opcodes if replica.program.frame is None else replica.program.frame["opcode"].to_numpy()
    compute_calls, comm_calls = np.isin(ops, DEVICE_OPS) & (ops != COLL), ops == COLL
    total = prediction.iteration_ns
    terms = []  # (share of the iteration, device-time weights of its calls, their quantiles) per group
    shares: dict[str, float] = {}
    for calls, part in ((compute_calls, prediction.compute_ns), (comm_calls, prediction.exposed_comm_ns)):
        weight = device[calls].sum()
        if not weight:
            continue
        for g in np.unique(groups.group[calls]):
            mine = calls & (groups.group == g)
            share = part * device[mine].sum() / weight
            if g >= 0 and share > 0:  # a group priced at no time (memsets) has no factor to weigh
                shares[names[g]] = share / total
                terms.append((g, share, *_distinct(device[mine], groups.quantiles[mine])))
    modelled = sum(t[1] for t in terms)
    compute_weight = device[compute_calls].sum()
    composed = (
        prediction.compute_ns * device[compute_calls & groups.composed].sum() / compute_weight / total
        if compute_weight and total
        else 0.0
    )
    discrepancy = shipped_discrepancy()
    apriori = apriori_widths(_proxied_shares(replica.program, device, compute_calls, prediction))
    if not terms or not total:
        band = discrepancy.band(total, total, total, apriori)
        return IterationBand(*band, shares, 1.0, composed, (), discrepancy, total, total, apriori)
    fixed = total - modelled
    draws = _normal_draws(samples, len(names), seed)
    linear = fixed + sum(_group_time(share, w, q, draws[:, g]) for g, share, w, q in terms)
    q_low, q_high = np.quantile(linear, [0.1, 0.9])
    points = [_design_point(terms, len(names), fixed, target, side) for target, side in ((q_low, 0), (q_high, 2))]
    replays = [_replay(sim, per_program, z) for z in points]
    residual = sorted(_iteration_ns(r) for r in replays)
    low, high = discrepancy.band(total, *residual, apriori)
    return IterationBand(
        low, high, shares, 1.0 - modelled / total, composed, tuple(replays), discrepancy, *residual, apriori
    )


def _proxied_shares(program, device: np.ndarray, compute: np.ndarray, prediction: Prediction) -> dict[float, float]:
    """Share of the iteration in kernels priced from a proxy, per stated uncertainty (`PROXY_UNCERTAINTY`): their
    share of the critical rank's steady compute time."""
    from maya.estimators.attention_model import PROXY_UNCERTAINTY

    weight = device[compute].sum()
    if program.frame is None or not weight or not prediction.iteration_ns:
        return {}
    kernel = per_distinct(program.frame["op"], lambda op: str(op).split("_")[0], "")
    out: dict[float, float] = {}
    for name, u in PROXY_UNCERTAINTY.items():
        mine = compute & (kernel == name)
        if mine.any():
            share = prediction.compute_ns * device[mine].sum() / weight / prediction.iteration_ns
            out[u] = out.get(u, 0.0) + share
    return out


def _normal_draws(samples: int, groups: int, seed: int) -> np.ndarray:
    """Standard normal draws, Latin-hypercube stratified: each group's marginal quantiles are (nearly) exact,
    so the band does not wander with the sampling. The draws of `scipy.stats.qmc.LatinHypercube(d=groups,
    seed=seed)` through `norm.ppf`, made here because importing `scipy.stats` costs ~0.9 CPU-s, a third of
    a `maya predict`: in each column, one uniform draw in each of `samples` equal strata, the strata shuffled."""
    from scipy.special import ndtri

    rng = np.random.default_rng(seed)
    jitter = rng.uniform(size=(samples, groups))
    strata = np.tile(np.arange(1, samples + 1), (groups, 1))
    for column in strata:
        rng.shuffle(column)
    return ndtri((strata.T - jitter) / samples)


def _steady_calls(sim: Simulation, rank: int, n: int) -> np.ndarray:
    """1.0 for calls in the rank's steady iterations, else 0.0."""
    iterations = sim.iterations[rank]
    mask = np.zeros(n)
    for k in iterations.steady:
        mask[iterations.bounds[k] : iterations.bounds[k + 1]] = 1.0
    return mask


def _distinct(weights: np.ndarray, quantiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A group's calls as its distinct quantile rows and the device time of each."""
    unique, inverse = np.unique(np.round(quantiles, 6), axis=0, return_inverse=True)
    return np.bincount(inverse.ravel(), weights=weights, minlength=len(unique)), unique


def _group_time(share: float, weights: np.ndarray, quantiles: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The group's part of the iteration time at each draw `z`: its share times the device-time weighted
    mean factor of its calls (`weights` per distinct row of `quantiles`)."""
    factors = np.exp(log_factor(quantiles[None, :, :], np.asarray(z, dtype="float64")[..., None]))
    return share * (factors @ weights) / weights.sum()


def _design_point(terms: list, groups: int, fixed: float, target: float, side: int) -> np.ndarray:
    """The draw on the gradient of the linear sum (on the `side` of the quantiles: 0 low, 2 high) at which
    the sum reaches `target`."""
    gradient = np.zeros(groups)
    for g, share, w, q in terms:
        gradient[g] = share * float(w @ np.abs(q[:, side] - q[:, 1])) / w.sum() / Z90
    norm = np.linalg.norm(gradient)
    if not norm:
        return np.zeros(groups)
    direction = gradient / norm

    def at(t: float) -> float:
        z = t * direction
        return fixed + sum(float(_group_time(share, w, q, z[g]).sum()) for g, share, w, q in terms)

    lo, hi = -12.0, 12.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid) < target else (lo, mid)
    return (lo + hi) / 2 * direction


def _replay(sim: Simulation, per_program: dict, z: np.ndarray) -> Simulation:
    """The simulation re-priced at draw `z` (every call's device time times its factor) and replayed."""
    factors = {
        rank: np.where(g.group >= 0, np.exp(log_factor(g.quantiles, z[np.maximum(g.group, 0)])), 1.0)
        for rank, g in per_program.items()
    }
    scaled: dict[int, np.ndarray] = {}
    devices = []
    for replica, device in zip(sim.replicas, sim.devices):
        if id(device) not in scaled:
            scaled[id(device)] = np.rint(device * factors[replica.program.rank]).astype(np.int64)
        devices.append(scaled[id(device)])
    engine = Engine(
        sim.replicas,
        devices,
        sim.comms,
        shortest_collective=sim.provider.collective_includes_wait,
        statuses=capture_statuses(sim.traces),
    )
    return replace(sim, devices=devices, results=engine.run())


def _iteration_ns(sim: Simulation) -> float:
    """The job's steady iteration time of a replay: its slowest rank's."""
    return max(r.iteration_ns for r in rank_reports(sim.replicas, sim.results, sim.devices, sim.iterations, 1.0))
