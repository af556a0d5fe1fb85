"""`Op`: one pass of an operator (gemm, or gemm:bwd) as a table of what it provides, after BLIS's context
tables: data bound once per op module (its `OP`, at import), not a module reached through getattr at each
use.

An op module keeps its functions (tests and benchmarks call them by name) and ends by binding itself into
its `OP` (`bind`, below; mypy checks the module against `OpModule` there). The three recurrent ops share
their functions through `ops/recurrent.py: recurrent_op`, and a backward pass is its forward's Op with the
pass's own fields replaced (`backward_of`), so the shape interface of a pass is its forward's by
construction. The registry (ops/__init__.py) holds the instances; a Case holds the Op it measures.

`S` is the op's frozen shape class (ops/<op>.py): GemmShape, ConvShape, RnnShape, ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from types import SimpleNamespace
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from opbench.documents import Fields, Scalar
from opbench.dtypes import Array, Inputs, Output
from opbench.errors import UsageError
from opbench.kernels import Plan as KernelPlan
from opbench.ops.numerics import Check
from opbench.ops.spot import PartOf, SpotCheck
from opbench.tiles import Tiles

S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)


class MemoryBytes(Protocol[S_contra]):
    def __call__(self, shape: S_contra, dtype: str, reference: bool = True) -> int: ...


class Plan(Protocol[S_contra]):
    """Our kernel prepared for a case (kernels.Plan); tiles left None come from the cache model."""

    def __call__(
        self,
        shape: S_contra,
        inputs: Inputs,
        tiles: Tiles,
        accumulate: str = "fp32",
    ) -> KernelPlan: ...


class TileNames(Protocol[S_contra]):
    """What a tuning space's rules may name (mr, nr, elem_bytes and the m, n, k the tiles block)."""

    def __call__(self, shape: S_contra, isa: str | None, dtype: str = "fp32") -> dict[str, int]: ...


class Shape(Protocol):
    """What every op's shape class is (GemmShape, ConvShape, RnnShape, ...; frozen, hashable), and a shape
    read back from a record (RecordedShape): its label and its fields as records write them."""

    def label(self) -> str: ...

    def to_dict(self) -> Mapping[str, Scalar]: ...


ShapeT = TypeVar("ShapeT")


def shape_of(shape: Shape, cls: type[ShapeT]) -> ShapeT:
    """`shape` as the op's own shape class, where code chose an op by its key (a backend's adapter): a
    TypeError if the two disagree."""
    if not isinstance(shape, cls):
        raise TypeError(f"expected a {cls.__name__}, got {type(shape).__name__} ({shape.label()})")
    return shape


@dataclass(frozen=True)
class RecordedShape:
    """A shape as a record wrote it (case.Result.from_record): its fields and label kept as they are, so
    that reading a file of another version never depends on today's shape classes."""

    fields: Mapping[str, Scalar]
    text: str = ""

    def label(self) -> str:
        return self.text or "x".join(str(v) for v in self.fields.values())

    def to_dict(self) -> Mapping[str, Scalar]:
        return self.fields

    def __hash__(self) -> int:
        return hash((self.text, tuple(self.fields.items())))


def _supported(shape: object) -> str | None:
    return None


@dataclass(frozen=True, eq=False)
class Op(Generic[S]):
    """One pass of an operator. Identity is equality: the registry holds one instance per op key."""

    # --- what it is, and how a sweep names its shapes
    name: str  # "gemm": the op on the command line and in records
    flop_note: str  # how its FLOPs are counted (a run's header)
    shape_fields: tuple[str, ...]  # a shape's fields, as records and specs write them
    axes: Mapping[str, tuple[str, ...]]  # sweep axis -> the shape fields it sets
    base: Fields  # every axis's value at the base point
    params: Fields  # fixed sweep parameters (conv's stride, rnn's nonlinearity) and defaults
    default_mode: str  # how the command line's axes expand: "one-factor" or "product" (ops/space.py)
    default_backends: tuple[str, ...]
    batch_fields: tuple[str, ...]  # what --scale shrinks: the batch ...
    spatial_fields: tuple[str, ...]  # ... and the input size
    default_cases: Callable[[], list[S]]
    make_shape: Callable[[Fields], S]  # from a sweep point (axes and params)
    shape_from_case: Callable[[Fields], S]  # from explicit shape fields (a record, a spec case)
    factors: Callable[[S], Fields]  # a shape's axis values
    scale: Callable[[S, float], S]  # --scale
    # --- what a case costs and how it is checked
    flops: Callable[[S], int]
    min_bytes: Callable[[S, str], int]  # compulsory traffic (arithmetic intensity)
    memory_bytes: MemoryBytes[S]  # what a sweep case holds at once (--max-memory)
    verify_cost_flops: Callable[[S], int]  # float64 work of the full check
    make_inputs: Callable[[S, str, int], Inputs]  # seeded inputs in a dtype
    reference: Callable[[S, Inputs], Any]  # the float64 answer
    error_bounds: Callable[[S, Inputs, Any, str, str], dict[str, Array]]
    check: Check[S]
    named_outputs: Callable[[S, Output], dict[str, Output]]
    spot_part: PartOf[S]  # ops/spot.py: a timed call's seeded part
    spot_check: SpotCheck[S]
    spot_cost_flops: Callable[[S], int]
    # --- opbench's own kernel (the cpp backend and the tuner)
    plan: Plan[S]
    tile_names: TileNames[S]
    # --- what only some ops have
    pass_name: str = "fwd"  # "fwd", or "bwd": the gradients given an upstream gradient
    default_axes: Mapping[str, Any] = field(
        default_factory=dict
    )  # the default sweep's axes (or default_cases alone)
    param_choices: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # the values a text parameter takes
    space: str | None = None  # the tuning space under tuning/spaces/ (None: the op's name)
    # The share of exact zeros a correct output may hold with opbench's inputs (the mistrusted guard).
    expected_zero_fraction: Callable[[S], float] | None = None
    # The FLOPs a kernel cannot skip (a conv's padded taps are skippable), of the forward.
    useful_flops: Callable[[S], int] | None = None
    unsupported: Callable[[S], str | None] = _supported  # why our kernel cannot run a shape, or None

    @property
    def key(self) -> str:
        """'gemm' for a forward, 'gemm:bwd' for a backward: what backends are asked for."""
        return self.name if self.pass_name == "fwd" else f"{self.name}:{self.pass_name}"

    def __repr__(self) -> str:
        return f"Op({self.key})"


# --- binding an op module into its Op ------------------------------------------------------------------
#
# An op module defines Op's fields under their own names: constants upper-case (NAME, AXES), functions as
# the field is named (flops, plan). `bind` reads a forward module, `backward_of` the module of another pass
# (ops/gemm_bwd.py), each once, at import; mypy checks the module against OpModule or PassModule where it
# is bound (the module passes itself: `import opbench.ops.gemm as this`). The optional fields are taken
# where the module defines them (directly or by import), and `changes` set any field outright.

_CONSTANTS = frozenset(
    {"name", "flop_note", "shape_fields", "axes", "base", "params", "default_mode", "default_backends"}
    | {"batch_fields", "spatial_fields", "default_axes", "param_choices", "space"}
)
# What a pass has of its own; the rest (its shapes, axes and sweep) is its forward's by construction.
PASS_FIELDS = (
    "flops",
    "min_bytes",
    "memory_bytes",
    "verify_cost_flops",
    "make_inputs",
    "reference",
    "error_bounds",
    "check",
    "named_outputs",
    "spot_part",
    "spot_check",
    "spot_cost_flops",
    "plan",
)
OPTIONAL_FIELDS = (
    "flop_note",
    "tile_names",
    "default_axes",
    "param_choices",
    "space",
    "expected_zero_fraction",
    "useful_flops",
    "unsupported",
)


class PassModule(Protocol[S_contra]):
    """What a module defines for a pass of an op (a backward's: ops/gemm_bwd.py): Op's PASS_FIELDS."""

    def flops(self, shape: S_contra) -> int: ...
    def min_bytes(self, shape: S_contra, dtype: str) -> int: ...
    def verify_cost_flops(self, shape: S_contra) -> int: ...
    def make_inputs(self, shape: S_contra, dtype: str, seed: int) -> Inputs: ...
    def reference(self, shape: S_contra, inputs: Inputs) -> object: ...
    def error_bounds(
        self, shape: S_contra, inputs: Inputs, ref: Any, dtype: str, acc: str
    ) -> dict[str, Array]: ...
    def named_outputs(self, shape: S_contra, output: Output) -> dict[str, Output]: ...
    def spot_cost_flops(self, shape: S_contra) -> int: ...

    @property
    def memory_bytes(self) -> MemoryBytes[S_contra]: ...
    @property
    def check(self) -> Check[S_contra]: ...
    @property
    def spot_part(self) -> PartOf[S_contra]: ...
    @property
    def spot_check(self) -> SpotCheck[S_contra]: ...
    @property
    def plan(self) -> Plan[S_contra]: ...


class OpModule(PassModule[S], Protocol[S]):
    """What an op module defines for its forward pass (ops/gemm.py): the functions of Op's fields without a
    default. Its constants (NAME, AXES, ...) are read as they are; tests/test_case.py checks their types."""

    def default_cases(self) -> list[S]: ...
    def make_shape(self, point: Fields) -> S: ...
    def shape_from_case(self, fields: Fields) -> S: ...
    def factors(self, shape: S) -> Fields: ...
    def scale(self, shape: S, factor: float) -> S: ...

    @property
    def tile_names(self) -> TileNames[S]: ...


def _attribute(field_name: str) -> str:
    return field_name.upper() if field_name in _CONSTANTS else field_name


def _defined(
    module: object, names: tuple[str, ...], changes: Mapping[str, object], optional: bool = False
) -> dict[str, Any]:
    """The fields `names` as `module` defines them, and then `changes` (those it lacks left out if
    `optional`)."""
    attrs = {name: _attribute(name) for name in names if name not in changes}
    got = {name: getattr(module, a) for name, a in attrs.items() if not optional or hasattr(module, a)}
    return {**got, **changes}


_REQUIRED = tuple(f.name for f in fields(Op) if f.default is MISSING and f.default_factory is MISSING)


def bind(module: OpModule[S], **changes: object) -> Op[S]:
    """The forward Op of an op module."""
    return Op(**{**_defined(module, _REQUIRED, changes), **_defined(module, OPTIONAL_FIELDS, changes, True)})


def backward_of(forward: Op[S], module: PassModule[S], **changes: object) -> Op[S]:
    """The backward pass of `forward`: its shape interface, the pass's own fields from `module`."""
    own = {**_defined(module, PASS_FIELDS, changes), **_defined(module, OPTIONAL_FIELDS, changes, True)}
    return replace(forward, pass_name="bwd", **own)


def foreign(name: str, pass_name: str) -> Op[Any]:
    """An op a file names that this version does not run (a record of another version, or a poisoned
    file): its name and pass, for the tables of a report or a comparison, which read what records say; any
    use of it to measure is a UsageError naming it."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise UsageError(f"op '{name}' (pass '{pass_name}') is not one this version of opbench runs")

    # a module of nothing: each function refuses, each constant is empty
    nothing = {_attribute(f): () if f.endswith(("fields", "backends")) else refuse for f in _REQUIRED}
    empty = {"name": name, "flop_note": "", "axes": {}, "base": {}, "params": {}, "default_mode": "product"}
    return Op(
        **_defined(SimpleNamespace(**nothing), _REQUIRED, empty), pass_name=pass_name, unsupported=refuse
    )
