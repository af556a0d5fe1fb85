"""Running sweeps into results files: the library side of `opbench sweep`. run_sweeps() pins the CPUs,
resolves the peaks, loads the backends, and for each sweep config writes one results file (header,
records after every visit, the environment block, earlier-run flags) while telling an observer what
happens; the CLI's observer draws the progress and the tables. A KeyboardInterrupt propagates after the
environment of the sweep under way is written; `writers` (the caller's list) then holds every file."""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Protocol

from opbench import gpu, machine, peak
from opbench import history as earlier
from opbench.backends import BACKENDS
from opbench.documents import BandwidthDict, MachineBlock, PeakTable, ResultsDoc, SweepMeta
from opbench.errors import UsageError
from opbench.machine import utc_stamp
from opbench.measure import Bench
from opbench.ops import pass_of
from opbench.overhead import CallOverhead
from opbench.reference import THROTTLED_SPEED, apart_warning
from opbench.results import ResultsWriter
from opbench.sweep import driver as sweep
from opbench.sweep import visits
from opbench.sweep.config import BackendState, SweepConfig, setup_backends


class Observer(Protocol):
    """What a caller of run_sweeps() is told. Every method may do nothing."""

    def status(self, text: str) -> AbstractContextManager[object]: ...  # a slow step under way

    def sweep_started(self, op: str, visits: int) -> AbstractContextManager[None]: ...  # one results file

    def visit_started(self, description: str) -> None: ...

    def sweep_finished(self, doc: ResultsDoc, paths: dict[str, Path]) -> None: ...


def run_sweeps(
    configs: list[SweepConfig],
    meta: SweepMeta,
    out_dir: Path,
    formats: list[str],
    observer: Observer,
    writers: list[ResultsWriter],
) -> None:
    """Run every config into its own results file (appended to `writers` as it is created)."""
    first = configs[0]
    all_dtypes = tuple(dict.fromkeys(d for c in configs for d in c.dtypes))
    all_backends = tuple(dict.fromkeys(b for c in configs for b in c.backends))
    cpus = machine.pin_to_cpus(first.threads) if first.device == "cpu" else machine.allowed_cpus()
    machine.keep_freed_memory()
    with observer.status("measuring peak FLOPS (cached per machine)..."):
        peak_table = sweep.resolve_peaks(all_dtypes, first.threads, first.device, all_backends)
        bandwidth = peak.bandwidth(first.threads).to_dict() if first.device == "cpu" else None
    with observer.status("loading backends..."):
        states = setup_backends(all_backends, first.threads, first.device, first.processes)
    try:
        if first.device != "cpu" and all(st.reason for st in states.values()):
            reasons = "; ".join(f"{name}: {st.reason}" for name, st in states.items())
            raise UsageError(f"no backend can run on '{first.device}' here ({reasons})")
        history = visits.SpeedHistory()
        # One in-run reference for the whole command (its probe budget and best values shared); each results
        # file gets its own contention monitor, whose findings go into its header.
        reference = sweep.make_reference(first)
        stamp = utc_stamp()
        prefix = f"{meta['suite']['name']}-" if meta["suite"] else ""
        # what history keys cases by: the builds of the backends that run (one that cannot has no cases)
        builds = {name: st.backend.build() for name, st in states.items() if st.reason is None}
        for index, cfg in enumerate(configs):
            with observer.status(f"timing each backend's call of {cfg.op.name} on a tiny case..."):
                overheads = sweep.call_overheads(cfg, states)
            header = sweep_header(cfg, meta, states, peak_table, cpus, index, bandwidth, overheads)
            writer = ResultsWriter(out_dir, f"{prefix}{cfg.op.name}-{stamp}", formats, header)
            writers.append(writer)
            bench = sweep.make_bench(cfg, cpus, reference)
            with observer.sweep_started(cfg.op.name, cfg.n_cases * cfg.rounds):
                try:
                    sweep.run_sweep(
                        cfg, states, peak_table, writer.put, observer.visit_started, history, bench
                    )
                    if earlier.apply(writer.doc, peak.cache_dir(), builds):  # flags cases unlike earlier runs
                        writer.refresh()
                finally:
                    environment(writer, bench)
            if "accelerator" in writer.doc["machine"]:
                writer.doc["machine"]["accelerator"]["smi_end"] = gpu.clocks(cfg.device)  # clocks at the end
            writer.finish()
            observer.sweep_finished(writer.doc, writer.paths)
    finally:
        for st in states.values():  # the worker processes of --processes end with the run
            stop = getattr(st.backend, "stop", None)
            if stop is not None:
                stop()


def sweep_header(
    cfg: SweepConfig,
    meta: SweepMeta,
    states: dict[str, BackendState],
    peak_table: PeakTable,
    cpus: list[int],
    index: int,
    bandwidth: BandwidthDict | None,
    overheads: dict[str, CallOverhead] | None = None,
) -> ResultsDoc:
    return {
        "op": cfg.op.name,
        "passes": list(cfg.passes),
        "shape_fields": list(cfg.op.shape_fields),
        "command": meta["command"],
        "flop_note": "; ".join(pass_of(cfg.op, p).flop_note for p in cfg.passes),
        "suite": meta["suite"],
        "scale": meta["scale"],
        "mode": meta["modes"][index],
        "description": meta["plans"][index],
        "factor_levels": sweep.factor_levels(cfg),
        "settings": {
            "threads": cfg.threads,
            "device": cfg.device,
            "dtypes": list(cfg.dtypes),
            "backends": list(cfg.backends),
            "verify": cfg.verify,
            "verify_max_gflop": cfg.verify_max_gflop,
            "seed": cfg.seed,
            "rounds": cfg.rounds,
            "processes": cfg.processes,
            "timer": asdict(cfg.timer),
            "max_memory_bytes": cfg.max_memory_bytes,
            "max_call_s": cfg.max_call_s,
            # each backend's options, for every backend that takes any (a file format: "cpp" always there)
            **{
                name: {k: v for k, v in cfg.backend_options.get(name, {}).items() if v is not None}
                for name, backend in BACKENDS.items()
                if backend.param_names
            },
        },
        "machine": {**machine.provenance(cfg.threads, cpus), **accelerator_block(cfg.device)},
        "peaks": {d: peak_table[d] for d in cfg.dtypes},
        "bandwidth": bandwidth,
        "backends": sweep.backend_summary({n: states[n] for n in cfg.backends}, overheads),
    }


def accelerator_block(device: str) -> MachineBlock:
    """GPU provenance at the start of a run on a cuda device (name, CUDA, driver, clocks); empty on CPU."""
    info = gpu.provenance(device)
    return MachineBlock(accelerator=info) if info is not None else MachineBlock()


def environment(writer: ResultsWriter, bench: Bench) -> None:
    """The run's environment block (contention, load, frequency, warnings, probe summary) into the header,
    and this run's best probes into the machine's cache; also after an interrupt."""
    flagged = Counter(f for r in writer.doc["records"] for f in r.get("flags", []))
    assert bench.monitor is not None  # every sweep's Bench watches contention (sweep.make_bench)
    env = bench.monitor.finish(contended_cases=flagged["contended"])
    if bench.reference is not None:
        env = replace(env, reference=bench.reference.summary())
        peak.record_best_probes(bench.reference.run_best)
        if flagged["throttled"]:
            env = env.warned(
                f"{flagged['throttled']} case(s) measured only while the machine ran below "
                f"{100 * THROTTLED_SPEED:.0f}% of its best in-run probe: flagged throttled"
            )
        if flagged["apart"]:
            env = env.warned(apart_warning(flagged["apart"], bench.reference))
    if flagged[earlier.FLAG]:
        env = env.warned(earlier.warning(flagged[earlier.FLAG]))
    writer.doc["environment"] = env.to_block()
    writer.flush()
