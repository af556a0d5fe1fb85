"""What a sweep is asked to measure (`SweepConfig`: one op's shapes, passes, dtypes and backends, with
the measurement settings) and the backends it runs them on (`BackendState`, set up once per run)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opbench.backends import Backend, make_backend
from opbench.backends.processes import in_processes
from opbench.backends.remote import RemoteBackend
from opbench.documents import Params
from opbench.errors import BackendUnavailable, UsageError
from opbench.ops import pass_of
from opbench.ops.base import Op
from opbench.ops.space import scale_shapes
from opbench.specs import SweepPlan
from opbench.timing import TimerConfig


@dataclass(frozen=True)
class SweepConfig:
    op: Op[Any]  # the forward's; each of `passes` is measured (ops.pass_of)
    shapes: tuple[Any, ...]
    dtypes: tuple[str, ...]
    backends: tuple[str, ...]
    threads: int
    device: str = "cpu"
    timer: TimerConfig = field(default_factory=TimerConfig)
    verify: bool = True
    seed: int = 0
    # per backend name, the run's options for it (Backend.case_params makes a case's parameters of them)
    backend_options: dict[str, Params] = field(default_factory=dict)
    max_memory_bytes: int | None = None  # a case needing more is skipped ('memory')
    max_call_s: float = 60.0  # a case predicted to take longer per call is skipped ('predicted')
    verify_max_gflop: float = 60.0  # float64 verification costlier than this is skipped (and said so)
    # With --scale: the shapes as the spec gave them, parallel to `shapes`; records report their factors.
    unscaled: tuple[Any, ...] | None = None
    rounds: int = 1  # visits per case, interleaved over shuffled rounds (the CLI's default is 3)
    passes: tuple[str, ...] = ("fwd",)  # training passes: fwd, bwd (ops.PASSES)
    # Every round visits each (shape, pass, dtype)'s backends one after the other (the two sides of an A/B
    # run: their ratio then rests on moments seconds apart), instead of one backend's cases after another's.
    paired: bool = False
    # Worker processes per backend (--processes): round r of a case runs in process r mod N, each process a
    # fresh one with its own randomized layout (backends/processes.py); 0: every case in this process.
    processes: int = 0

    @property
    def n_cases(self) -> int:
        return len(self.shapes) * len(self.passes) * len(self.dtypes) * len(self.backends)


@dataclass(frozen=True)
class SweepOptions:
    """How to measure, typed (the command line's options, which sweep and ab share): every plan's
    SweepConfig takes them (configs_for)."""

    threads: int
    device: str = "cpu"
    timer: TimerConfig = field(default_factory=TimerConfig)
    dtypes: tuple[str, ...] | None = None  # None: each plan's own, else fp32 and fp16
    passes: tuple[str, ...] = ("fwd",)
    verify: bool = True
    seed: int = 0
    backend_options: dict[str, Params] = field(default_factory=dict)
    max_memory_bytes: int | None = None
    max_call_s: float = 60.0
    verify_max_gflop: float = 60.0
    scale: float | None = None  # --scale: batch and input size shrunk by this factor
    rounds: int = 1
    processes: int = 0
    paired: bool = False


def configs_for(
    plans: Sequence[SweepPlan], options: SweepOptions, backends_of: Callable[[SweepPlan], Sequence[str]]
) -> list[SweepConfig]:
    """One SweepConfig per plan (a spec's sweep, or the command line's op): its shapes (scaled where
    options.scale asks, the originals kept for the records' factors), dtypes and backends."""
    configs = []
    for plan in plans:
        shapes, unscaled = list(plan.shapes), None
        if options.scale:
            shapes, origins = scale_shapes(plan.op, shapes, options.scale)
            unscaled = tuple(origins)
        configs.append(
            SweepConfig(
                op=plan.op,
                shapes=tuple(shapes),
                dtypes=tuple(options.dtypes or plan.dtypes or ("fp32", "fp16")),
                backends=tuple(backends_of(plan)),
                threads=options.threads,
                device=options.device,
                timer=options.timer,
                verify=options.verify,
                seed=options.seed,
                backend_options=options.backend_options,
                max_memory_bytes=options.max_memory_bytes,
                max_call_s=options.max_call_s,
                verify_max_gflop=options.verify_max_gflop,
                unscaled=unscaled,
                rounds=options.rounds,
                processes=options.processes,
                passes=options.passes,
                paired=options.paired,
            )
        )
    return configs


def check_memory(configs: Sequence[SweepConfig], budget: int) -> None:
    """A case over the budget is skipped when the sweep reaches it; if no case fits, say so up front."""
    smallest = None
    for cfg in configs:
        for op in (pass_of(cfg.op, p) for p in cfg.passes):
            for shape in cfg.shapes:
                verify = cfg.verify and op.verify_cost_flops(shape) <= cfg.verify_max_gflop * 1e9
                for d in cfg.dtypes:
                    need = op.memory_bytes(shape, d, reference=verify)
                    if need <= budget:
                        return
                    if smallest is None or need < smallest[0]:
                        smallest = (need, shape, d)
    if smallest is not None:
        need, shape, d = smallest
        raise UsageError(
            f"no case fits in memory: the smallest, {shape.label()} ({d}), needs about "
            f"{need / 2**30:.1f} GiB, "
            f"more than the {budget / 2**30:.1f} GiB budget (--max-memory; default 80% of available memory)"
        )


@dataclass
class BackendState:
    backend: Backend
    reason: str | None = None  # why every case of this backend is skipped
    version: str | None = None
    in_process: str | None = None  # why its cases run in this process although --processes asked otherwise


def setup_backends(
    names: tuple[str, ...], threads: int, device: str, processes: int = 0
) -> dict[str, BackendState]:
    """Each backend made and set up (in `processes` worker processes each where over 0: every worker is
    started first, so that their imports overlap)."""
    states: dict[str, BackendState] = {}
    for name in names:
        st = BackendState(make_backend(name))
        if processes > 0:
            st.backend, st.in_process = in_processes(st.backend, processes)
        states[name] = st
    for st in states.values():
        launch = getattr(st.backend, "launch", None)
        if launch is not None:
            launch()
    for st in states.values():
        st.reason = st.backend.unavailable_reason()
        if st.reason is None:
            try:
                st.backend.setup(threads, device)
                st.version = st.backend.version()
            except BackendUnavailable as e:
                st.reason = str(e)
            except Exception as e:  # a framework that imports but cannot initialise
                st.reason = f"setup failed: {one_line(e)}"
    return states


def processes(st: BackendState) -> int:
    """How many worker processes the backend's cases run in (0: this process)."""
    return st.backend.processes if isinstance(st.backend, RemoteBackend) else 0


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    msg = msg if len(msg) <= 300 else msg[:297] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
