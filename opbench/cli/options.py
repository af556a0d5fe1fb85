"""What the command parsers share: the parser class, the process defaults, the op's axis and parameter
flags (cli/parser.py builds sweep's, ab's and the reading commands'; cli/tune_parser.py tune's, studies' and
shapes')."""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

from opbench import kernels
from opbench.cli.types import padding, positive_int, processes
from opbench.errors import UsageError

# Worker processes per backend (--processes): the default, and the setting the README recommends for
# published figures (docs/benchmarks.md, "Reproducibility across processes").
DEFAULT_PROCESSES = 3
PUBLISH_PROCESSES = 5
PUBLISH_ROUNDS = 10


def default_processes() -> int:
    """--processes when not given: OPBENCH_PROCESSES where set (0: in the sweep's own process), else
    DEFAULT_PROCESSES."""
    text = os.environ.get("OPBENCH_PROCESSES")
    if text is None:
        return DEFAULT_PROCESSES
    try:
        return processes(text)
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"OPBENCH_PROCESSES: {e}") from None


def resolve_processes(given: int | None, rounds: int, flag: str, rounds_flag: str) -> int:
    """The worker processes of a run: `given` (an error past `rounds`: each process runs at least one round),
    else default_processes() capped at `rounds`."""
    if given is None:
        return min(default_processes(), rounds)
    if given > rounds:
        raise UsageError(
            f"{flag} {given} needs {rounds_flag} {given} or more (each process runs at least one round; got "
            f"{rounds_flag} {rounds})"
        )
    return given


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def isas() -> tuple[str, ...] | None:
    """The kernel sets `--isa` takes: the C++ ISA table's names (None, any, where the extension is not
    built: the cpp backend then says why it cannot run)."""
    if kernels.load_error() is not None:
        return None
    return kernels.known_isas()


# Sweep axes on the command line, per op: option dest -> flag (the op module's AXES names the dests).
AXIS_FLAGS = {
    "m": "--m",
    "n": "--n",
    "k": "--k",
    "batch_count": "--batch-count",
    "batch": "--batch",
    "input_size": "--input-size",
    "in_channels": "--in-channels",
    "out_channels": "--out-channels",
    "filter_size": "--filter-size",
    "seq_len": "--seq-len",
    "hidden": "--hidden",
}
PARAM_FLAGS = {
    "stride": "--stride",
    "padding": "--padding",
    "dilation": "--dilation",
    "groups": "--groups",
    "nonlinearity": "--nonlinearity",
}


def op_params(group: argparse._ActionsContainer) -> None:
    """The op parameters PARAM_FLAGS names, as `opbench sweep` and `opbench tune` both take them."""
    group.add_argument("--stride", type=positive_int, help="conv stride (default 1)")
    group.add_argument(
        "--padding",
        type=padding,
        help="conv padding: 'same' (default), an integer, or T,B,L,R (top, bottom, left, right)",
    )
    group.add_argument("--dilation", type=positive_int, help="conv dilation (default 1)")
    group.add_argument("--groups", type=positive_int, help="conv groups (default 1)")
    group.add_argument("--nonlinearity", choices=("tanh", "relu"), help="rnn activation (default tanh)")


KERNEL_ACCUMULATE_HELP = (
    "with a user kernel: the precision it sums products in, for the verification bound (default fp32, as "
    "every fp16 and bf16 kernel on a CPU does; declare fp16 or bf16 for one that sums in the dtype: the "
    "bound then allows that precision's error and says so)"
)
