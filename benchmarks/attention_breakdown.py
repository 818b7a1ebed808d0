"""The composed attention model's parts for one shape (default: MPT 1b at 64k tokens, row 12 of the llm-foundry
suite: batch 1 x 16 heads, head dim 128, causal, bf16): per GPU and kernel, the predicted time, its FLOP/s and
share of the bf16 tensor peak, and its parts — the products as the GEMM family prices them, the factor the
fused kernel's MMA and shared memory put on them, the exp2, the FP32 bookkeeping and the HBM time. A
diagnostic of the mechanisms (docs/mpt_mechanisms.md, sections 1, 7, 8), not a measurement.

    MAYA_HOME=... .venv/bin/python benchmarks/attention_breakdown.py [--batch 16 --seq 65536 --head-dim 128]
"""

from __future__ import annotations

import argparse

import pandas as pd

from maya.core import hardware
from maya.estimators import Registry
from maya.estimators.families.attention import AttentionPredictor, causal_tile_share
from maya.estimators.hardware_table import hardware_arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=float, default=16.0, help="batch x heads")
    parser.add_argument("--seq", type=float, default=65536.0)
    parser.add_argument("--head-dim", type=float, default=128.0)
    parser.add_argument("--hardware", default="a100-sxm-80gb,h100-sxm")
    parser.add_argument("--kernel", default="flash", choices=("flash", "sdpa"))
    parser.add_argument("--model-version", default="latest")
    args = parser.parse_args()
    estimator = Registry().load(args.model_version)
    ops = [f"{args.kernel}_fwd_causal", f"{args.kernel}_bwd_causal"]
    names = args.hardware.split(",")
    calls = pd.DataFrame(
        [
            {
                "hardware": hw,
                "family": "attention",
                "op": op,
                "dtype": "bf16",
                "batch": args.batch,
                "m": args.seq,
                "n": args.seq,
                "k": args.head_dim,
            }
            for hw in names
            for op in ops
        ]
    )
    parts = AttentionPredictor().breakdown(calls, hardware_arrays(calls), estimator.predict)
    share = causal_tile_share(calls["m"].to_numpy(), calls["n"].to_numpy())
    flops = 4 * calls["batch"] * calls["m"] * calls["n"] * calls["k"] * share
    flops = flops * calls["op"].str.contains("bwd").map({True: 2.5, False: 1.0})
    peak = calls["hardware"].map(lambda h: hardware.get(h).peak_flops("bf16"))
    ms = parts[["seconds", "gemm_s", "products_s", "exp2_s", "fp32_s", "memory_s"]] * 1e3
    table = pd.concat(
        [
            calls[["hardware", "op"]],
            ms.round(1).rename(columns=lambda c: c.replace("_s", "_ms")),
            parts["slowdown"].round(3),
        ],
        axis=1,
    )
    table["tflop_s"] = (flops / parts["seconds"] / 1e12).round(0)
    table["share_of_peak"] = (flops / parts["seconds"] / peak).map("{:.1%}".format)
    table = table.rename(columns={"seconds": "total_ms"})
    print(
        f"batch x heads {args.batch:g}, {args.seq:g} tokens, head dim {args.head_dim:g}, causal, bf16; "
        f"estimator {args.model_version}"
    )
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
