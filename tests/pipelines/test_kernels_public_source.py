"""The shipped public kernel measurements as a pipeline source: one partition per file, rows validated with
their provenance, quarantine with reasons, and re-runs that change nothing when the content did not."""

from __future__ import annotations

import dagster as dg
import duckdb
import pytest

from maya.pipelines.defs import kernels_public
from maya.pipelines.resources import Warehouse

pytestmark = pytest.mark.filterwarnings("ignore::dagster.PreviewWarning", "ignore::dagster.BetaWarning")


def materialize(warehouse: Warehouse, source: str) -> dict:
    result = dg.materialize(
        [kernels_public.raw_public_kernels, kernels_public.validated_public_kernels],
        resources={"warehouse": warehouse},
        partition_key=source,
    )
    event = result.asset_materializations_for_node("validated_public_kernels")[0]
    return {k: v.value for k, v in event.metadata.items()}


@pytest.mark.slow
def test_a_file_lands_validated_with_its_quarantine_and_a_rerun_changes_nothing(tmp_path):
    path = tmp_path / "warehouse.duckdb"
    warehouse = Warehouse(path=str(path))
    first = materialize(warehouse, "flash-attention-figures")
    assert first["changed"] is True and first["rows"] == 184 and first["quarantined"] == 8
    assert all("OOM" in reason for reason in first["quarantine_reasons"])
    second = materialize(warehouse, "flash-attention-figures")
    assert second["changed"] is False and second["content_hash"] == first["content_hash"]
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT device, kernel_impl, count(*), min(licence), count(DISTINCT row_index) FROM public_kernels "
            "GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        quarantine = con.execute("SELECT row_index, reason FROM public_kernel_quarantine ORDER BY row_index").fetchall()
    finally:
        con.close()
    counts = {(device, impl): n for device, impl, n, _, _ in rows}
    assert counts[("h100-sxm", "FlashAttention-2")] == 24 and counts[("h100-sxm", "Pytorch")] == 20
    assert counts[("a100-sxm-80gb", "xformers")] == 24 and len(counts) == 8
    assert all(r[3].startswith("BSD-3-Clause") and r[2] == r[4] for r in rows)
    assert quarantine[0][0] == 5 and "status" in quarantine[0][1]  # attn_fa_fig-0006: H100 eager at 16k, OOM
