"""What every plot of a report shares: matplotlib set up for files only, the Plot (SVG and PNG bytes) and
how a figure becomes one (`render`), under a name safe as a file name."""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display: files only
# Labels come from results files: text, never mathtext ('$' in a backend name would be parsed, and fail).
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


@dataclass(frozen=True)
class Plot:
    name: str  # file stem, e.g. "gemm-fp32-batch-gflops"
    title: str
    svg: bytes
    png: bytes


def file_stem(name: str) -> str:
    """A plot name safe as a file name (it is built from op, dtype and axis names, which come from results
    files): letters, digits, '.', '_' and '-'; a name that had to change gets a hash, so two never collide."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80]
    if clean != name:
        clean = f"{clean}-{hashlib.sha256(name.encode()).hexdigest()[:8]}".lstrip("-")
    return clean


def render(fig: Figure, name: str, title: str) -> Plot:
    name = file_stem(name)
    fig.tight_layout()
    svg, png = io.BytesIO(), io.BytesIO()
    fig.savefig(svg, format="svg", metadata={"Date": None})  # no timestamp: reproducible files
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return Plot(name, title, svg.getvalue(), png.getvalue())
