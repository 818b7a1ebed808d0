"""Helpers the tests share (fixtures stay in conftest.py)."""

import hashlib
from pathlib import Path


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> content hash of every file under `root` (to prove nothing changed)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
