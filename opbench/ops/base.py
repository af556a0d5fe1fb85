"""`Op`: one pass of an operator (gemm, or gemm:bwd) as a table of what it provides, after BLIS's context
tables: data bound once per op module (its `OP`), not a module reached through getattr.

An op module keeps its functions (tests and benchmarks call them by name) and ends by binding them into its
`OP`. The three recurrent ops share their functions through `ops/recurrent.py: recurrent_op`, and a
backward pass is its forward's Op with the callables that differ replaced (`dataclasses.replace`), so the
shape interface of a pass is its forward's by construction. The registry (ops/__init__.py) holds the
instances; a Case holds the Op it measures.

`S` is the op's frozen shape class (ops/<op>.py): GemmShape, ConvShape, RnnShape, ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from opbench.blocks import VerifyBlock
from opbench.documents import Fields, Scalar
from opbench.dtypes import Array, Inputs, Output
from opbench.errors import UsageError
from opbench.kernels import Plan as KernelPlan
from opbench.ops.spot import PartOf, SpotCheck
from opbench.tiles import Tiles

S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)


class MemoryBytes(Protocol[S_contra]):
    def __call__(self, shape: S_contra, dtype: str, reference: bool = True) -> int: ...


class Check(Protocol[S_contra]):
    def __call__(
        self,
        shape: S_contra,
        output: Output,
        inputs: Inputs,
        ref: Any,
        dtype: str,
        accumulate: str,
        bounds: dict[str, Array] | None = None,
    ) -> VerifyBlock: ...


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


def foreign(name: str, pass_name: str) -> Op[Any]:
    """An op a file names that this version does not run (a record of another version, or a poisoned
    file): its name and pass, for the tables of a report or a comparison, which read what records say; any
    use of it to measure is a UsageError naming it."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise UsageError(f"op '{name}' (pass '{pass_name}') is not one this version of opbench runs")

    return Op(
        name=name,
        flop_note="",
        shape_fields=(),
        axes={},
        base={},
        params={},
        default_mode="product",
        default_backends=(),
        batch_fields=(),
        spatial_fields=(),
        default_cases=refuse,
        make_shape=refuse,
        shape_from_case=refuse,
        factors=refuse,
        scale=refuse,
        flops=refuse,
        min_bytes=refuse,
        memory_bytes=refuse,
        verify_cost_flops=refuse,
        make_inputs=refuse,
        reference=refuse,
        error_bounds=refuse,
        check=refuse,
        named_outputs=refuse,
        spot_part=refuse,
        spot_check=refuse,
        spot_cost_flops=refuse,
        plan=refuse,
        tile_names=refuse,
        pass_name=pass_name,
        unsupported=refuse,
    )
