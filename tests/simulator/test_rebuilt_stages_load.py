"""A run whose interior pipeline stages cannot be rebuilt when read (`simulator/trace.load`)."""

import pytest

from maya.simulator.trace import load
from maya.simulator.trace_builder import gpt_3d


def test_a_run_that_cannot_be_rebuilt_fails_naming_it(tmp_path):
    """Attrs asking for stage 3 rebuilt from stage 1, whose exchanges (the synthetic job's, not Megatron's 1F1B)
    cannot be cut: `load` fails naming the run and what to do, not with the schedule's own error."""
    rebuild = {"stages": 6, "stride": 1, "from": 1, "checked": [2, 4], "microbatches": 3, "rebuilt": [3]}
    run = gpt_3d(1, 6, 1, layers=1, microbatches=3, iterations=2, hidden=64, seq=16).write(
        tmp_path / "run", attrs={"stage_rebuild": rebuild}
    )
    with pytest.raises(ValueError, match=r"^run \w+ \(.*run\): its interior pipeline stages cannot be rebuilt") as e:
        load(run)
    assert "follow neither the 1F1B schedule nor the interleaved one" in str(e.value) and "--no-dedup" in str(e.value)
