"""The CLI tests read launch commands in their own process: a child that imports torch for each `maya emulate --
torchrun ...` took 15 s under load (`read_apart`'s own tests are in tests/emulator/test_launch_commands.py)."""

import pytest


@pytest.fixture(autouse=True)
def launches_read_in_process(monkeypatch):
    """`maya emulate` reads a launch with `read` here, not `read_apart` (emulate.py imports it when it reads)."""
    from maya.emulator import launch_commands

    monkeypatch.setattr(launch_commands, "read_apart", launch_commands.read)
