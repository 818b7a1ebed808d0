"""`maya search` on fake evaluators: expressions, space files, pruning rules, resume, algorithms."""

import json

import pytest
from helpers import version_row

from maya.search import Expr, ExprError, Outcome, Salts, SearchLog, SpaceError, load_space, run_search, search_id


class Fake:
    """An evaluator over `--name value` command lines: time and memory from a function of the values;
    records every command it evaluated, raises after `fail_after` evaluations."""

    def __init__(self, figures, fail_after=None):
        self.figures, self.fail_after, self.calls = figures, fail_after, []

    def __call__(self, task, known):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("interrupted")
        values = dict(zip(task.argv[1::2], task.argv[2::2]))
        values.update(task.env)
        self.calls.append(values)
        time_ns, memory = self.figures({k.lstrip("-"): v for k, v in values.items()})
        return Outcome("oom" if memory > 100 else "ok", time_ns, memory, 0.5, world_size=task.world_size)


def space(parameters, command=None, **extra):
    command = command or ["train.py", *[x for name in parameters for x in (f"--{name}", f"{{{name}}}")]]
    return load_space({"parameters": parameters, **extra}, command, gpus=8)


def evaluated(fake):
    return [tuple(sorted(c.items())) for c in fake.calls]


# expressions ------------------------------------------------------------------------------------------


def test_expressions_compute_and_compare():
    assert Expr("gpus // (tp * pp)")({"gpus": 64, "tp": 4, "pp": 2}) == 8
    assert Expr("gpus % (tp * pp) == 0 and not mbs > 4")({"gpus": 8, "tp": 2, "pp": 2, "mbs": 2}) is True
    assert Expr("1 < x <= 3")({"x": 4}) is False
    assert Expr("a - -b + c * 2")({"a": 1, "b": 2, "c": 3}) == 9


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os').system('true')",
        "tp.__class__",
        "x[0]",
        "open('f')",
        "lambda: 1",
        "2 ** 100",
        "a / b",
        "[1, 2]",
        "(x := 3)",
    ],
)
def test_expressions_refuse_calls_attributes_and_the_rest(source):
    with pytest.raises(ExprError):
        Expr(source)


def test_expression_syntax_errors_are_expr_errors():
    with pytest.raises(ExprError, match="invalid syntax"):
        Expr("tp * ")


# space files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, command, message",
    [
        (
            {"parameters": {"tp": [1, 2]}, "constraints": ["tp * pp <= 8"]},
            ["t.py", "{tp}"],
            r"unknown name\(s\) \['pp'\]",
        ),
        ({"parameters": {"tp": [1, 2]}, "derived": {"dp": "gpus // zz"}}, ["t.py", "{tp}"], "unknown name"),
        ({"parameters": {"tp": []}}, ["t.py", "{tp}"], "'tp' has no values"),
        ({"parameters": {"tp": [1, 2]}, "constraints": ["tp <"]}, ["t.py", "{tp}"], "invalid syntax"),
        ({"parameters": {"tp": [1, 2]}, "constraints": ["tp.real > 0"]}, ["t.py", "{tp}"], "not allowed"),
        ({"parameters": {"tp": [1, 2]}}, ["t.py", "{tp}", "--pp", "{pp}"], r"placeholder \{pp\}"),
        ({"parameters": {"tp": [1, 2]}}, ["t.py"], "neither by a {tp} placeholder"),
        ({"parameters": {"tp": {"values": [1], "role": "wizard"}}}, ["t.py", "{tp}"], "unknown role"),
        ({"parameters": {"tp": [1, 2]}, "constraints": ["tp > 8"]}, ["t.py", "{tp}"], "no point"),
        ({"parameters": {}}, ["t.py"], "at least one parameter"),
        ({"parameters": {"tp": [1, 2]}, "bogus": 1}, ["t.py", "{tp}"], "unknown section"),
    ],
)
def test_bad_space_files_fail_with_one_clear_error(spec, command, message):
    with pytest.raises(SpaceError, match=message):
        load_space(spec, command, gpus=8)


def test_space_file_from_yaml_renders_placeholders_flags_and_env(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "gpus: 16\nparameters:\n  tp: [1, 2, 4]\n  pp: {values: [1, 2], role: pp}\n"
        "  recompute: {values: [false, true], role: recompute, flag: --recompute}\n"
        "  zero: {values: [0, 1], env: ZERO}\n"
        "derived:\n  dp: gpus // (tp * pp)\nconstraints: ['dp >= 4']\n"
    )
    s = load_space(path, ["train.py", "--tp={tp}", "--pp", "{pp}", "--dp", "{dp}", "{recompute}"])
    assert s.size == 24 and len(s.valid_points()) == 20
    argv, env = s.render(s.point({"tp": 2, "pp": 2, "recompute": True, "zero": 1}))
    assert argv == ["train.py", "--tp=2", "--pp", "2", "--dp", "4", "--recompute"] and env == {"ZERO": "1"}
    argv, _ = s.render(s.point({"tp": 1, "pp": 1, "recompute": False, "zero": 0}))
    assert argv == ["train.py", "--tp=1", "--pp", "1", "--dp", "16"]


def test_args_give_each_value_its_own_words_or_none():
    """Megatron's recompute knob: nothing for none, one flag and its value for selective, three flags for full;
    its virtual stages as a flag and the count."""
    recompute = {
        "none": [],
        "selective": ["--recompute-granularity", "selective"],
        "full": ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1],
    }
    spec = {
        "gpus": 8,
        "parameters": {
            "recompute": {"values": ["none", "selective", "full"], "role": "recompute", "args": recompute},
            "vp": {"values": [1, 2], "args": {1: [], 2: ["--num-virtual-stages-per-pipeline-rank", 2]}},
        },
    }
    s = load_space(spec, ["pretrain_gpt.py", "{recompute}", "--bf16", "{vp}"])
    assert s.render(s.point({"recompute": "none", "vp": 1}))[0] == ["pretrain_gpt.py", "--bf16"]
    assert s.render(s.point({"recompute": "selective", "vp": 2}))[0] == [
        "pretrain_gpt.py",
        "--recompute-granularity",
        "selective",
        "--bf16",
        "--num-virtual-stages-per-pipeline-rank",
        "2",
    ]
    assert s.render(s.point({"recompute": "full", "vp": 1}))[0][1:] == [
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "uniform",
        "--recompute-num-layers",
        "1",
        "--bf16",
    ]
    spec["parameters"]["recompute"]["values"] = ["none", "selective"]  # a space cut down keeps its mapping
    assert load_space(spec, ["pretrain_gpt.py", "{recompute}", "{vp}"]).size == 4


def test_a_parameter_reaches_the_script_through_a_derived_value():
    """Megatron takes no micro-batch count: it follows from the global and the micro-batch size, so the count's
    parameter reaches the script as the derived micro-batch size (through another derived value too)."""
    spec = {
        "gpus": 8,
        "parameters": {"tp": [1, 2], "microbatches": {"values": [1, 2], "role": "microbatches"}},
        "derived": {"dp": "gpus // tp", "per_rank": "16 // dp", "mbs": "per_rank // microbatches"},
    }
    s = load_space(spec, ["pretrain_gpt.py", "--tensor-model-parallel-size", "{tp}", "--micro-batch-size", "{mbs}"])
    assert s.render(s.point({"tp": 2, "microbatches": 2}))[0][-1] == "2"
    with pytest.raises(SpaceError, match="neither by a {microbatches} placeholder"):
        load_space(spec, ["pretrain_gpt.py", "--tensor-model-parallel-size", "{tp}", "--dp", "{dp}"])


@pytest.mark.parametrize("role", ["tp", "pp", "sequence_parallel", "distributed_optimizer", "recompute"])
def test_a_parallelism_parameter_must_reach_the_script_itself(role):
    """A command that names only `{dp}` (computed from pp) never tells Megatron pp: refused, while the same
    parameter without a role, or with the micro-batch role, may reach the script as a derived value."""
    spec = {"gpus": 8, "parameters": {"x": {"values": [1, 2], "role": role}}, "derived": {"dp": "gpus // x"}}
    command = ["pretrain_gpt.py", "--dp", "{dp}"]
    with pytest.raises(SpaceError, match=f"parameter 'x' \\(role {role}\\) must reach the script by its own {{x}}"):
        load_space(spec, command)
    for other in (None, "microbatches"):
        spec["parameters"]["x"]["role"] = other
        assert load_space(spec, command).size == 2
    spec["parameters"]["x"] = {"values": [1, 2], "role": role, "env": "X"}
    assert load_space(spec, command).size == 2  # `env:` tells the script itself


def test_a_parameter_with_args_needs_its_own_placeholder():
    """`args:` words replace the parameter's own `{vp}` argument: without one they would be dropped silently."""
    spec = {
        "gpus": 8,
        "parameters": {"tp": [1, 2], "vp": {"values": [1, 2], "args": {1: [], 2: ["--virtual", "2"]}}},
        "derived": {"stages": "vp * 2"},
    }
    with pytest.raises(SpaceError, match="parameter 'vp': its `args:` words reach the script only by its own {vp}"):
        load_space(spec, ["pretrain_gpt.py", "{tp}", "--stages", "{stages}"])
    assert load_space(spec, ["pretrain_gpt.py", "{tp}", "{vp}"]).size == 4


# pruning rules ----------------------------------------------------------------------------------------


def test_oom_with_recompute_skips_the_point_without_it():
    s = space({"mbs": [1, 2, 4], "recompute": {"values": [False, True], "role": "recompute"}})
    fake = Fake(lambda v: (100 / int(v["mbs"]), int(v["mbs"]) * (30 if v["recompute"] == "True" else 60)))
    result = run_search(s, fake, algorithm="grid")
    assert len(fake.calls) == 5  # mbs=4 OOMs even with recompute: mbs=4 without it is never run
    pruned = [r for r in result.records if r.outcome.status == "pruned"]
    assert [r.params for r in pruned] == [{"mbs": 4, "recompute": False}]
    assert "out of memory even with recompute" in pruned[0].outcome.reason
    assert result.best.params == {"mbs": 2, "recompute": True}


def test_oom_with_sequence_parallelism_skips_the_point_without_it():
    s = space({"tp": [1, 2], "sp": {"values": ["off", "on"], "role": "sequence_parallel"}})
    fake = Fake(lambda v: (10, 200 if v["tp"] == "1" else 50))
    result = run_search(s, fake, algorithm="grid")
    assert {"tp": "1", "sp": "off"} not in [{k.lstrip("-"): x for k, x in c.items()} for c in fake.calls]
    assert [r.params for r in result.records if r.outcome.status == "pruned"] == [{"tp": 1, "sp": "off"}]


def test_fitting_without_the_distributed_optimizer_derives_the_variant_with_it():
    s = space({"tp": [1, 2], "zero": {"values": [0, 1], "role": "distributed_optimizer", "env": "ZERO"}})
    fake = Fake(lambda v: (10 * int(v["tp"]), 200 if v["tp"] == "1" and v["ZERO"] == "0" else 50))
    result = run_search(s, fake, algorithm="grid")
    by = {tuple(r.params.values()): r.outcome for r in result.records}
    assert by[(2, 1)].status == "derived" and by[(2, 1)].iteration_ns == 20 and by[(2, 1)].source == "rule"
    assert by[(1, 1)].status == "ok"  # the plain optimizer did not fit: the variant is evaluated
    assert len(fake.calls) == 3


def test_without_pipelining_larger_microbatch_counts_are_skipped_once_one_fits():
    s = space({"pp": {"values": [1, 2], "role": "pp"}, "mb": {"values": [1, 2, 4, 8], "role": "microbatches"}})
    fake = Fake(lambda v: (100 / int(v["pp"]) + int(v["mb"]), 200 if int(v["mb"]) < 2 else 10))
    result = run_search(s, fake, algorithm="grid")
    pruned = sorted(tuple(r.params.values()) for r in result.records if r.outcome.status == "pruned")
    assert pruned == [(1, 4), (1, 8)]  # pp=1: mb=2 fits, so 4 and 8 are skipped; pp=2 evaluates all
    assert len(fake.calls) == 6


# resume -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_interrupted_search_resumes_with_only_the_rest(tmp_path):
    s = space({"tp": [1, 2, 4], "mbs": [1, 2, 4, 8]})
    figures = lambda v: (int(v["tp"]) * 10 + int(v["mbs"]), 10)  # noqa: E731
    sid = search_id(s, "grid", "time", 0, "", None)
    log = SearchLog(sid, tmp_path / "wh.duckdb")
    log.open(s.digest(), s.command, {})
    first = Fake(figures, fail_after=5)
    with pytest.raises(RuntimeError, match="interrupted"):
        run_search(s, first, algorithm="grid", log=log)
    assert len(log.points()) == 5
    rest = Fake(figures)
    result = run_search(s, rest, algorithm="grid", log=SearchLog(sid, tmp_path / "wh.duckdb"))
    assert len(rest.calls) == 7 and not set(evaluated(first)) & set(evaluated(rest))
    assert len(result.records) == 12 and result.best.params == {"tp": 1, "mbs": 1}
    with pytest.raises(ValueError, match="another space"):
        SearchLog(sid, tmp_path / "wh.duckdb").open("other", s.command, {})


@pytest.mark.slow
def test_identical_commands_are_never_evaluated_twice_across_searches(tmp_path):
    s = space({"tp": [1, 2], "mbs": [1, 2]})
    fake = Fake(lambda v: (int(v["tp"]) + int(v["mbs"]), 10))
    log = SearchLog("a", tmp_path / "wh.duckdb")
    log.open(s.digest(), s.command, {})
    run_search(s, fake, algorithm="grid", log=log)
    other = SearchLog("b", tmp_path / "wh.duckdb")
    other.open(s.digest(), s.command, {})
    result = run_search(s, fake, algorithm="random", log=other)
    assert len(fake.calls) == 4 and {r.outcome.source for r in result.records} == {"command-cache"}


@pytest.mark.slow
def test_a_search_under_another_host_factor_or_cluster_file_predicts_afresh(tmp_path, monkeypatch):
    """The prediction salt holds the host factor as resolved (unset and 0 are one) and the cluster spec file's
    contents, not only its name: a search that would predict otherwise reuses no logged outcome."""
    from maya.search import evaluator_salts

    spec = tmp_path / "c.json"
    spec.write_text(json.dumps({"name": "c", "hardware": "h100-sxm", "gpus_per_node": 8, "pcie": {"generation": 5}}))
    monkeypatch.delenv("MAYA_HOST_FACTOR", raising=False)
    salt = evaluator_salts("h100-sxm", 8, "auto", str(spec)).prediction
    monkeypatch.setenv("MAYA_HOST_FACTOR", "0")
    assert evaluator_salts("h100-sxm", 8, "auto", str(spec)).prediction == salt
    monkeypatch.setenv("MAYA_HOST_FACTOR", "1")
    assert evaluator_salts("h100-sxm", 8, "auto", str(spec)).prediction != salt
    monkeypatch.delenv("MAYA_HOST_FACTOR")
    spec.write_text(spec.read_text().replace('"generation": 5', '"generation": 4'))
    assert evaluator_salts("h100-sxm", 8, "auto", str(spec)).prediction != salt
    assert evaluator_salts("h100-sxm", 8, "auto", "dgx-h100") != evaluator_salts("h100-sxm", 8, "auto", None)


@pytest.mark.slow
def test_an_edited_script_captures_anew_and_retrained_estimators_or_predictor_predict_anew(tmp_path, monkeypatch):
    """The capture salt holds the script's contents (and the emulator's), the prediction salt the estimator version
    `auto` resolves to and the predictor's digest: an edited script captures afresh; retrained estimators or an
    edited predictor keep the capture and predict it again."""
    import maya.api
    from maya.core.warehouse import insert_row, transaction
    from maya.search import evaluator_salts, script_digest

    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    warehouse = str(tmp_path / "wh.duckdb")

    def salts(durations="auto"):
        return evaluator_salts("h100-sxm", 8, durations, None, script=script_digest([str(script)]), warehouse=warehouse)

    first = salts()
    assert salts() == first and first.estimator_version is None
    script.write_text("print(2)\n")
    edited = salts()
    assert edited.capture != first.capture and edited.prediction == first.prediction
    with transaction(warehouse) as con:
        for version, sha in (("v1", "a" * 64), ("v2", "b" * 64)):
            insert_row(con, "estimator_versions", version_row(version, f"{version}.tar", sha, 1))
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v1"})
    on_v1 = salts()
    assert on_v1.prediction != edited.prediction and on_v1.capture == edited.capture
    assert on_v1.estimator_version == "v1"  # what the points' PredictOptions name, not the moving alias
    with transaction(warehouse) as con:
        con.execute("UPDATE estimator_aliases SET version = 'v2'")
    assert salts().prediction != on_v1.prediction and salts().estimator_version == "v2"
    roofline = salts("roofline")
    with transaction(warehouse) as con:
        con.execute("UPDATE estimator_aliases SET version = 'v1'")
    assert salts("roofline") == roofline and roofline.estimator_version is None  # no estimators used
    monkeypatch.setattr(maya.api, "predictor_digest", lambda: "edited simulator")
    assert salts().prediction != on_v1.prediction and salts().capture == on_v1.capture


def test_an_unreadable_warehouse_is_an_error_not_an_empty_salt(tmp_path):
    """A warehouse that cannot be read raises instead of hashing as "no estimator version" (which would price with
    the roofline label while a worker prices with the estimators)."""
    import duckdb

    from maya.search import evaluator_salts

    broken = tmp_path / "wh.duckdb"
    broken.write_bytes(b"not a duckdb file" * 100)
    with pytest.raises((duckdb.Error, OSError)):
        evaluator_salts("h100-sxm", 8, "auto", None, warehouse=str(broken))
    assert evaluator_salts("h100-sxm", 8, "roofline", None, warehouse=str(broken)).estimator_version is None


def test_the_predictor_digest_covers_the_shipped_data_the_estimators_fit(tmp_path, monkeypatch):
    """`predictor_digest` changes with a public kernel measurement (the attention model is fitted on them when
    loaded), not with their documentation."""
    import shutil

    import maya.core.paths
    from maya.api.stages import PREDICTOR_DATA, predictor_digest

    data = tmp_path / "data"
    for folder in PREDICTOR_DATA:
        shutil.copytree(maya.core.paths.data_dir() / folder, data / folder)
    monkeypatch.setattr(maya.core.paths, "data_dir", lambda: data)
    predictor_digest.cache_clear()
    try:
        before = predictor_digest()
        (data / "kernels_public" / "README.md").write_text("edited")
        assert predictor_digest.__wrapped__() == before
        measurements = next((data / "kernels_public").rglob("*.csv"))
        measurements.write_text(measurements.read_text() + "\n")
        assert predictor_digest.__wrapped__() != before
    finally:
        predictor_digest.cache_clear()


def test_script_digest_finds_a_local_module_without_importing_its_package(tmp_path, monkeypatch):
    """`-m pkg.train` resolves from the working directory, as the emulated ranks run it, without importing `pkg`
    (whose `__init__` may fail outside the job); the module's folder is hashed; what cannot be found is `UNRESOLVED`,
    never an exception."""
    import sys

    from maya.search import UNRESOLVED, script_digest

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (pkg / "train.py").write_text("print(1)\n")
    (pkg / "__main__.py").write_text("print(0)\n")
    (tmp_path / "localmod.py").write_text("print(3)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["/nonexistent-script-dir", *[p for p in sys.path if p not in ("", ".")]])
    first = script_digest(["-m", "pkg.train", "--steps", "1"])
    assert first != UNRESOLVED and "pkg" not in sys.modules
    assert script_digest(["-m", "localmod"]) != UNRESOLVED
    assert script_digest(["-m", "pkg"]) not in (UNRESOLVED, first)  # a package runs its __main__
    (pkg / "util.py").write_text("X = 1\n")  # a module beside it, which it may import
    assert script_digest(["-m", "pkg.train"]) != first
    assert script_digest([str(pkg / "train.py")]) == script_digest(["-m", "pkg.train"])
    assert script_digest(["-m", "pkg.missing"]) == UNRESOLVED
    assert script_digest(["-m", "localmod.sub"]) == UNRESOLVED
    assert script_digest(["-m", "json.tool"]) != UNRESOLVED
    assert script_digest([str(tmp_path / "gone.py")]) == UNRESOLVED


class Salted(Fake):
    """A fake with the salts of a search; every point it evaluates names its capture `runs/<command hash>`."""

    def __init__(self, figures, prediction="p1"):
        from maya.search import Salts

        super().__init__(figures)
        self.salts, self.tasks = Salts("c1", prediction, None), []

    def __call__(self, task, known):
        self.tasks.append(task)
        outcome = super().__call__(task, known)
        outcome.run_dir = f"runs/{task.command_hash(self.salts.capture)}"
        outcome.trace_hash = outcome.run_dir if outcome.status == "ok" else None  # oom: while emulating
        return outcome


@pytest.mark.slow
def test_a_changed_predictor_predicts_the_earlier_captures_again(tmp_path):
    """Across searches, a point whose command was captured alike but predicted otherwise is evaluated again from
    that capture (its task names it); one predicted alike is answered from the command cache; one that ran out of
    memory while emulating is not emulated again."""
    s = space({"tp": [1, 2], "mbs": [1, 2]})
    figures = lambda v: (int(v["tp"]) + int(v["mbs"]), 200 if v["tp"] == "2" and v["mbs"] == "2" else 10)  # noqa: E731
    wh = tmp_path / "wh.duckdb"

    def search(fake, sid):
        log = SearchLog(sid, wh)
        log.open(s.digest(), s.command, {})
        return run_search(s, fake, algorithm="grid", log=log)

    first = Salted(figures)
    search(first, "a")
    assert len(first.tasks) == 4 and all(t.capture is None for t in first.tasks)
    same = Salted(figures)
    result = search(same, "b")
    assert same.tasks == [] and {r.outcome.source for r in result.records} == {"command-cache"}
    edited = Salted(figures, prediction="p2")
    result = search(edited, "c")
    assert len(edited.tasks) == 3 and all(t.capture == f"runs/{t.command_hash('c1')}" for t in edited.tasks)
    oom = next(r for r in result.records if r.params == {"tp": 2, "mbs": 2})
    assert oom.outcome.status == "oom" and oom.outcome.source == "command-cache"
    again = Salted(figures, prediction="p2")
    assert {r.outcome.source for r in search(again, "d").records} == {"command-cache"} and again.tasks == []


@pytest.mark.slow
def test_a_trace_predicted_again_from_its_capture_answers_its_twins(tmp_path):
    """After a predictor change, points whose earlier captures hold one trace are predicted once: the first from
    its capture, the others from the trace cache."""
    s = space({"tp": [1, 2], "mbs": [1, 2]})
    wh = tmp_path / "wh.duckdb"

    class OneTrace:
        def __init__(self, prediction: str) -> None:
            self.salts, self.sources = Salts("c1", prediction, None), []

        def __call__(self, task, known):
            source = "trace-cache" if "same" in known else "capture-cache" if task.capture else "evaluated"
            self.sources.append(source)
            run_dir = f"runs/{task.command_hash(self.salts.capture)}"
            return Outcome(
                "ok", 10, 1, 0.5, world_size=task.world_size, source=source, trace_hash="same", run_dir=run_dir
            )

    for sid, prediction in (("a", "p1"), ("b", "p2")):
        evaluator = OneTrace(prediction)
        log = SearchLog(sid, wh)
        log.open(s.digest(), s.command, {})
        run_search(s, evaluator, algorithm="grid", log=log)
    assert evaluator.sources.count("capture-cache") == 1 and evaluator.sources.count("trace-cache") == 3


def test_maya_evaluator_predicts_a_named_capture_with_the_resolved_version(tmp_path, monkeypatch):
    """A task naming an earlier complete capture is predicted from it, not emulated, and with the estimator version
    the search resolved (a `latest` that moves mid-search cannot relabel it)."""
    from types import SimpleNamespace

    import maya.api
    import maya.search.evaluate
    from maya.emulator.capture_cache import CaptureCache
    from maya.search import MayaEvaluator, Salts, Task

    task = Task("k", ("train.py",), (), 8)
    salts = Salts("c1", "p1", "v7")
    earlier = tmp_path / "earlier" / "runs" / task.command_hash("c1")
    earlier.mkdir(parents=True)
    asked = []

    def emulate(*args, **kwargs):
        raise AssertionError("emulated again")

    def predict(run_dir, options):
        asked.append((run_dir, options.estimator_version))
        return SimpleNamespace(oom=False, iteration_ns=5.0, peak_memory_bytes=1, mfu=0.1, hfu=0.2, oom_reason=None)

    monkeypatch.setattr(CaptureCache, "lookup", lambda self, key: p if (p := self.path(key)).is_dir() else None)
    monkeypatch.setattr(maya.api, "capture", emulate)
    monkeypatch.setattr(maya.api, "predict", predict)
    monkeypatch.setattr(maya.search.evaluate, "trace_digest", lambda run_dir: "t")
    evaluator = MayaEvaluator(str(tmp_path / "out"), salts, "h100-sxm", 8, "auto")
    outcome = evaluator(Task("k", ("train.py",), (), 8, capture=str(earlier)), {})
    assert asked == [(earlier, "v7")]
    assert outcome.status == "ok" and outcome.source == "capture-cache" and outcome.run_dir == str(earlier)
    assert outcome.command_hash == task.command_hash("c1") and outcome.prediction_hash not in (None, "")


def test_evaluators_are_told_the_traces_already_predicted():
    s = space({"tp": [1, 2, 4]})
    seen = []

    def evaluator(task, known):
        seen.append(set(known))
        return Outcome("ok", 10, 1, 0.5, world_size=8, trace_hash="same")

    run_search(s, evaluator, algorithm="grid")
    assert seen == [set(), {"same"}, {"same"}]


# algorithms -------------------------------------------------------------------------------------------


def synthetic_space():
    """8 × 8 × 6 × 4 = 1536 points, a constraint, a unique optimum at a=5, b=2, c=3, d=1."""
    parameters = {"a": list(range(8)), "b": list(range(8)), "c": list(range(6)), "d": list(range(4))}
    return space(parameters, constraints=["a + b + c + d <= 18"])


def bowl(v):
    a, b, c, d = (int(v[k]) for k in "abcd")
    return 1000 + 7 * (a - 5) ** 2 + 5 * (b - 2) ** 2 + 3 * (c - 3) ** 2 + 11 * (d - 1) ** 2 + 2 * abs(a - b - 3), 10


@pytest.mark.slow
def test_grid_visits_every_valid_point():
    s = synthetic_space()
    fake = Fake(bowl)
    result = run_search(s, fake, algorithm="grid")
    assert len(fake.calls) == len(s.valid_points()) >= 500
    assert result.best.params == {"a": 5, "b": 2, "c": 3, "d": 1}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cmaes_finds_the_grid_optimum_with_under_30_percent_of_the_evaluations(seed):
    s = synthetic_space()
    fake = Fake(bowl)
    result = run_search(s, fake, algorithm="cmaes", seed=seed)
    assert result.best.params == {"a": 5, "b": 2, "c": 3, "d": 1}
    assert len(fake.calls) <= 0.3 * len(s.valid_points())


def test_cmaes_treats_out_of_memory_points_as_penalties():
    s = synthetic_space()
    fake = Fake(lambda v: (bowl(v)[0], 200 if int(v["a"]) >= 6 else 10))
    result = run_search(s, fake, algorithm="cmaes")
    assert result.best.params == {"a": 5, "b": 2, "c": 3, "d": 1}


def ridge(v):
    """Valid only on a == b, so every one-parameter move off a point leaves the space; the optimum is
    at a = b = 8, c = 2, d = 6, and points with d >= 7 do not fit."""
    a, c, d = (int(v[k]) for k in "acd")
    return 1000 + 9 * (a - 8) ** 2 + 5 * (c - 2) ** 2 + 7 * (d - 6) ** 2 + 40 * (a < 4) * (4 - a), 200 if d >= 7 else 10


@pytest.mark.parametrize("seed", [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 5))])
def test_cmaes_follows_a_constraint_that_couples_two_parameters(seed):
    s = space(
        {"a": list(range(12)), "b": list(range(12)), "c": list(range(6)), "d": list(range(8))}, constraints=["a == b"]
    )
    fake = Fake(ridge)
    result = run_search(s, fake, algorithm="cmaes", seed=seed)
    assert result.best.params == {"a": 8, "b": 8, "c": 2, "d": 6}
    assert len(fake.calls) <= 0.3 * len(s.valid_points())


def test_cmaes_budget_can_end_inside_a_generation():
    fake = Fake(bowl)
    result = run_search(synthetic_space(), fake, algorithm="cmaes", budget=5)
    assert len(fake.calls) == 5 and result.evaluations == 5


def test_default_budget_stays_within_30_percent():
    s = space({"a": list(range(7)), "b": list(range(7))})  # 49 points: 30% is 14.7, so 14
    fake = Fake(lambda v: (1000 + (int(v["a"]) * 7 + int(v["b"]) * 13) % 17, 10))
    run_search(s, fake, algorithm="random")
    assert len(fake.calls) == 14


def test_random_search_respects_its_budget():
    fake = Fake(bowl)
    result = run_search(synthetic_space(), fake, algorithm="random", budget=20)
    assert len(fake.calls) == 20 and result.evaluations == 20


def test_objectives_use_gpus_price_and_tokens():
    s = space(
        {"gpus": [8, 16], "mbs": [1, 2]}, command=["t.py", "--mbs", "{mbs}"], tokens_per_iteration="gpus * mbs * 1000"
    )
    fake = Fake(lambda v: (3.6e12 / int(v["mbs"]), 10))  # one hour per iteration at mbs=1
    result = run_search(s, fake, algorithm="grid", objective="tokens-per-dollar", price_per_gpu_hour=2.0)
    best = result.best
    assert best.params == {"gpus": 8, "mbs": 2} or best.params == {"gpus": 16, "mbs": 2}
    assert best.cost == pytest.approx(0.5 * best.params["gpus"] * 2.0)
    assert best.objective == pytest.approx(best.cost / best.tokens)
    assert json.loads(json.dumps(best.outcome.to_dict()))["status"] == "ok"
