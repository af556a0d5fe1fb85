"""A randomized memory layout for each worker process of a sweep (`--processes`), after Stabilizer
(Curtsinger and Berger, ASPLOS 2013) and Mytkowicz et al. (ASPLOS 2009): where a process's memory lands
moves a kernel's time by up to tens of percent, and a process keeps its layout for its whole life, so a
case measured in one process measures one layout. Each worker gets

- an environment of a random size (OPBENCH_LAYOUT_PAD: it shifts where the stack starts),
- a first heap allocation of a random size, kept for the process's life (it shifts later small
  allocations), and
- every input buffer copied to a random cache-line offset within a page (place()): an offset in
  [0, 4096) in steps of 64 bytes, so vector loads stay line-aligned while the buffers' page and
  cache-set positions vary.

A framework that copies the inputs into its own tensors places those itself; the heap and environment
still move. The draws are recorded per process (the header's backends.NAME.processes) and per round
(time.per_round[].offsets).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import numpy as np

from opbench.documents import LayoutDict
from opbench.dtypes import Array, Inputs

PAGE = 4096
LINE = 64
ENV_PAD_MAX = 4096
HEAP_PAD_MAX = 1 << 16
ENV_LAYOUT = "OPBENCH_LAYOUT"
ENV_PAD = "OPBENCH_LAYOUT_PAD"

_KEPT: list[Any] = []  # the heap pad, alive as long as the worker


def draw(rng: random.Random | None = None) -> LayoutDict:
    """One process's layout: the environment's extra bytes, the heap pad and the seed of its buffer
    offsets. Fresh randomness unless `rng` is given (each run samples new layouts)."""
    r = rng or random.SystemRandom()
    return {
        "env_pad": r.randrange(ENV_PAD_MAX),
        "heap_pad": r.randrange(HEAP_PAD_MAX),
        "offset_seed": r.randrange(1 << 31),
    }


def worker_environment(layout: LayoutDict) -> dict[str, str]:
    """The environment variables a worker with `layout` starts with."""
    return {ENV_LAYOUT: json.dumps(layout, allow_nan=False), ENV_PAD: "x" * int(layout["env_pad"])}


def apply() -> random.Random | None:
    """In a worker: allocate the heap pad its layout names and return the generator of its buffer
    offsets; None in a process started without a layout."""
    text = os.environ.get(ENV_LAYOUT)
    if not text:
        return None
    layout = json.loads(text)
    _KEPT.append(bytearray(int(layout["heap_pad"])))
    return random.Random(int(layout["offset_seed"]))


def _placeable(value: object) -> bool:
    return isinstance(value, np.ndarray) and value.flags.c_contiguous and value.nbytes > 0


def place(array: Array, offset: int) -> Array:
    """A copy of `array` whose data starts `offset` bytes into a page (C-contiguous arrays only; anything
    else is returned as it is)."""
    if not _placeable(array):
        return array
    raw = np.empty(array.nbytes + PAGE + offset, dtype=np.uint8)
    start = (-raw.ctypes.data) % PAGE + offset
    placed = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    return placed


def place_inputs(inputs: Inputs, rng: random.Random | None) -> tuple[Inputs, dict[str, int]]:
    """The inputs each copied to a random line offset within a page (no change without `rng`), and the
    offsets drawn, by input name."""
    if rng is None:
        return inputs, {}
    placed, offsets = {}, {}
    for name, value in inputs.items():
        if _placeable(value):
            offsets[name] = LINE * rng.randrange(PAGE // LINE)
            placed[name] = place(value, offsets[name])
        else:
            placed[name] = value
    return placed, offsets


def offset_in_page(array: Array) -> int:
    """Where `array`'s data starts within its page (tests, and records that check it)."""
    return int(array.ctypes.data % PAGE)
