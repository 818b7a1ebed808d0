"""The `maya` command line: one thin module per command group (parse, call, print)."""

from .app import app

__all__ = ["app"]
