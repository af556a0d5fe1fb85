"""The shape of a recurrent layer (ops/recurrent.py: rnn, gru, lstm) and what a sweep knows of it: its
axes, base point and default sweep, and how --scale shrinks it. Each op's shape class adds its gate and
state counts (and rnn its activation)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, TypeVar

from opbench.documents import Fields
from opbench.ops.fields import int_field, reject_unknown


@dataclass(frozen=True, order=True)
class RecurrentShape:
    seq_len: int
    batch: int
    input_size: int
    hidden: int

    GATES: ClassVar[int] = 4  # rows of W_ih and W_hh per hidden unit
    STATES: ClassVar[int] = 2  # h (and c for the LSTM)

    def label(self) -> str:
        return f"T{self.seq_len} B{self.batch} I{self.input_size} H{self.hidden}"

    def to_dict(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in self.fields()}

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return ("seq_len", "batch", "input_size", "hidden")


SIZE_FIELDS = ("seq_len", "batch", "input_size", "hidden")
AXES: dict[str, tuple[str, ...]] = {f: (f,) for f in ("batch", "seq_len", "input_size", "hidden")}
BASE = {"batch": 16, "seq_len": 25, "input_size": 256, "hidden": 256}
DEFAULT_AXES = {
    "batch": [4, 16, 64],
    "seq_len": [10, 25, 50],
    "input_size": [128, 256, 512],
    "hidden": [128, 256, 512],
}
DEFAULT_MODE = "one-factor"
SPACE = "recurrent"  # the tuning space all three share (tuning/spaces/recurrent.toml)
DEFAULT_BACKENDS = ("cpp", "torch", "mindspore", "tensorflow")
BATCH_FIELDS = ("batch",)
SPATIAL_FIELDS = ("input_size",)


def sizes_from_case(cls: type[RecurrentShape], fields: Fields, name: str) -> dict[str, int]:
    reject_unknown(fields, cls.fields(), name)
    return {f: int_field(fields, f) for f in SIZE_FIELDS}


R = TypeVar("R", bound=RecurrentShape)


def factors(shape: RecurrentShape) -> dict[str, int]:
    """The sweep axes' values for this shape."""
    return {a: getattr(shape, a) for a in AXES}


def scale(shape: R, factor: float) -> R:
    """Shrink batch and input size by factor (at least 1)."""
    return replace(
        shape, batch=max(1, round(shape.batch * factor)), input_size=max(1, round(shape.input_size * factor))
    )
