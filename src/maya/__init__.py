"""Maya: how fast, how much memory, how much money, and which training configuration is best."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("maya")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
