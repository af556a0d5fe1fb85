"""RNN backward (the op key `rnn:bwd`, `--pass bwd`): backpropagation through time, timed as one unit
after a training forward that ran once when the case was prepared. The shapes and axes are the forward's
(ops/rnn.py: its Op); FLOPs (2x the forward's), inputs, reference, check and our kernel are the
recurrent backward's (ops/recurrent_bwd.py)."""

from __future__ import annotations

from opbench.ops import rnn
from opbench.ops.recurrent_bwd import backward_of

FLOP_NOTE = (
    "RNN backward FLOPs = 2x the forward's (BPTT: the recurrent gradient per step and the weight and input "
    "gradients over all steps; the forward is not included)"
)

OP = backward_of(rnn.OP, FLOP_NOTE)
