"""opbench: operator-level micro-benchmarks (GEMM, conv, LSTM) and a tiling autotuner."""

from importlib.metadata import PackageNotFoundError, version

from opbench.tiles import Tiles

try:
    __version__ = version("opbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Tiles", "__version__"]
