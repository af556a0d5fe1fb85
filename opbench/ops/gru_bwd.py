"""GRU backward (the op key `gru:bwd`, `--pass bwd`): backpropagation through time, timed as one unit
after a training forward that ran once when the case was prepared. The shapes and axes are the forward's
(ops/gru.py, re-exported); FLOPs (2x the forward's), inputs, reference, check and our kernel are the
recurrent backward's (ops/recurrent_bwd.py)."""

from __future__ import annotations

from opbench.ops.gru import (  # noqa: F401  (the forward's shape interface, shared)
    AXES,
    BASE,
    BATCH_FIELDS,
    DEFAULT_AXES,
    DEFAULT_BACKENDS,
    DEFAULT_MODE,
    NAME,
    PARAMS,
    SHAPE_FIELDS,
    SPACE,
    SPATIAL_FIELDS,
    GruShape,
    default_cases,
    factors,
    make_shape,
    scale,
    shape_from_case,
    tile_names,
)
from opbench.ops.recurrent_bwd import (  # noqa: F401  (the recurrent backward's op interface)
    PASS,
    check,
    error_bounds,
    flops,
    make_inputs,
    memory_bytes,
    min_bytes,
    named_outputs,
    plan,
    reference,
    spot_check,
    spot_cost_flops,
    spot_part,
    verify_cost_flops,
)

FLOP_NOTE = (
    "GRU backward FLOPs = 2x the forward's (BPTT: the recurrent gradient per step and the weight and input "
    "gradients over all steps; the forward is not included)"
)
