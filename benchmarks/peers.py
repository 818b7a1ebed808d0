"""The peers a user could pick instead of Maya, untuned, on the same measured rows (issue 27 item 6).

Every row of the shipped llm-foundry suite (162 published MPT runs) and of korthikanti2022 (8 Megatron-LM GPT
runs) is predicted by each peer from the row's own columns, with the peer's own hardware files and its documented
settings; nothing is fitted to the rows:

- **llm-analysis** 0.2.2 (PyPI, `LLMAnalysis.training`): flops efficiency 0.5 and HBM efficiency 0.9, what its
  README says to assume when nothing is profiled ("up to 0.5 for large scale model training", "0.9 can be an
  aggressive target for memory efficiency"; its defaults, 1.0, give its lower bound); its GPU files
  (a100-sxm-40gb, a100-sxm-80gb, h100-sxm-80gb); the ZeRO stage its README maps each FSDP sharding strategy to
  (FULL_SHARD 3, SHARD_GRAD_OP 2); flash attention on the MPT rows (they ran Triton flash attention or
  flash-attn 2), not on the 2022 Megatron rows (unfused attention).
- **Calculon** (calculon-ai/calculon, not on PyPI; its `Llm` model): its own system files, `systems/a100_80g.json`
  for the A100 80GB, the same with the 40GB part's spec-sheet capacity and bandwidth (40 GiB, 1,555 GB/s) for the
  A100 40GB, which it lacks, and `systems/h100_80g_nvl8.json`; bf16 at its float16 rates (the same tensor-core
  rate); data parallelism on the NVLink tier within a node and on the node network across nodes; FSDP as its
  optimizer sharding with data-parallel overlap (reduce-scatter and all-gather hidden behind the backward where its
  model finds room); the Megatron rows as its own
  `validation/seqsel/tab5` files encode them.
  Run as-is and with its recompute accounting fixed (`calculon-fixed`): `Llm._compute_block_stats` adds, for
  every recomputed layer, the block's *running* forward totals so far (`self._block_re_flops +=
  self._block_fw_flops`, likewise flop time, bytes and memory time) instead of the layer's own; under full
  recomputation the block's recompute memory time becomes the sum of its prefix sums, which the data-parallel
  overlap subtracts from the backward's window, so the gradient collectives come out exposed. The fix adds the
  layer's own values (`layer.get_fw_flops()`, `layer.compute_flops_time("fw")`, `layer.get_fw_mem_accessed()`,
  `layer.compute_mem_time("fw")`), applied to the module's source at import, never to the checkout.
- **40%-MFU rule of thumb**: 6 · N · tokens / (0.4 · peak · GPUs), N the row's parameter count (the published one
  for MPT), tokens the optimizer step's, peak the catalog's dense bf16/fp16 rate.
- **Maya**: each row's latest `maya validate` result of the same suite content in the warehouse (`--warehouse`);
  none there: the peers alone, and it says so.

Error = predicted / measured - 1. A peer's memory verdict is kept apart from its time: Calculon computes a row's
time before it checks memory, and every row it (or llm-analysis) judges not to fit is counted as a false
out-of-memory verdict (each published run completed), its time still judged. Per peer and regime (all rows, each
GPU, each sequence band): rows run, mean |error|, mean signed error, max |error|; first on every row the peer ran,
then on the rows Maya has (the same rows for every peer). `--json` prints it all, with each row's predictions.

The peers' dependencies stay out of Maya's environment: a venv of their own, whose interpreter runs this file's
`worker` (standard library and the peers only), and a Calculon checkout (its system files; it runs from the
checkout, as its README says):

    python3 -m venv ~/.maya-peers && ~/.maya-peers/bin/pip install llm-analysis==0.2.2 pandas psutil
    git clone https://github.com/calculon-ai/calculon ~/calculon && git -C ~/calculon checkout caa4b11
    .venv/bin/python benchmarks/peers.py --peers-python ~/.maya-peers/bin/python --calculon ~/calculon \
        [--warehouse PATH] [--suite llm-foundry|korthikanti2022] [--json]

(Calculon imports pandas and psutil without declaring them.) A peer that cannot run (not installed, no checkout) is
left out with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import math
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

SUITES = ("llm-foundry", "korthikanti2022")
MFU = 0.4
"""The rule of thumb's model FLOPs utilisation."""
LLM_ANALYSIS_SETTINGS = {"flops_efficiency": 0.5, "hbm_memory_efficiency": 0.9}
"""llm-analysis's README: what to assume for large-scale training when nothing is profiled."""
LLM_ANALYSIS_GPUS = {"a100_40gb": "a100-sxm-40gb", "a100_80gb": "a100-sxm-80gb", "h100_80gb": "h100-sxm-80gb"}
CALCULON_SYSTEMS = {"a100_40gb": "a100_80g.json", "a100_80gb": "a100_80g.json", "h100_80gb": "h100_80g_nvl8.json"}
CALCULON_SPEC_OVERRIDES = {"a100_40gb": {"mem1": {"GiB": 40, "GBps": 1555}}}
"""Spec-sheet figures of a part Calculon has no file for, over the nearest file's."""
CATALOG_GPUS = {"a100_40gb": "a100-sxm-40gb", "a100_80gb": "a100-sxm-80gb", "h100_80gb": "h100-sxm"}
GPUS_PER_NODE = 8
SEQUENCE_BANDS = ((4096, "<=4k"), (16384, "8-16k"), (math.inf, ">=32k"))
"""(longest sequence, label) of each sequence band, shortest first."""
CALCULON_RECOMPUTE_FIX = {
    "self._block_re_flops += self._block_fw_flops\n": "self._block_re_flops += layer.get_fw_flops()\n",
    "self._block_re_flops_time += self._block_fw_flops_time\n": (
        'self._block_re_flops_time += layer.compute_flops_time("fw")\n'
    ),
    "self._block_re_mem_accessed += self._block_fw_mem_accessed\n": (
        "self._block_re_mem_accessed += layer.get_fw_mem_accessed()\n"
    ),
    "self._block_re_mem_time += self._block_fw_mem_time\n": 'self._block_re_mem_time += layer.compute_mem_time("fw")\n',
}
"""Calculon's recompute accounting (caa4b11, `calculon/llm/llm.py`): the running totals it adds, and the layer's own
values `calculon-fixed` adds instead."""
PEERS = ("maya", "llm-analysis", "calculon", "calculon-fixed", "rule-of-thumb")


# ---- rows ----------------------------------------------------------------------------------------------------------


def rule_of_thumb_s(params: float, tokens: float, gpus: int, peak_flops: float, mfu: float = MFU) -> float:
    """Seconds of an optimizer step at `mfu` of peak: 6 FLOPs per parameter and token over the GPUs' peak."""
    if params <= 0 or tokens <= 0 or gpus < 1 or peak_flops <= 0 or not 0 < mfu <= 1:
        raise ValueError(
            f"rule of thumb needs positive inputs (params {params}, tokens {tokens}, gpus {gpus}, "
            f"peak {peak_flops}, mfu {mfu})"
        )
    return 6 * params * tokens / (mfu * peak_flops * gpus)


def sequence_band(seq: int) -> str:
    """The sequence band label of `seq` tokens."""
    return next(label for longest, label in SEQUENCE_BANDS if seq <= longest)


def _mpt_workload() -> ModuleType:
    """`data/workloads/mpt.py` as a module: its sizes (d_model, n_heads, n_layers of each yaml), vocabulary and MLP
    ratio."""
    from maya.validation.llm_foundry import workload_script

    spec = importlib.util.spec_from_file_location("maya_workload_mpt", workload_script())
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def mpt_specs(table) -> list[dict]:
    """A peer's view of each llm-foundry row: its model, parallelism, batch, precision and measured step."""
    mpt = _mpt_workload()
    specs = []
    for row, r in table.iterrows():
        d, heads, layers = mpt.SIZES[r["Model"]]
        seq, gpus = int(r["SeqLen (T)"]), int(r["# GPUs"])
        specs.append(
            {
                "suite": "llm-foundry",
                "row": int(row),
                "gpu": r["GPU"],
                "gpus": gpus,
                "seq": seq,
                "layers": layers,
                "hidden": d,
                "heads": heads,
                "head_dim": d // heads,
                "ffn": mpt.EXPANSION * d,
                "vocab": mpt.VOCAB,
                "params": int(r["NumParams"]),
                "micro_batch": int(r["MicroBatchSize"]),
                "global_batch": int(r["GlobalBatchSize"]),
                "tp": 1,
                "pp": 1,
                "interleave": 1,
                "recompute": "full" if str(r["Activation Checkpointing"]).lower() == "true" else "none",
                "sequence_parallel": False,
                "zero": {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}[r["Sharding Strategy"]],
                "flash_attention": True,
                "dtype": "bf16",
                "measured_s": float(r["step_time_s_derived"]),
            }
        )
    return specs


def megatron_params(layers: int, hidden: int, ffn: int, heads: int, head_dim: int, vocab: int, seq: int) -> int:
    """GPT parameters: per layer QKV, output and MLP projections with biases and two LayerNorms; token and
    position embeddings (the output layer tied to the former); the final LayerNorm."""
    q = heads * head_dim
    layer = hidden * 3 * q + 3 * q + q * hidden + hidden + 2 * hidden * ffn + ffn + hidden + 4 * hidden
    return layers * layer + (vocab + seq) * hidden + 2 * hidden


MEGATRON_PLAIN = {
    "swiglu": lambda v, _: str(v).lower() == "false",
    "normalization": lambda v, _: v == "LayerNorm",
    "position_embedding_type": lambda v, _: v == "learned_absolute",
    "context_parallel_size": lambda v, _: int(v) == 1,
    "num_query_groups": lambda v, r: int(v) == int(r["num_attention_heads"]),
}
"""The Megatron columns every peer assumes at their default: (value, row) -> whether the row keeps it."""


def _given(r, column: str):
    """A Megatron row's value of `column`, None where it is empty (Megatron's default)."""
    value = r.get(column)
    return None if value is None or value != value or value == "" else value


def megatron_specs(table) -> list[dict]:
    """A peer's view of each Megatron row (`pretrain_gpt.py` arguments); ValueError names a column the peers
    cannot represent."""
    specs = []
    for row, r in table.iterrows():
        unsupported = [
            c for c, plain in MEGATRON_PLAIN.items() if _given(r, c) is not None and not plain(_given(r, c), r)
        ]
        if unsupported:
            raise ValueError(f"Megatron row {row}: no peer models {', '.join(unsupported)}")
        layers, hidden, heads = int(r["num_layers"]), int(r["hidden_size"]), int(r["num_attention_heads"])
        tp, pp, gpus = int(r["tensor_model_parallel_size"]), int(r["pipeline_model_parallel_size"]), int(r["gpus"])
        ffn = int(_given(r, "ffn_hidden_size") or 4 * hidden)
        head_dim = int(_given(r, "kv_channels") or hidden // heads)
        seq, vocab = int(r["seq_length"]), int(r["vocab_size"])
        per_virtual = _given(r, "num_layers_per_virtual_pipeline_stage")
        granularity = _given(r, "recompute_granularity")
        specs.append(
            {
                "suite": "korthikanti2022",
                "row": int(row),
                "gpu": r["gpu"],
                "gpus": gpus,
                "seq": seq,
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
                "head_dim": head_dim,
                "ffn": ffn,
                "vocab": vocab,
                "params": megatron_params(layers, hidden, ffn, heads, head_dim, vocab, seq),
                "micro_batch": int(r["micro_batch_size"]),
                "global_batch": int(r["global_batch_size"]),
                "tp": tp,
                "pp": pp,
                "interleave": layers // pp // int(per_virtual) if per_virtual else 1,
                "recompute": {None: "none", "full": "full", "selective": "selective"}[granularity],
                "sequence_parallel": str(r["sequence_parallel"]).lower() == "true",
                "zero": 1 if str(_given(r, "use_distributed_optimizer")).lower() == "true" else 0,
                "flash_attention": False,
                "dtype": str(r["precision"]),
                "measured_s": float(r["measured_step_s"]),
            }
        )
    return specs


def suite_specs(name: str) -> tuple[str, list[dict]]:
    """The suite's content digest and its rows as peers see them."""
    from maya.validation.suites import load_suite

    suite = load_suite(name)
    return suite.digest, (mpt_specs if suite.kind == "llm-foundry" else megatron_specs)(suite.table)


def rule_of_thumb(specs: Iterable[dict]) -> dict[int, float]:
    """The rule of thumb's step time of each row, at the catalog's dense peak for the row's dtype."""
    from maya.core.hardware import get

    return {
        s["row"]: rule_of_thumb_s(
            s["params"],
            s["global_batch"] * s["seq"],
            s["gpus"],
            get(CATALOG_GPUS[s["gpu"]]).peak_flops("fp16" if s["dtype"] == "fp16" else "bf16"),
        )
        for s in specs
    }


def maya_predictions(warehouse: Path | None, digest: str) -> dict[int, float]:
    """The predicted step of each row whose latest `maya validate` result of this suite content (any estimator
    version) in the warehouse is a prediction; a row whose latest run failed or ran out of memory is left out."""
    from maya.validation.store import latest

    frame = latest(warehouse)
    frame = frame[frame["suite_digest"] == digest].sort_values("recorded_at").groupby("row").tail(1)
    frame = frame[(frame["status"] == "ok") & frame["predicted_s"].notna()]
    return {int(r): float(p) for r, p in zip(frame["row"], frame["predicted_s"], strict=True)}


# ---- the peers (run by `worker` in the peers' interpreter: standard library and the peers only) ----------------------


def llm_analysis_step(spec: dict) -> dict:
    """llm-analysis's latency of one optimizer step of the row (its README's efficiency setting) and its memory
    verdict."""
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import ModelConfig, ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name

    dp = spec["gpus"] // (spec["tp"] * spec["pp"])
    analysis = LLMAnalysis(
        ModelConfig(
            name=f"{spec['suite']}-{spec['row']}",
            num_layers=spec["layers"],
            n_head=spec["heads"],
            hidden_dim=spec["hidden"],
            vocab_size=spec["vocab"],
            max_seq_len=spec["seq"],
            ffn_embed_dim=spec["ffn"],
        ),
        get_gpu_config_by_name(LLM_ANALYSIS_GPUS[spec["gpu"]]),
        get_dtype_config_by_name("w16a16e16"),
        ParallelismConfig(
            tp_size=spec["tp"], pp_size=spec["pp"], dp_size=dp, sp_size=spec["tp"] if spec["sequence_parallel"] else 1
        ),
        **LLM_ANALYSIS_SETTINGS,
    )
    summary = analysis.training(
        batch_size_per_gpu=spec["micro_batch"],
        gradient_accumulation_steps=spec["global_batch"] // (spec["micro_batch"] * dp),
        global_batch_size=spec["global_batch"],
        seq_len=spec["seq"],
        activation_recomputation=ActivationRecomputation[spec["recompute"].upper()],
        ds_zero=DSZeRO(spec["zero"]),
        flash_attn=spec["flash_attention"],
    )
    left = summary["memory_left_per_gpu"]
    return {
        "predicted_s": float(summary["latency_per_iter"]),
        "oom": f"needs {-left / 2**30:.1f} GiB more than the GPU has" if left < 0 else None,
    }


def calculon_llm(fixed: bool) -> type:
    """Calculon's `Llm`, or with `fixed` a copy compiled from its source with `CALCULON_RECOMPUTE_FIX` applied."""
    llm = importlib.import_module("calculon.llm.llm")
    if not fixed:
        return llm.Llm
    source = Path(llm.__file__).read_text()
    for wrong, right in CALCULON_RECOMPUTE_FIX.items():
        if source.count(wrong) != 1:
            raise RuntimeError(f"{llm.__file__} is not Calculon caa4b11's: {wrong.strip()!r} is not in it once")
        source = source.replace(wrong, right)
    module = ModuleType("calculon.llm.llm_recompute_fixed")
    module.__package__ = "calculon.llm"
    module.__file__ = llm.__file__
    exec(compile(source, llm.__file__, "exec"), module.__dict__)  # noqa: S102 - the peer's own source, patched
    return module.Llm


def calculon_system(checkout: Path, gpu: str):
    """Calculon's `System` for the row's GPU, from its own file (with the spec-sheet overrides)."""
    from calculon import System

    spec = json.loads((checkout / "systems" / CALCULON_SYSTEMS[gpu]).read_text())
    for part, values in CALCULON_SPEC_OVERRIDES.get(gpu, {}).items():
        spec[part] = {**spec[part], **values}
    return System(spec)


def calculon_execution(spec: dict) -> dict:
    """The row as Calculon's execution JSON (the fields of `Llm.Execution`)."""
    tp, pp = spec["tp"], spec["pp"]
    dp = spec["gpus"] // (tp * pp)
    sequence_parallel = spec["sequence_parallel"]
    return {
        "num_procs": spec["gpus"],
        "tensor_par": tp,
        "pipeline_par": pp,
        "data_par": dp,
        "tensor_par_net": 0,
        "pipeline_par_net": 1,
        "data_par_net": 0 if 1 < dp and spec["gpus"] <= GPUS_PER_NODE else 1,
        "batch_size": spec["global_batch"],
        "microbatch_size": spec["micro_batch"],
        "datatype": "float16",
        "fused_activation": False,
        "attention_type": "multihead",
        "activation_recompute": {"none": "none", "full": "full", "selective": "attn_only"}[spec["recompute"]],
        "pipeline_interleaving": spec["interleave"],
        "optimizer_sharding": spec["zero"] > 0 and dp > 1,
        "tensor_par_comm_type": "rs_ag" if sequence_parallel else "ar",
        "tensor_par_overlap": "none",
        "seq_par_ag_redo": sequence_parallel and spec["recompute"] != "full",
        "data_par_overlap": spec["zero"] > 1 and dp > 1,
        "weight_offload": False,
        "activations_offload": False,
        "optimizer_offload": False,
        "training": True,
    }


def calculon_step(spec: dict, checkout: Path, llm: type) -> dict:
    """Calculon's total time of one optimizer step of the row and its memory verdict: the time is computed before
    the memory check (`Llm.run`), so a row it judges not to fit still has one."""
    app = llm.Application(
        {
            "hidden": spec["hidden"],
            "feedforward": spec["ffn"],
            "seq_size": spec["seq"],
            "attn_heads": spec["heads"],
            "attn_size": spec["head_dim"],
            "num_blocks": spec["layers"],
        }
    )
    system = calculon_system(checkout, spec["gpu"])
    model = llm(app, logging.getLogger("calculon"))
    model.compile(system, llm.Execution.from_json(calculon_execution(spec)))
    try:
        model.run(system)
        oom = None
    except llm.Error as e:
        if not str(e).startswith("Mem tier"):
            raise
        oom = str(e)
    return {"predicted_s": float(model.get_total_time()), "oom": oom}


def run_peer(name: str, predict, specs: list[dict]) -> dict:
    """`{"rows": {row key: {"predicted_s", "oom"}}, "not_run": {row key: reason}}`, or `{"error": why}` when the
    peer cannot run."""
    rows, not_run = {}, {}
    for spec in specs:
        key = f"{spec['suite']}:{spec['row']}"
        try:
            rows[key] = predict(spec)
        except ImportError as e:
            if not rows:  # the first rows fail to import it: not installed; later, one row's lazy import failed
                return {"error": f"{name} is not installed in {sys.executable} ({e})"}
            not_run[key] = f"{type(e).__name__}: {e}".strip()
        except Exception as e:  # noqa: BLE001 - the peer refuses the row (Calculon's Llm.Error, its assertions)
            not_run[key] = f"{type(e).__name__}: {e}".strip()
    return {"rows": rows, "not_run": not_run}


def worker(specs: list[dict], calculon: Path | None) -> dict:
    """Every peer's predictions of `specs` (run in the peers' interpreter)."""
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    out = {"llm-analysis": run_peer("llm-analysis", llm_analysis_step, specs)}
    if calculon is None:
        missing = {"error": "no Calculon checkout given (--calculon DIR)"}
        return {**out, "calculon": missing, "calculon-fixed": missing}
    sys.path.insert(0, str(calculon))
    for name, fixed in (("calculon", False), ("calculon-fixed", True)):
        try:
            llm = calculon_llm(fixed)
        except (ImportError, RuntimeError) as e:  # not importable, or not the source the fix is written for
            out[name] = {"error": f"Calculon from {calculon}: {e}"}
            continue
        out[name] = run_peer(name, lambda s, llm=llm: calculon_step(s, calculon, llm), specs)
    return out


# ---- figures -------------------------------------------------------------------------------------------------------


def errors_pct(predicted: Mapping[int, float], specs: Iterable[dict]) -> dict[int, float]:
    """predicted / measured - 1, in percent, of each row predicted."""
    return {s["row"]: 100 * (predicted[s["row"]] / s["measured_s"] - 1) for s in specs if s["row"] in predicted}


def regimes(spec: dict) -> tuple[str, ...]:
    """The regimes a row counts in: all rows, its GPU, its sequence band."""
    return ("all", f"gpu {spec['gpu']}", f"seq {sequence_band(spec['seq'])}")


def figures(errors: Mapping[int, float], specs: list[dict], rows: set[int] | None = None) -> list[dict]:
    """Per regime: rows, mean |error|, mean signed error and max |error| of `errors` (restricted to `rows`)."""
    grouped: dict[str, list[float]] = {}
    for s in specs:
        if s["row"] in errors and (rows is None or s["row"] in rows):
            for regime in regimes(s):
                grouped.setdefault(regime, []).append(errors[s["row"]])
    return [
        {
            "regime": regime,
            "rows": len(e),
            "mean_abs_error_pct": sum(map(abs, e)) / len(e),
            "mean_signed_error_pct": sum(e) / len(e),
            "max_abs_error_pct": max(map(abs, e)),
        }
        for regime, e in sorted(grouped.items(), key=lambda item: _regime_order(item[0]))
    ]


def _regime_order(regime: str) -> tuple[int, int, str]:
    kind = ("all", "gpu", "seq").index(regime.split(" ")[0])
    band = [label for _, label in SEQUENCE_BANDS].index(regime[4:]) if kind == 2 else 0
    return kind, band, regime


def run_workers(specs: list[dict], python: str, calculon: Path | None) -> dict:
    """`worker`'s result from the peers' interpreter."""
    command = [python, str(Path(__file__).resolve()), "worker"] + (["--calculon", str(calculon)] if calculon else [])
    try:
        done = subprocess.run(command, input=json.dumps(specs), capture_output=True, text=True, check=False)
    except OSError as e:
        raise SystemExit(f"--peers-python {python}: cannot run it ({e})") from None
    if done.returncode:
        raise SystemExit(f"the peers' worker failed in {python} (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def compare(suites: Iterable[str], warehouse: Path | None, python: str, calculon: Path | None) -> dict:
    """Every peer's predictions and figures on each suite."""
    loaded = {name: suite_specs(name) for name in suites}
    peers = run_workers([s for _, specs in loaded.values() for s in specs], python, calculon)
    report = {"settings": _settings(warehouse, python, calculon), "suites": {}}
    for name, (digest, specs) in loaded.items():
        predicted = {"maya": maya_predictions(warehouse, digest)}
        unavailable, not_run, oom = {}, {}, {}
        for peer, result in peers.items():
            if "error" in result:
                unavailable[peer] = result["error"]
                continue
            rows = _of_suite(result["rows"], name)
            predicted[peer] = {row: r["predicted_s"] for row, r in rows.items()}
            oom[peer] = {row: r["oom"] for row, r in rows.items() if r["oom"]}
            not_run[peer] = _of_suite(result["not_run"], name)
        predicted["rule-of-thumb"] = rule_of_thumb(specs)
        errors = {peer: errors_pct(p, specs) for peer, p in predicted.items()}
        maya_rows = set(errors["maya"])
        report["suites"][name] = {
            "rows": len(specs),
            "maya_rows": sorted(maya_rows),
            "unavailable": unavailable,
            "not_run": not_run,
            "false_oom": oom,
            "figures": {peer: figures(e, specs) for peer, e in errors.items() if e},
            "figures_on_maya_rows": (
                {peer: figures(e, specs, maya_rows) for peer, e in errors.items() if e} if maya_rows else {}
            ),
            "predictions": [
                {
                    "row": s["row"],
                    "gpu": s["gpu"],
                    "seq": s["seq"],
                    "gpus": s["gpus"],
                    "measured_s": s["measured_s"],
                    **{peer: predicted[peer].get(s["row"]) for peer in PEERS if peer in predicted},
                }
                for s in specs
            ],
        }
    return report


def _of_suite(by_key: Mapping[str, object], suite: str) -> dict[int, object]:
    """The entries of `suite`'s rows (keys `<suite>:<row>`), by row number."""
    return {int(k.split(":")[1]): v for k, v in by_key.items() if k.split(":")[0] == suite}


def _settings(warehouse: Path | None, python: str, calculon: Path | None) -> dict:
    from maya.core.paths import warehouse_path

    return {
        "warehouse": str(warehouse or warehouse_path()),
        "peers_python": python,
        "calculon": str(calculon) if calculon else None,
        "llm_analysis": LLM_ANALYSIS_SETTINGS,
        "rule_of_thumb_mfu": MFU,
    }


def render(report: dict) -> str:
    """The report as text tables."""
    lines = []
    for name, suite in report["suites"].items():
        maya = len(suite["maya_rows"])
        source = report["settings"]["warehouse"]
        lines.append(
            f"\n{name}: {suite['rows']} rows; "
            + (
                f"Maya: {maya} rows (latest `maya validate` results in {source})"
                if maya
                else f"no Maya rows for this suite in {source}: the peers alone"
            )
        )
        for peer, why in suite["unavailable"].items():
            lines.append(f"  {peer}: not run: {why}")
        for peer, rows in suite["not_run"].items():
            if rows:
                first = next(iter(rows.values()))
                lines.append(f"  {peer}: {len(rows)} rows not run (e.g. row {next(iter(rows))}: {first[:160]})")
        for peer, rows in suite["false_oom"].items():
            if rows:
                row, why = next(iter(rows.items()))
                lines.append(
                    f"  {peer}: judges {len(rows)} of the rows out of memory, all of which ran (e.g. row {row}: "
                    f"{why[:120]}); their times are judged below"
                )
        tables = [("every row each peer ran", suite["figures"])]
        if suite["figures_on_maya_rows"]:
            tables.append((f"the {maya} rows Maya has", suite["figures_on_maya_rows"]))
        for title, table in tables:
            lines.append(f"  {title}:")
            lines.append(
                f"  {'peer':<16}{'regime':<16}{'rows':>6}{'mean |err|':>12}{'mean signed':>13}{'max |err|':>11}"
            )
            for peer in PEERS:
                for f in table.get(peer, []):
                    lines.append(
                        f"  {peer:<16}{f['regime']:<16}{f['rows']:>6}{f['mean_abs_error_pct']:>11.1f}%"
                        f"{f['mean_signed_error_pct']:>+12.1f}%{f['max_abs_error_pct']:>10.1f}%"
                    )
    return "\n".join(lines).lstrip("\n")


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["worker"]:
        p = argparse.ArgumentParser(prog="peers.py worker", description="Predict the rows on stdin with the peers.")
        p.add_argument("--calculon", type=Path, help="a Calculon checkout")
        opts = p.parse_args(args[1:])
        specs = json.load(sys.stdin)
        with contextlib.redirect_stdout(sys.stderr):  # the peers print; stdout carries the result alone
            result = worker(specs, opts.calculon)
        print(json.dumps(result))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=SUITES, action="append", help="a suite (default: both)")
    p.add_argument("--warehouse", type=Path, help="warehouse of Maya's `maya validate` results (default: $MAYA_HOME's)")
    p.add_argument("--peers-python", default=sys.executable, help="interpreter of the peers' venv (default: this one)")
    p.add_argument("--calculon", type=Path, help="a Calculon checkout (calculon-ai/calculon, caa4b11)")
    p.add_argument("--json", action="store_true", help="print JSON on stdout instead of tables")
    opts = p.parse_args(args)
    if opts.calculon and not (opts.calculon / "systems").is_dir():
        p.error(f"--calculon {opts.calculon}: not a Calculon checkout (no systems/ folder)")
    report = compare(opts.suite or SUITES, opts.warehouse, opts.peers_python, opts.calculon)
    print(json.dumps(report, indent=1) if opts.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
