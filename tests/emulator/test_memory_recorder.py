"""The rank's recorder of torch's allocator history (`maya.emulator.memory_history`) on a stand-in torch: the
launcher passes the folder only with the flag; a script's own history calls are kept and win; the snapshot is
written after the capture, not at all when a signal stopped the rank (the sidecar says why); a torch without
`torch.cuda._lazy_call` is refused by name. `test_memory_history.py` runs it in real emulations."""

import json
import pickle
from types import SimpleNamespace

import pytest

from maya.core import settings
from maya.emulator import launcher
from maya.emulator.memory_history import MAX_ENTRIES, Recorder, sidecar_path, snapshot_path


class FakeTorch:
    """torch's functions the recorder uses, keeping their calls."""

    __version__ = "2.15.0"
    __file__ = "/env/torch/__init__.py"

    def __init__(self, lazy: bool = True):
        self.calls: list[tuple] = []
        self.lazy: list = []
        memory = SimpleNamespace(
            _record_memory_history=lambda *a, **k: self.calls.append(("record", a, k)),
            reset_peak_memory_stats=lambda *a, **k: self.calls.append(("reset", a, k)),
            _snapshot=lambda: {"device_traces": [[]], "segments": []},
        )
        self.cuda = SimpleNamespace(memory=memory, reset_peak_memory_stats=memory.reset_peak_memory_stats)
        if lazy:
            self.cuda._lazy_call = self.lazy.append


def test_the_rank_gets_the_folder_only_with_the_flag(tmp_path, monkeypatch):
    (tmp_path / "preload.txt").write_text("")  # the built stubs' preload list (none here)
    monkeypatch.setenv(settings.EMU_MEMORY_HISTORY.name, str(tmp_path / "stale"))  # a caller's own is not passed on
    env = launcher._rank_env(tmp_path, tmp_path, tmp_path, tmp_path, 0, launcher.Topology(), 1234, None)
    assert settings.EMU_MEMORY_HISTORY.name not in env
    env = launcher._rank_env(
        tmp_path, tmp_path, tmp_path, tmp_path, 0, launcher.Topology(), 1234, None, memory_history=tmp_path / "h"
    )
    assert env[settings.EMU_MEMORY_HISTORY.name] == str(tmp_path / "h")


def test_recording_starts_at_cudas_initialisation_and_the_snapshot_is_written_with_its_sidecar(tmp_path):
    torch = FakeTorch()
    recorder = Recorder(torch, tmp_path, 3)
    assert torch.calls == [] and len(torch.lazy) == 1
    torch.lazy[0]()  # CUDA initialises
    assert torch.calls == [("record", ("all",), {"context": "alloc", "stacks": "python", "max_entries": MAX_ENTRIES})]
    torch.cuda.reset_peak_memory_stats()  # the peak's reset is the allocator's business, not the history's
    recorder.write()
    assert pickle.loads(snapshot_path(tmp_path, 3).read_bytes()) == {"device_traces": [[]], "segments": []}
    sidecar = json.loads(sidecar_path(tmp_path, 3).read_text())
    assert sidecar["skipped"] is None and sidecar["script_calls"] == []
    assert torch.calls[-1] == ("reset", (), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank3.json", "rank3.pickle"]


def test_a_scripts_call_before_cudas_initialisation_wins_and_is_kept(tmp_path):
    torch = FakeTorch()
    recorder = Recorder(torch, tmp_path, 0)
    torch.cuda.memory._record_memory_history(max_entries=50)
    torch.lazy[0]()
    assert torch.calls == [("record", (), {"max_entries": 50})]  # Maya's start did not override it
    recorder.write()
    sidecar = json.loads(sidecar_path(tmp_path, 0).read_text())
    assert sidecar["script_calls"][0]["kwargs"] == {"max_entries": 50}
    assert "configured the allocator's history itself" in sidecar["skipped"]
    assert not snapshot_path(tmp_path, 0).exists()


def test_a_rank_stopped_by_a_signal_writes_the_sidecar_alone_with_the_reason(tmp_path):
    torch = FakeTorch()
    recorder = Recorder(torch, tmp_path, 0)
    torch.lazy[0]()
    recorder.write("SIGTERM")
    assert json.loads(sidecar_path(tmp_path, 0).read_text())["skipped"].startswith("the rank was stopped by SIGTERM")
    assert not snapshot_path(tmp_path, 0).exists()


def test_a_torch_without_lazy_call_is_refused_by_name(tmp_path):
    with pytest.raises(RuntimeError, match=r"torch 2.15.0 has no torch.cuda._lazy_call \(a private torch API"):
        Recorder(FakeTorch(lazy=False), tmp_path, 0)
