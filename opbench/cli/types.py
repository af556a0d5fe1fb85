"""argparse value types of the command line: each refuses a bad value with a one-line message (the parser
turns it into a UsageError, exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from opbench.kernels import MAX_THREADS, default_threads
from opbench.ops import get_op
from opbench.ops.base import Op


def op(text: str) -> Op[Any]:
    """An op's name ('gemm'): its Op, which the commands hold from here on (a UsageError naming the ops
    there are)."""
    return get_op(text)


def int_from(text: str, lowest: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got '{text}'") from None
    if v < lowest:
        raise argparse.ArgumentTypeError(f"must be >= {lowest}, got {v}")
    return v


def positive_int(text: str) -> int:
    return int_from(text, 1)


# Oversubscription is a legitimate experiment, up to a bound: 8 threads per usable core, and never more than
# the kernels' pool allows (1024).
THREADS_PER_CORE = 8


def threads(text: str) -> int:
    return threads_within_bound(positive_int(text))


def threads_within_bound(v: int) -> int:
    cores = default_threads()
    bound = min(MAX_THREADS, THREADS_PER_CORE * cores)
    if v > bound:
        raise argparse.ArgumentTypeError(
            f"{v} threads on {cores} usable core(s): the limit is {bound} "
            f"({THREADS_PER_CORE} per core, at most {MAX_THREADS})"
        )
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
    if not v > 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    if v == float("inf"):
        raise argparse.ArgumentTypeError("must be finite")
    return v


def at_most(limit: float, kind: Callable[[str], float] = positive_float) -> Callable[[str], float]:
    """An argparse type: `kind`, and at most `limit` (a time or a count that would never end otherwise)."""

    def parse(text: str) -> float:
        v = kind(text)
        if v > limit:
            shown = str(int(limit)) if float(limit).is_integer() else f"{limit:g}"
            raise argparse.ArgumentTypeError(f"must be <= {shown}, got {text}")
        return v

    return parse


def seed(text: str) -> int:
    return int(at_most(2**32 - 1, lambda t: int_from(t, 0))(text))


def rounds(text: str) -> int:
    v = positive_int(text)
    if v > 100:
        raise argparse.ArgumentTypeError(f"at most 100 rounds, got {v}")
    return v


def processes(text: str) -> int:
    v = int_from(text, 0)
    if v > 32:
        raise argparse.ArgumentTypeError(f"at most 32 processes, got {v}")
    return v


def scale(text: str) -> float:
    v = positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def padding(text: str) -> int | str | tuple[int, ...]:
    if text == "same":
        return text
    if "," in text:
        try:
            sides = tuple(int(v) for v in text.split(","))
        except ValueError:
            sides = ()
        if len(sides) != 4 or min(sides) < 0:
            raise argparse.ArgumentTypeError(f"T,B,L,R must be four integers >= 0, got '{text}'")
        return sides
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'same' or an integer >= 0, got '{text}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 'same' or an integer >= 0, got {v}")
    return v


def bytes_size(text: str) -> int:
    """'8G', '512M', '1.5GiB', '1000000' -> bytes."""
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units and t[-1:] != "" else ""
    try:
        v = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a size like 8G or 512M, got '{text}'") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a size > 0, got '{text}'")
    return int(v)


FAIL_ON = ("slower", "failed")


def fail_on(text: str) -> frozenset[str]:
    """ab --fail-on: slower, failed or both (comma-separated)."""
    names = {t.strip().lower() for t in text.split(",") if t.strip()}
    if not names or names - set(FAIL_ON):
        raise argparse.ArgumentTypeError(f"expected slower, failed or slower,failed, got '{text}'")
    return frozenset(names)


def holdout(text: str) -> float:
    """A share of shapes kept out of a portfolio's search: 0 to 0.9."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 0.9], got '{text}'") from None
    if not 0.0 <= v <= 0.9:  # NaN fails both
        raise argparse.ArgumentTypeError(f"must be in [0, 0.9], got {text}")
    return v


def export_formats(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",")))
    if not names or any(n not in ("json", "cpp") for n in names):
        raise argparse.ArgumentTypeError(f"expected json, cpp or json,cpp, got '{text}'")
    return names
