"""Files a peer removed after a barrier, as ranks behind it would see them (no emulator needed)."""

import os
import time

import pytest
import torch.distributed as dist

from maya.emulator import peer_files


@pytest.fixture
def as_rank(monkeypatch, tmp_path):
    """Install peer_files as rank `rank` over a barrier that returns at once; os and torch.distributed are restored
    after the test."""
    monkeypatch.setattr(os, "remove", os.remove)
    monkeypatch.setattr(os, "unlink", os.unlink)
    monkeypatch.setattr(os.path, "exists", os.path.exists)
    monkeypatch.setattr(dist, "barrier", lambda *args, **kwargs: None)
    monkeypatch.setattr(dist.distributed_c10d, "barrier", dist.distributed_c10d.barrier)
    return lambda rank: peer_files.install(tmp_path / "mailbox", rank)  # made by install when missing


def test_a_signal_file_removed_after_a_barrier_exists_for_peers_behind_it(as_rank, tmp_path):
    """Local rank 0 writes, passes barrier 1, removes: a peer that has not passed barrier 1 sees the file (it
    waits for it there), one past it does not, and rank 0 itself sees its own removal."""
    signal = tmp_path / "signal"
    zero = as_rank(0)
    signal.write_text("done")
    dist.barrier()
    os.remove(signal)
    assert not os.path.exists(signal)  # rank 0's own view: gone
    as_rank(1)
    assert os.path.exists(signal) and os.path.exists(str(signal))
    assert not signal.exists()  # pathlib and everything else stay the operating system's
    dist.barrier()
    assert not os.path.exists(signal)
    assert zero.barriers_ns and (tmp_path / "mailbox" / peer_files.JOURNAL).exists()


def test_files_written_after_a_later_barrier_or_removed_before_one_are_not_seen(as_rank, tmp_path):
    """A file rank 0 wrote after barrier 1 does not exist yet for a rank before it; a temporary file written and
    removed between two barriers is never journalled."""
    late, temp = tmp_path / "late", tmp_path / "temp"
    as_rank(0)
    temp.write_text("scratch")
    os.unlink(temp)
    dist.barrier()
    time.sleep(0.02)  # past a tick of a kernel whose file clock is coarse (module docstring)
    late.write_text("after barrier 1")
    dist.barrier()
    os.remove(late)
    as_rank(1)
    assert not os.path.exists(late) and not os.path.exists(temp)
    dist.barrier()
    assert os.path.exists(late)  # past barrier 1, before barrier 2: rank 0 had written it and not yet removed it
    journal = (tmp_path / "mailbox" / peer_files.JOURNAL).read_text()
    assert str(late) in journal and str(temp) not in journal


def test_removing_a_missing_file_fails_as_before(as_rank, tmp_path):
    as_rank(0)
    with pytest.raises(FileNotFoundError):
        os.remove(tmp_path / "missing")
    assert not (tmp_path / "mailbox" / peer_files.JOURNAL).exists()
