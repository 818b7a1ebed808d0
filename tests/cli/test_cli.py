"""The `maya` CLI: version, read-only SQL, trace check and migration, the demo."""

import json
import os
from pathlib import Path

import pytest
from helpers import tree_digest
from typer.testing import CliRunner

from maya import __version__
from maya.cli import app
from maya.core.warehouse import register_run
from maya_trace_spec import Run, RunWriter, read_table, table_files

runner = CliRunner()


def maya(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_version():
    r = maya("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"maya {__version__}"


@pytest.mark.slow
def test_sql_over_trace_views(run_dir):
    r = maya(
        "sql",
        "SELECT rank, count(*) AS n FROM api_calls GROUP BY rank ORDER BY rank",
        "--trace",
        run_dir,
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    expected = read_table(run_dir, "api_calls").group_by("rank").aggregate([("seq", "count")])
    assert json.loads(r.stdout) == [
        {"rank": rk, "n": n} for rk, n in sorted(zip(*expected.to_pydict().values()), key=lambda x: x[0])
    ]
    r = maya(
        "sql",
        "SELECT name, family FROM kernels WHERE rank = 0 ORDER BY kernel_id LIMIT 2",
        "--trace",
        run_dir,
        "--format",
        "csv",
    )
    assert r.exit_code == 0 and r.stdout.splitlines()[0] == "name,family"
    assert r.stdout.splitlines()[1].endswith(",gemm")
    r = maya("sql", "SELECT count(*) FROM memory_events", "--trace", run_dir)
    assert r.exit_code == 0 and "4" in r.stdout


@pytest.mark.slow
def test_sql_over_warehouse(run_dir, maya_home):
    register_run(run_dir)
    register_run(run_dir)  # idempotent
    r = maya("sql", "SELECT source, ranks, api_calls FROM runs", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"source": "synthetic", "ranks": 2, "api_calls": 1000}]


@pytest.mark.parametrize(
    "query, refused",
    [
        ("INSERT INTO runs VALUES (1)", "INSERT statements are refused"),
        ("COPY (SELECT * FROM api_calls) TO '{run}/leak.csv'", "COPY statements are refused"),
        ("ATTACH '{run}/other.duckdb' AS o", "ATTACH statements are refused"),
        ("INSTALL httpfs", "INSTALL/LOAD statements are refused"),
        ("CREATE TABLE t AS SELECT 1", "CREATE statements are refused"),
        ("SELECT 1; DELETE FROM runs", "DELETE statements are refused"),
        ("SET enable_external_access = true", "SET statements are refused"),
        ("EXPLAIN ANALYZE SELECT 1", "EXPLAIN ANALYZE"),
        ("SELECT * FROM read_csv('{outside}')", "only reads Maya's data directories"),
        ("SELECT * FROM glob('{outside_dir}/*')", "only reads Maya's data directories"),
    ],
)
def test_sql_refuses_writes_and_outside_files(run_dir, maya_home, tmp_path_factory, query, refused):
    register_run(run_dir)
    outside_dir = tmp_path_factory.mktemp("outside")
    (outside_dir / "secret.csv").write_text("a\n1\n")
    before = tree_digest(run_dir), tree_digest(maya_home), tree_digest(outside_dir)
    q = query.format(run=run_dir, outside=outside_dir / "secret.csv", outside_dir=outside_dir)
    r = maya("sql", q, "--trace", run_dir)
    assert r.exit_code == 2, r.output
    assert refused in r.stderr
    assert (tree_digest(run_dir), tree_digest(maya_home), tree_digest(outside_dir)) == before


def test_sql_bad_query_is_a_clear_error(run_dir):
    r = maya("sql", "SELECT * FROM no_such_table", "--trace", run_dir)
    assert r.exit_code == 1 and "no_such_table" in r.stderr


@pytest.mark.slow
def test_trace_check(run_dir):
    r = maya("trace", "check", run_dir)
    assert r.exit_code == 0 and "valid" in r.stdout and "warning" not in r.stderr
    attrs = {"child_processes": {"0": [{"pid": 10, "device_calls": 7}]}}  # a process rank 0 started: a GEMM
    RunWriter(run_dir).write("run", {**{k: [v] for k, v in Run(run_dir).info.items()}, "attrs": [json.dumps(attrs)]})
    r = maya("trace", "check", run_dir)
    assert r.exit_code == 0 and "valid" in r.stdout
    assert "warning:" in r.stderr and "made 7 device call(s) it does not hold" in " ".join(r.stderr.split())
    f = table_files(run_dir, "ops")[1][1]
    f.write_bytes(f.read_bytes()[:100])
    r = maya("trace", "check", run_dir)
    assert r.exit_code == 1
    assert str(f) in r.stderr and "truncated" in r.stderr
    r = maya("trace", "check", f)
    assert r.exit_code == 1 and str(f) in r.stderr
    r = maya("trace", "check", run_dir / "nope")
    assert r.exit_code == 1 and "no such file" in r.stderr


@pytest.mark.slow
def test_sql_refuses_a_run_with_a_bad_file(run_dir):
    f = table_files(run_dir, "kernels")[0][1]
    f.write_text("not parquet")
    r = maya("sql", "SELECT 1", "--trace", run_dir)
    assert r.exit_code == 1 and str(f) in r.stderr


def test_trace_migrate_current_run_is_a_no_op(run_dir):
    before = tree_digest(run_dir)
    r = maya("trace", "migrate", run_dir)
    assert r.exit_code == 0 and "nothing to migrate" in r.stdout
    assert tree_digest(run_dir) == before


@pytest.mark.parametrize(
    "command, expected",
    [
        (
            ["torchrun", "--standalone", "--nproc_per_node=4", "train.py", "config/x.py", "--compile=False"],
            (["train.py", "config/x.py", "--compile=False"], 1, 4),
        ),
        (
            ["/usr/bin/torchrun", "--nnodes", "1:2", "--nproc-per-node", "8", "-m", "torchtitan.train", "--x"],
            (["-m", "torchtitan.train", "--x"], 2, 8),
        ),
        (["python3", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"], (["train.py"], 1, 2)),
        (["python", "train.py", "--nproc_per_node", "2"], None),
    ],
)
def test_torchrun_commands_give_the_script_and_the_jobs_shape(command, expected):
    """`maya emulate -- torchrun ...` as training READMEs write the launch (nanoGPT's `torchrun --standalone
    --nproc_per_node=4 train.py`): torchrun's own parser reads it; another command is no launch."""
    from maya.emulator.launch_commands import read

    launch = read(command, None)
    assert (launch and (launch.argv, launch.nnodes, launch.nproc_per_node)) == expected
    assert launch is None or (launch.env, launch.rank_argument) == ({}, None)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nproc-per-node", "4", "--", "torchrun", "--nproc_per_node=2", "x.py"], "give the job's shape once"),
        (["--", "torchrun", "--nproc_per_node=gpu", "x.py"], "give the number of GPUs per node"),
        (["--", "torchrun", "--no-python", "x.py"], "runs Python scripts"),
        (["--", "accelerate", "config"], "maya emulate runs `accelerate launch"),
        (["--", "python", "-m", "deepspeed.launcher.launch", "x.py"], "a launcher, which maya does not run"),
    ],
)
def test_torchrun_commands_maya_cannot_take_are_refused(args, message):
    r = maya("emulate", *args)
    assert r.exit_code == 2 and message in r.stderr


def _console_script(folder, name, interpreter):
    """A console script as pip and uv write one: `#!INTERPRETER`, then Python that records its argv."""
    path = folder / name
    path.write_text(
        f"#!{interpreter}\nimport json, pathlib, sys\n"
        "if __name__ == '__main__':\n"
        "    pathlib.Path(sys.argv[0] + '.argv').write_text(json.dumps(sys.argv[1:]))\n"
    )
    path.chmod(0o755)
    return path


def test_a_console_script_on_path_runs_as_its_python_file(tmp_path, monkeypatch):
    """`maya emulate -- litgpt pretrain ...` (LitGPT's entry point, run in-process: Fabric sees torchrun's
    environment) resolves `litgpt` on PATH to its console script and runs that file with the arguments."""
    import sys

    from maya.cli.common import script_argv
    from maya.core.script_runner import run_script

    script = _console_script(tmp_path, "litgpt", sys.executable)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path.parent)
    argv = script_argv(["litgpt", "pretrain", "pythia-14m"])
    assert argv == [str(script), "pretrain", "pythia-14m"]
    run_script(argv)
    assert json.loads((tmp_path / "litgpt.argv").read_text()) == ["pretrain", "pythia-14m"]


@pytest.mark.parametrize(
    "interpreter, message",
    [("/elsewhere/env/bin/python3", "a console script of another Python environment"), ("/bin/sh", "no such script")],
)
def test_console_scripts_maya_cannot_run_are_refused(tmp_path, monkeypatch, interpreter, message):
    """A console script of another environment would import its packages from the wrong one: refused, naming
    both Pythons; an executable that is no Python script is no script."""
    _console_script(tmp_path, "sometool", interpreter)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    r = maya("emulate", "--", "sometool", "x")
    assert r.exit_code == 2 and message in r.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["search", "--space", "space.yaml"],
        ["profile", "workload", "-o", "out"],
        ["profile", "workload", "-o", "out", "--measure"],
    ],
)
@pytest.mark.parametrize(
    "launcher",
    [
        ["torchrun", "--nproc-per-node", "2"],
        ["python", "-m", "torch.distributed.run"],
        ["/venv/bin/horovodrun"],
        ["ds"],
        ["deepspeed.pt"],
        ["accelerate-launch"],
        ["python", "-m", "accelerate.commands.launch"],
        ["python", "-m", "deepspeed.launcher.runner"],
        ["python", "-m", "deepspeed.launcher.launch"],
    ],
)
def test_commands_that_read_no_torchrun_command_refuse_every_launcher(tmp_path, monkeypatch, command, launcher):
    """`maya search` and `maya profile` take the script itself: a launcher (torchrun too, which only `maya
    emulate` reads) is refused before anything runs, rather than run as the training script."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("raise SystemExit('the script ran')\n")
    r = maya(*command, "--", *launcher, "train.py")
    assert r.exit_code == 2 and "a launcher, which maya does not run" in r.stderr, r.output


@pytest.mark.parametrize(
    "shebang",
    [
        "#!/usr/bin/env {name}\n",
        "#!/bin/sh\n'''exec' {python} \"$0\" \"$@\"\n' '''\n",
    ],
)
def test_console_scripts_of_both_other_shebang_forms_are_read(tmp_path, monkeypatch, shebang):
    """`#!/usr/bin/env python3` (the first Python on PATH) and pip's `#!/bin/sh` wrapper for long paths name their
    Python too: this environment's runs; another's is refused, naming it."""
    import sys

    from maya.cli.common import script_argv

    here = Path(sys.executable)
    other = tmp_path / "other" / "bin"
    other.mkdir(parents=True)
    (other / here.name).symlink_to("/bin/true")
    for folder, expect in ((here.parent, None), (other, "a console script of another Python environment")):
        script = tmp_path / "tool"
        script.write_text(shebang.format(name=here.name, python=folder / here.name) + "print('hi')\n")
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{folder}:{os.environ['PATH']}")
        if expect is None:
            assert script_argv(["tool", "x"]) == [str(script), "x"]
        else:
            r = maya("emulate", "--", "tool", "x")
            assert r.exit_code == 2 and expect in r.stderr and str(other) in r.stderr, r.output


def test_predict_reads_on_the_system_allocator_and_restores_the_callers_pool(tmp_path, monkeypatch):
    """`maya predict` switches Arrow to the C library's allocator for its own duration only (an error exit too),
    and not at all where `ARROW_DEFAULT_MEMORY_POOL` names one."""
    import pyarrow as pa

    from maya import api

    seen = []

    def predict(run_dir, options):
        seen.append(pa.default_memory_pool().backend_name)
        raise ValueError("stopped here")

    monkeypatch.setattr(api, "predict", predict)
    own = pa.default_memory_pool()
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    try:
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
        r = maya("predict", tmp_path)
        assert r.exit_code == 1 and "stopped here" in r.output
        assert pa.default_memory_pool().backend_name == "mimalloc"
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
        assert maya("predict", tmp_path).exit_code == 1
        assert seen == ["system", "mimalloc"]
    finally:
        pa.set_memory_pool(own)


@pytest.mark.slow
def test_search_installs_transformer_engine_before_its_capture_salt(tmp_path, monkeypatch):
    """`maya search` of a script importing Transformer Engine installs it before digesting the installed packages into
    the capture salt, so captures made with TE are not cached under a salt without it."""
    from maya import search
    from maya.installer import transformer_engine

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import transformer_engine.pytorch as te\n")
    (tmp_path / "space.yaml").write_text("gpus: 8\nparameters:\n  tp: [1, 2]\n")
    order = []
    monkeypatch.setattr(transformer_engine, "ensure", lambda needed_by: order.append(f"ensure: {needed_by}"))

    def salts(*args, **kwargs):
        order.append("salts")
        raise ValueError("stop here")

    monkeypatch.setattr(search, "evaluator_salts", salts)
    r = maya("search", "--space", "space.yaml", "--", "python", "train.py", "--tp", "{tp}")
    assert r.exit_code == 2 and "stop here" in r.stderr, r.output
    assert order == ["ensure: train.py, which imports transformer_engine,", "salts"]
