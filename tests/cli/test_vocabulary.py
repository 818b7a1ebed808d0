"""The CLI's vocabulary: one name per idea on every command, `-h`, help that reads at 80 columns, the
deprecated spellings, the catalogs, and `maya predict` on a synthetic run."""

import json
import re

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from maya.cli import app
from maya.core import hardware
from maya.core.clusters import cluster_names, load_cluster
from maya_trace_spec import synthetic

runner = CliRunner()
ROOT = typer.main.get_command(app)


def maya(*args, **env):
    return runner.invoke(app, [str(a) for a in args], env=env or None, prog_name="maya")


def commands(group=ROOT, path=()):
    """(path, command) of every command and group under `group`, hidden aliases included."""
    for name, cmd in group.commands.items():
        yield (*path, name), cmd
        if hasattr(cmd, "commands"):  # a group
            yield from commands(cmd, (*path, name))


COMMANDS = dict(commands())
OPTIONS = [(path, p) for path, cmd in COMMANDS.items() for p in cmd.params if p.param_type_name == "option"]

SAME_NAME = {
    "warehouse": ["--warehouse"],
    "estimator_version": ["--estimator-version"],
    "jobs": ["--jobs"],
    "as_json": ["--json"],
    "hardware": ["--hardware"],
    "cluster": ["--cluster"],
    "durations": ["--durations"],
    "out_dir": ["--out", "-o"],
}
"""Parameter -> its option names, the same on every command that has it."""
WAREHOUSE_COMMANDS = [
    ("demo",),
    ("emulate",),
    ("predict",),
    ("search",),
    ("sql",),
    ("dashboard",),
    ("validate",),
    ("estimators", "train"),
    ("estimators", "list"),
    ("estimators", "show"),
    ("estimators", "eval"),
    ("trace", "import", "kineto"),
    ("profile", "workload"),
]
"""The commands that read or write the warehouse."""
DEPRECATED = [
    (("predict",), ["RUN", "--model-version", "v3"], "estimator_version", "v3"),
    (("validate",), ["SUITE", "--model-version=v3"], "estimator_version", "v3"),
    (("estimators", "eval"), ["--dataset", "x.parquet", "--version", "v3"], "estimator_version", "v3"),
    (("search",), ["--space", "s.yaml", "--parallel", "3", "--", "python", "t.py", "--parallel", "9"], "jobs", 3),
    (("profile", "workload"), ["-o", "out", "--iterations", "7", "--", "python", "t.py"], "measured_iterations", 7),
]
"""(command, arguments with an old spelling, parameter, the value it receives)."""


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "maya")
def test_every_command_and_group_takes_h(path):
    r = maya(*path, "-h")
    assert r.exit_code == 0, r.output
    assert r.stdout == maya(*path, "--help").stdout and "Usage: maya" in r.stdout


@pytest.mark.parametrize("parameter, names", SAME_NAME.items())
def test_one_idea_has_one_option_name_everywhere(parameter, names):
    having = [(path, p.opts) for path, p in OPTIONS if p.name == parameter]
    assert having and all(opts == names for _, opts in having), having


def test_no_command_keeps_an_old_spelling_as_its_option():
    old = {"--model-version", "--parallel"}
    assert [(path, p.opts) for path, p in OPTIONS if old & set(p.opts)] == []
    assert [path for path, p in OPTIONS if "--version" in p.opts] == []  # only the root's


def test_every_command_that_reads_or_writes_the_warehouse_takes_warehouse():
    assert [path for path in WAREHOUSE_COMMANDS if "warehouse" not in {p.name for p in COMMANDS[path].params}] == []
    assert {path for path, p in OPTIONS if p.name == "warehouse"} == set(WAREHOUSE_COMMANDS)


def test_durations_is_one_choice_in_predict_and_search():
    choices = {path: tuple(p.type_descriptor.choices) for path, p in OPTIONS if p.name == "durations"}
    assert set(choices) == {("predict",), ("search",)} and len(set(choices.values())) == 1


@pytest.mark.parametrize("path", [("emulate",), ("search",), ("profile", "workload")])
def test_script_commands_show_the_script_in_their_usage(path):
    assert f"Usage: maya {' '.join(path)} [OPTIONS] -- SCRIPT [ARGS]..." in maya(*path, "-h").stdout


@pytest.mark.parametrize("path", [(), ("trace",), ("estimators",), ("profile",), ("trace", "import")])
def test_group_listings_show_each_summary_whole_on_one_line(path):
    listing = maya(*path, "--help", COLUMNS="80").stdout
    lines = listing.splitlines()
    group = COMMANDS[path] if path else ROOT
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        summary = " ".join(cmd.help.split("\n\n")[0].split())
        assert any(re.search(rf"│ {name} +{re.escape(summary)} +│", line) for line in lines), (name, summary)


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_summary_is_one_line_of_at_most_70_characters(path):
    summary, *_ = COMMANDS[path].help.split("\n\n")
    assert "\n" not in summary.strip() and len(summary.strip()) <= 70 and summary.strip().endswith(".")


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "maya")
def test_help_fits_80_columns_without_cutting_words(path):
    text = maya(*path, "--help", COLUMNS="80").stdout
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text


@pytest.mark.parametrize("path, args, parameter, value", DEPRECATED, ids=[" ".join(d[0]) for d in DEPRECATED])
def test_deprecated_option_spellings_still_work_and_warn(path, args, parameter, value, capsys):
    command = COMMANDS[path]
    ctx = command.make_context(path[-1], list(args))
    old = next(a.partition("=")[0] for a in args if a.partition("=")[0] in command.renamed)
    assert ctx.params[parameter] == value
    assert f"warning: {old} is deprecated; use {command.renamed[old]}" in capsys.readouterr().err


def test_the_scripts_own_arguments_are_not_renamed():
    ctx = COMMANDS[("search",)].make_context("search", ["--space", "s.yaml", "--", "python", "t.py", "--parallel", "9"])
    assert ctx.params["jobs"] == 1 and ctx.args[-2:] == ["--parallel", "9"]


@pytest.fixture
def run(tmp_path):
    return synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=200, ops_per_rank=20)


def test_predict_with_the_old_spelling_passes_the_version_and_warns(run, tmp_path):
    warehouse = tmp_path / "other.duckdb"
    r = maya("predict", run, "--model-version", "v9", "--durations", "estimators", "--warehouse", warehouse)
    assert r.exit_code == 1
    assert "warning: --model-version is deprecated; use --estimator-version" in r.stderr
    assert f"unknown estimator version 'v9' in {warehouse}" in r.stderr


@pytest.mark.slow
def test_trace_validate_is_a_deprecated_alias_of_trace_check(run):
    assert COMMANDS[("trace", "validate")].hidden
    r = maya("trace", "validate", run, COLUMNS="300")
    assert r.exit_code == 0 and f"{run} is a valid maya_trace_spec trace" in r.stdout
    assert "warning: maya trace validate is deprecated; use maya trace check" in r.stderr
    assert "warning" not in maya("trace", "check", run).stderr


@pytest.mark.slow
def test_predict_json_is_stored_in_the_warehouse_given(run, tmp_path, maya_home):
    warehouse = tmp_path / "w.duckdb"
    r = maya("predict", run, "--durations", "roofline", "--json", "--warehouse", warehouse)
    assert r.exit_code == 0, r.output
    prediction = json.loads(r.stdout)
    assert prediction["hardware"] == "h100-sxm" and prediction["simulated_ranks"] == 1
    assert prediction["iteration_ns"] > 0 and prediction["durations"] == "roofline"
    with duckdb.connect(str(warehouse), read_only=True) as con:
        stored = con.execute(
            "SELECT iteration_ms FROM predictions WHERE prediction_id = ?", [prediction["prediction_id"]]
        ).fetchall()
    assert stored == [(pytest.approx(prediction["iteration_ns"] / 1e6),)]
    assert not (maya_home / "warehouse.duckdb").exists()


@pytest.mark.slow
def test_predict_for_another_gpu_and_data_parallel_degree(run):
    base = json.loads(maya("predict", run, "--durations", "roofline", "--json").stdout)
    r = maya("predict", run, "--durations", "roofline", "--json", "--hardware", "a100-sxm-80gb", "--dp", "4")
    assert r.exit_code == 0, r.output
    moved = json.loads(r.stdout)
    assert (moved["hardware"], moved["simulated_ranks"], moved["world_size"]) == ("a100-sxm-80gb", 4, 4)
    assert any("data-parallel degree 4 instead of 1" in a for a in moved["assumptions"])
    assert any("GPU: a100-sxm-80gb instead of h100-sxm" in a for a in moved["assumptions"])
    assert moved["iteration_ns"] > base["iteration_ns"]  # an A100 is slower than an H100 on the same work


@pytest.mark.slow
def test_predict_table_names_the_run_and_the_gpu(run):
    r = maya("predict", run, "--durations", "roofline", "--hardware", "h200", COLUMNS="120")
    assert r.exit_code == 0, r.output
    assert "run on 1 × h200" in r.stdout and "iteration time" in r.stdout


@pytest.mark.slow
def test_predict_single_rank_shows_no_rank_table(run):
    r = maya("predict", run, "--durations", "roofline", COLUMNS="200")
    assert r.exit_code == 0, r.output
    assert "peak memory" in r.stdout and "┃ rank" not in r.stdout  # one rank: the summary says it all


def test_rank_table_leaves_out_the_times_zero_on_every_rank_and_names_them():
    from types import SimpleNamespace

    from rich.console import Console

    from maya.cli.predict import _rank_table

    def rank(i, comm, wait):
        times = dict(compute_ns=1e6, exposed_comm_ns=comm, peer_wait_ns=wait, host_bound_ns=1e4, idle_ns=0.0)
        return SimpleNamespace(rank=i, iteration_ns=2e6, mfu=0.4, peak_memory_bytes=2**30, **times)

    console = Console(width=200, record=True)
    console.print(_rank_table([rank(0, 5e5, 0.0), rank(1, 0.0, 0.0)]))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "rank" in line)
    assert "exposed comm" in header and "compute" in header and "host-bound" in header
    assert "peer wait" not in header and "idle" not in header
    assert "zero on every rank: peer wait, idle" in text


def test_hardware_lists_the_catalog():
    r = maya("hardware", "--json")
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    assert [p["name"] for p in listed] == hardware.names()
    h100 = next(p for p in listed if p["name"] == "h100-sxm")
    assert h100["memory_bytes"] == hardware.get("h100-sxm").memory_bytes
    table = maya("hardware", COLUMNS="80").stdout
    assert all(f"│ {name} " in table for name in hardware.names())


def test_hardware_shows_one_part_and_refuses_unknown_names():
    r = maya("hardware", "h200", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["sm_count"] == hardware.get("h200").sm_count
    r = maya("hardware", "h300")
    assert r.exit_code == 2 and "unknown hardware 'h300'" in r.stderr and "h100-sxm" in r.stderr


def test_clusters_lists_the_shipped_clusters():
    r = maya("clusters", "--json")
    assert r.exit_code == 0, r.output
    assert [c["name"] for c in json.loads(r.stdout)] == cluster_names()
    table = maya("clusters", COLUMNS="80").stdout  # names whole, as --cluster takes them
    assert all(f"│ {name} " in table for name in cluster_names())
    r = maya("clusters", "dgx-h100", COLUMNS="200")
    assert r.exit_code == 0 and load_cluster("dgx-h100").summary() in r.stdout
    r = maya("clusters", "nosuch")
    assert r.exit_code == 2 and "unknown cluster 'nosuch'" in r.stderr


@pytest.mark.slow
def test_sql_markdown_and_json(run):
    query = "SELECT 1 AS n, 'a|b' AS s, NULL AS z"
    r = maya("sql", query, "--format", "markdown")
    assert r.exit_code == 0, r.output
    assert [line.split() for line in r.stdout.splitlines()] == [
        ["|", "n", "|", "s", "|", "z", "|"],
        ["|-----|------|------|"],
        ["|", "1", "|", "a\\|b", "|", "NULL", "|"],
    ]
    as_json = maya("sql", query, "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == [{"n": 1, "s": "a|b", "z": None}]
    assert as_json.stdout == maya("sql", query, "--format", "json").stdout
    r = maya("sql", query, "--json", "--format", "csv")
    assert r.exit_code == 2 and "--json" in r.stderr


def test_validate_passes_its_options_to_the_suite_runner(monkeypatch, tmp_path):
    from maya import validation
    from maya.estimators import RegistryError

    received = {}

    def run_suite(suite, rows, **options):
        received.update(options)
        raise RegistryError("stop here")

    monkeypatch.setattr(validation, "run_suite", run_suite)
    warehouse = tmp_path / "w.duckdb"
    r = maya("validate", "llm-foundry-smoke", "--model-version", "v4", "--jobs", "2", "--warehouse", warehouse)
    assert r.exit_code == 1 and "stop here" in r.stderr
    assert (received["version"], received["jobs"], received["warehouse"]) == ("v4", 2, warehouse)
