"""`maya emulate --memory-history` on real scripts: torch's allocator history recorded in the rank says what holds
the peak, which equals the trace's, in the analytical sizes of a known model (with Adam, and with plain SGD, whose
steps allocate nothing); a rank stopped by `--iterations` or by its script's failure keeps what it recorded; a
script's own `_record_memory_history` calls win and the history is refused; without the flag nothing is recorded.
A rank stopped by a signal: `test_interrupt.py`."""

import json
import pickle

import pytest
from paths import EXAMPLE, WORKLOADS
from typer.testing import CliRunner

from maya import api
from maya.cli import app
from maya.cli.demo import EXAMPLE_ARGS
from maya.emulator.memory_history import FOLDER, sidecar_path, snapshot_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

runner = CliRunner()
SCRIPT = WORKLOADS / "adam_mlp.py"
PARAMETERS = 4 * (2048 * 8192 + 8192 + 8192 * 2048 + 2048)
"""The MLP's fp32 parameters in bytes (each a multiple of the allocator's 512-byte blocks)."""


def emulate(out, script, *args: str, script_args: tuple[str, ...] = (), fails: bool = False, flag: bool = True) -> str:
    """Emulate `script` with the flag (its exit code 1 only when it `fails`); the output."""
    shown = ["--memory-history"] if flag else []
    r = runner.invoke(app, ["emulate", *shown, "--out", str(out), *args, "--", "python", str(script), *script_args])
    assert r.exit_code == (1 if fails else 0), r.output
    return r.output


def line_of(text: str) -> int:
    """The line of the workload that holds `text`."""
    return next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def adam_run(tmp_path_factory, emulator_cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAYA_HOME", str(tmp_path_factory.mktemp("maya_home")))
        mp.setenv("MAYA_EMULATOR_CACHE", str(emulator_cache))
        out = tmp_path_factory.mktemp("adam") / "run"
        emulate(out, SCRIPT)
        return out


def test_the_snapshot_is_torchs_own_and_written_whole(adam_run):
    folder = adam_run / FOLDER
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.json", "rank0.pickle"]  # no temporary left
    snapshot = pickle.loads(snapshot_path(folder, 0).read_bytes())
    assert {"segments", "device_traces"} <= set(snapshot)  # what pytorch.org/memory_viz reads
    assert json.loads(sidecar_path(folder, 0).read_text())["optimizer_marks"] is True


def test_the_peak_equals_the_traces_and_holds_the_models_analytical_sizes(adam_run):
    peak = api.peak_memory(adam_run)
    assert peak.agrees is True, (peak.allocated_bytes, peak.trace_allocated_bytes)
    categories = {c: b for c, b, _ in peak.categories()}
    assert categories["parameters"] == PARAMETERS
    assert categories["gradients"] == PARAMETERS
    assert categories["optimizer state"] == 2 * PARAMETERS  # exp_avg and exp_avg_sq
    # the peak is in a step of foreach Adam, whose temporaries take one more copy; the batch and loss are the rest
    assert categories["activations and temporaries"] == PARAMETERS
    assert peak.allocated_bytes - sum(categories.values()) == 0
    assert categories["other"] < 2**20
    assert peak.held_bytes >= peak.allocated_bytes


def test_the_allocating_frames_are_the_scripts_lines(adam_run):
    holders = {h.category: h for h in api.peak_memory(adam_run).holders[:4]}
    assert (holders["parameters"].file, holders["parameters"].line) == (str(SCRIPT), line_of("model = "))
    step = line_of("optimizer.step()")
    assert (holders["optimizer state"].file, holders["optimizer state"].line) == (str(SCRIPT), step)
    assert holders["activations and temporaries"].line == step


def test_a_rank_stopped_by_iterations_or_by_its_failure_keeps_its_history(tmp_path):
    emulate(tmp_path / "stopped", WORKLOADS / "long_training.py", "--iterations", "2")
    stopped = api.peak_memory(tmp_path / "stopped")
    assert stopped.agrees is True and stopped.allocated_bytes > 0
    failing = tmp_path / "failing.py"
    failing.write_text(
        "import torch\nweights = torch.zeros(2**20, device='cuda')\nraise RuntimeError('the script fails')\n"
    )
    emulate(tmp_path / "failed", failing, fails=True)
    failed = api.peak_memory(tmp_path / "failed")
    assert failed.allocated_bytes == 4 * 2**20 and (failed.reached_by.file, failed.reached_by.line) == (
        str(failing),
        2,
    )


@pytest.mark.parametrize(
    "script, script_args",
    [(EXAMPLE, tuple(EXAMPLE_ARGS)), (WORKLOADS / "cached_blocks.py", ("expandable",))],
    ids=["bundled example", "expandable segments"],
)
def test_the_peak_equals_the_traces_with_blocks_too_small_to_split_and_settings_the_script_sets(
    tmp_path, script, script_args
):
    """The bundled example's peak counts blocks given whole (their remainder too small to split off); the
    workload sets `PYTORCH_CUDA_ALLOC_CONF` itself, which recording must not read before it does."""
    emulate(tmp_path / "run", script, script_args=script_args)
    peak = api.peak_memory(tmp_path / "run")
    assert peak.agrees is True, (peak.allocated_bytes, peak.trace_allocated_bytes)
    settings = pickle.loads(snapshot_path(tmp_path / "run" / FOLDER, 0).read_bytes())["allocator_settings"]
    assert settings["expandable_segments"] is (script_args == ("expandable",))


def test_plain_sgd_whose_steps_allocate_nothing_has_its_gradients(tmp_path):
    """The rank's hooks keep each step's bounds: SGD's gradients, freed by `zero_grad` after the step, are
    gradients though no allocation happens inside a step."""
    script = tmp_path / "sgd.py"
    script.write_text(SCRIPT.read_text().replace("torch.optim.Adam(", "torch.optim.SGD("))
    assert "torch.optim.SGD(" in script.read_text()
    emulate(tmp_path / "run", script)
    steps = json.loads(sidecar_path(tmp_path / "run" / FOLDER, 0).read_text())["optimizer_steps"]
    assert len(steps) >= 2 and all(0 < start <= end for start, end in steps)
    peak = api.peak_memory(tmp_path / "run")
    categories = {c: b for c, b, _ in peak.categories()}
    assert categories["parameters"] == PARAMETERS, categories
    # the peak is in a backward, before the first layer's bias gradient (8,192 values) is made
    assert categories["gradients"] == PARAMETERS - 4 * 8192, categories
    assert "optimizer state" not in categories


def test_a_scripts_own_history_calls_win_and_the_history_is_refused(tmp_path):
    before = tmp_path / "before.py"  # before CUDA's initialisation: Maya does not record over it
    before.write_text(
        "import torch\ntorch.cuda.memory._record_memory_history(max_entries=50)\n"
        "xs = [torch.empty(1024, device='cuda') for _ in range(100)]\n"
        "print('kept', len(torch.cuda.memory._snapshot()['device_traces'][0]))\n"
    )
    assert "kept 50" in emulate(tmp_path / "before", before)  # the script's own cap, not Maya's
    with pytest.raises(api.UntrustedHistory, match="configured the allocator's history itself"):
        api.peak_memory(tmp_path / "before")
    cleared = tmp_path / "cleared.py"
    cleared.write_text(
        "import torch\na = torch.empty(2**20, device='cuda')\ntorch.cuda.memory._record_memory_history(None)\n"
    )
    emulate(tmp_path / "cleared", cleared)
    calls = json.loads(sidecar_path(tmp_path / "cleared" / FOLDER, 0).read_text())["script_calls"]
    assert [(c["function"], c["args"]) for c in calls] == [("_record_memory_history", [None])]
    with pytest.raises(api.UntrustedHistory, match=r"reconfigured or cleared it \(_record_memory_history\(None\)\)"):
        api.peak_memory(tmp_path / "cleared")


def test_without_the_flag_no_folder_is_written(tmp_path):
    emulate(tmp_path / "run", WORKLOADS / "long_training.py", "--iterations", "1", flag=False)
    assert (tmp_path / "run" / "run.parquet").is_file() and not (tmp_path / "run" / FOLDER).exists()
