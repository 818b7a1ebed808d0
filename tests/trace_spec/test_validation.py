"""Row-level and cross-table validation of runs, and the single source of the schema."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya_trace_spec import TABLES, Run, RunWriter, arrow_schema, file_schema, table_files
from maya_trace_spec.schema import TABLE_KEY, VERSION_KEY
from maya_trace_spec.spec_doc import render
from maya_trace_spec.synthetic import api_calls
from maya_trace_spec.validation import dataframe_schema, incomplete, unheld_work, validate_run


@pytest.mark.slow
def test_synthetic_run_is_valid(run_dir):
    assert validate_run(run_dir) == []


def _edit(run_dir, table, fn):
    f = table_files(run_dir, table)[0][1]
    t = pq.read_table(f)
    meta = t.schema.metadata
    pq.write_table(fn(t).replace_schema_metadata(meta), f)
    return f


@pytest.mark.slow
def test_negative_duration_and_bad_enum_reported(run_dir):
    def corrupt(t):
        d = t.column("duration_ns").to_pylist()
        d[3] = -5
        a = t.column("domain").to_pylist()
        a[4] = "opencl"
        t = t.set_column(t.schema.get_field_index("duration_ns"), "duration_ns", pa.array(d, pa.int64()))
        return t.set_column(t.schema.get_field_index("domain"), "domain", pa.array(a))

    f = _edit(run_dir, "api_calls", corrupt)
    problems = [str(p) for p in validate_run(run_dir)]
    assert any(str(f) in p and "'duration_ns'" in p and "-5" in p for p in problems), problems
    assert any("'domain'" in p and "opencl" in p for p in problems), problems


@pytest.mark.slow
def test_dangling_reference_reported(run_dir):
    def corrupt(t):
        k = t.column("kernel_id").to_pylist()
        first = next(i for i, v in enumerate(k) if v is not None)
        k[first] = 999
        return t.set_column(t.schema.get_field_index("kernel_id"), "kernel_id", pa.array(k, pa.int64()))

    _edit(run_dir, "api_calls", corrupt)
    problems = [str(p) for p in validate_run(run_dir)]
    assert problems == [f"{run_dir / 'api_calls'}: 1 row(s) reference a missing kernels.kernel_id (e.g. kernel_id=999)"]


@pytest.mark.slow
def test_duplicate_seq_across_parts_reported(run_dir):
    RunWriter(run_dir).write("api_calls", api_calls(3), rank=1)  # seq 0..2 again
    problems = [str(p) for p in validate_run(run_dir)]
    assert problems == [f"{run_dir / 'api_calls'}: 3 duplicate seq value(s) within a rank"]


def test_schema_doc_and_validation_come_from_one_source():
    for name, table in TABLES.items():
        cols = table.column_names
        assert arrow_schema(name).names == cols
        assert file_schema(name).metadata[TABLE_KEY] == name.encode()
        assert VERSION_KEY in file_schema(name).metadata
        expected = [c for c in cols if not (table.per_rank and c == "rank")]
        assert list(dataframe_schema(name).columns) == expected
        doc = render()
        assert all(f"| `{c}` |" in doc for c in cols)


def test_spec_md_is_current():
    from importlib.resources import files

    assert files("maya_trace_spec").joinpath("SPEC.md").read_text() == render(), (
        "regenerate: python -m maya_trace_spec.spec_doc > maya_trace_spec/SPEC.md"
    )


@pytest.mark.slow
def test_incomplete_names_an_interrupted_unfinished_or_empty_run(run_dir):
    """A run can be valid and yet not a whole capture: `incomplete` says which and why, and nothing for a
    complete one."""
    assert incomplete(run_dir) is None
    RunWriter(run_dir).write(
        "run", {**_info(run_dir), "status": ["interrupted"], "attrs": [json.dumps({"interrupted_by": "SIGTERM"})]}
    )
    assert validate_run(run_dir) == []
    assert (
        incomplete(run_dir)
        == "interrupted by SIGTERM: it holds what was captured until then (1,000 calls of 2 rank(s))"
    )
    RunWriter(run_dir).write("run", {**_info(run_dir), "status": ["running"], "attrs": [None]})
    assert "never finished (status running" in incomplete(run_dir)
    RunWriter(run_dir).write("run", {**_info(run_dir), "status": ["complete"]})
    for _, f in table_files(run_dir, "api_calls"):
        f.unlink()
    assert validate_run(run_dir) == []
    assert incomplete(run_dir) == "it is empty (status complete): no call was captured"


def test_unheld_work_names_children_with_device_calls_and_the_capture_stays_whole(run_dir):
    """Device calls of processes the ranks started (attrs `child_processes`) are work the run lacks, not a defect
    of its capture: `unheld_work` names them, `incomplete` does not; malformed reports count nothing."""
    assert unheld_work(run_dir) is None
    children = [{"pid": 9, "device_calls": 0}, {"pid": 10, "device_calls": 7}]  # nvidia-smi's queries; a GEMM
    attrs = {"child_processes": {"0": children}}
    RunWriter(run_dir).write("run", {**_info(run_dir), "status": ["complete"], "attrs": [json.dumps(attrs)]})
    assert incomplete(run_dir) is None
    assert unheld_work(run_dir) == (
        "1 process(es) its ranks started made 7 device call(s) it does not hold (attrs child_processes): that work is "
        "not priced"
    )
    for found in ({"0": [{"device_calls": 0}, "?", {"device_calls": "7"}], "1": 3}, [children], {"0": children[:1]}):
        RunWriter(run_dir).write(
            "run", {**_info(run_dir), "status": ["complete"], "attrs": [json.dumps({"child_processes": found})]}
        )
        assert unheld_work(run_dir) is None, found


def _info(run_dir) -> dict:
    return {k: [v] for k, v in Run(run_dir).info.items()}


@pytest.mark.slow
def test_trace_validate_refuses_an_interrupted_run(run_dir):
    """`maya trace validate` no longer calls an interrupted run valid: it fails, naming the signal."""
    assert CliRunner().invoke(app, ["trace", "validate", str(run_dir)]).exit_code == 0
    RunWriter(run_dir).write(
        "run", {**_info(run_dir), "status": ["interrupted"], "attrs": [json.dumps({"interrupted_by": "SIGHUP"})]}
    )
    r = CliRunner().invoke(app, ["trace", "validate", str(run_dir)])
    assert r.exit_code == 1
    assert "not a whole capture: interrupted by SIGHUP" in " ".join(r.output.split())
    assert "is a valid" not in r.output
