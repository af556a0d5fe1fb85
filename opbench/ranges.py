"""Parsing of size lists on the command line: '64,128', '64:1024:x2' (geometric), '64:512:+64' or
'64:512:64' (arithmetic, CUTLASS-profiler style), and mixes of them."""

from __future__ import annotations

from opbench.errors import UsageError

MAX_VALUES = 10_000
MAX_SIZE = 2**40  # far past any size that fits in memory; keeps every later product in 64-bit range

_SYNTAX = "expected N, A:B:xF (times F) or A:B:+S / A:B:S (plus S), comma-separated"


def _int(token: str, option: str, text: str) -> int:
    try:
        value = int(token)
    except ValueError:
        raise UsageError(
            f"{option}: bad size list '{text}': '{token}' is not an integer ({_SYNTAX})"
        ) from None
    if value < 1:
        raise UsageError(f"{option}: sizes must be >= 1, got {value} in '{text}'")
    if value > MAX_SIZE:
        raise UsageError(f"{option}: size {token} is over the limit of 2^40 in '{text}'")
    return value


def parse_sizes(text: str, option: str = "size") -> list[int]:
    """Returns the sizes in the order given, duplicates removed."""
    if len(text) > 100_000:
        raise UsageError(f"{option}: size list of {len(text)} characters is too long")
    if not text or not text.strip():
        raise UsageError(f"{option}: empty size list ({_SYNTAX})")
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"{option}: bad size list '{text}': empty item ({_SYNTAX})")
        fields = part.split(":")
        if len(fields) == 1:
            values.append(_int(fields[0], option, text))
            continue
        if len(fields) != 3:
            raise UsageError(f"{option}: bad range '{part}' ({_SYNTAX})")
        start, stop = _int(fields[0], option, text), _int(fields[1], option, text)
        if stop < start:
            raise UsageError(f"{option}: range '{part}' ends before it starts")
        step = fields[2].strip()
        if step[:1] in ("x", "*"):
            try:
                factor = float(step[1:])
            except ValueError:
                raise UsageError(f"{option}: bad factor in '{part}' ({_SYNTAX})") from None
            if not 1 < factor < float("inf"):
                raise UsageError(f"{option}: factor must be a finite number > 1 in '{part}'")
            v = float(start)
            while round(v) <= stop:
                values.append(int(round(v)))
                v *= factor
                if len(values) > MAX_VALUES:
                    break
        else:
            inc = _int(step[1:] if step.startswith("+") else step, option, text)
            steps = range(start, stop + 1, inc)
            if len(values) + len(steps) > MAX_VALUES:  # counted before it is expanded
                raise UsageError(f"{option}: '{text}' expands to more than {MAX_VALUES} sizes")
            values.extend(steps)
        if len(values) > MAX_VALUES:
            raise UsageError(f"{option}: '{text}' expands to more than {MAX_VALUES} sizes")
    return list(dict.fromkeys(values))
