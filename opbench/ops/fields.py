"""Validation of shape fields given in spec files and on the command line, shared by the op modules."""

from __future__ import annotations

from opbench.documents import Fields


def reject_unknown(fields: Fields, known: tuple[str, ...], op: str) -> None:
    unknown = set(fields) - set(known)
    if unknown:
        raise ValueError(f"unknown {op} field(s) {', '.join(sorted(unknown))} (expected {', '.join(known)})")


def int_field(fields: Fields, name: str, minimum: int = 1) -> int:
    """fields[name] as an integer >= minimum (not a bool), else ValueError naming the field."""
    v = fields.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ValueError(f"'{name}' must be an integer >= {minimum}, got {v!r}")
    return v
