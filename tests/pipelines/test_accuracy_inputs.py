"""The accuracy check's inputs digest: what decides whether a stored evaluation of a version still holds."""

from pathlib import Path

from maya.pipelines import accuracy, ground_truth
from maya.pipelines.resources import DataSources


def test_the_inputs_digest_holds_the_host_factor_the_workloads_resolve_to(tmp_path, monkeypatch):
    """The ground-truth workloads are predicted under the host factor the switch (else their default cluster)
    resolves to: another factor is another evaluation, the same one spelled otherwise is not."""
    workload = ground_truth.Workload("h100-sxm", "w", 1e6, Path("trace"))
    monkeypatch.setattr(ground_truth, "workloads", lambda root: [workload])
    sources = DataSources(profiles_dir=str(tmp_path), ground_truth_dir=str(tmp_path), neusight=False)
    monkeypatch.delenv("MAYA_HOST_FACTOR", raising=False)
    default = accuracy.load_inputs(sources).digest
    monkeypatch.setenv("MAYA_HOST_FACTOR", "0.0")
    assert accuracy.load_inputs(sources).digest == default
    monkeypatch.setenv("MAYA_HOST_FACTOR", "1")
    assert accuracy.load_inputs(sources).digest != default
