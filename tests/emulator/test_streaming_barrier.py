"""MosaicML Streaming's shared-memory barrier in an emulated rank (a stand-in package with its module path: no
emulator, no Streaming needed)."""

import sys

import pytest

from maya.emulator import streaming_barrier

BARRIER = '''
class SharedBarrier:
    """As Streaming's: waits until `num_procs` processes have entered (here: counts the calls that wait)."""

    waited = 0

    def __call__(self, num_procs):
        SharedBarrier.waited += 1
'''


@pytest.fixture
def streaming(monkeypatch, tmp_path):
    """A `streaming.base.shared.barrier` module on sys.path, not yet imported; sys.meta_path restored after."""
    package = tmp_path / "streaming" / "base" / "shared"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "barrier.py").write_text(BARRIER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in ("streaming", "streaming.base", "streaming.base.shared", streaming_barrier.MODULE):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ("streaming", "streaming.base", "streaming.base.shared", streaming_barrier.MODULE):
        sys.modules.pop(name, None)


def test_a_rank_with_local_peers_fails_at_the_barrier_naming_it_and_the_way_out(streaming, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    streaming_barrier.install()
    from streaming.base.shared.barrier import SharedBarrier

    with pytest.raises(streaming_barrier.StreamingBarrierWithoutPeers, match="all 8 local ranks") as e:
        SharedBarrier()(16)
    assert "16 dataloader worker processes" in str(e.value) and "finetuning" in str(e.value)
    assert SharedBarrier.waited == 0


def test_a_rank_alone_on_its_node_waits_as_streaming_does(streaming, monkeypatch):
    """One local rank: its own workers are all the barrier waits for, and the barrier is Streaming's."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    import streaming.base.shared.barrier as imported_first

    streaming_barrier.install()  # already imported: guarded in place
    imported_first.SharedBarrier()(2)
    assert imported_first.SharedBarrier.waited == 1
