"""After the trials: the top tilings and the cache-model default re-measured over interleaved rounds with
confidence intervals, and whether the winner may be saved. The rounds run in cfg.confirm_processes fresh
worker processes (round r in process r mod N), each with a randomized memory layout; the intervals draw
processes, then rounds, then samples (sampling.interval), so that a tiling is saved only where it beats the
default across processes, not in one lucky process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opbench import kernels, sampling
from opbench.case import Outcome
from opbench.documents import Params
from opbench.errors import UsageError
from opbench.layout import draw
from opbench.ops.gemm import GemmShape
from opbench.tune.config import CONFIRM_TIMER, TuneConfig
from opbench.tune.isolation import IsolatedRunner, Runner
from opbench.tune.objective import request
from opbench.tune.space import TileSpace
from opbench.tuning_documents import Confirmation, ConfirmationRow

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna


def _measured_keys(study: optuna.Study) -> set[str]:
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    return {
        t.user_attrs["key"]
        for t in study.get_trials(deepcopy=False)
        if "key" in t.user_attrs
        and (t.state == optuna.trial.TrialState.COMPLETE or "failure" in t.user_attrs)
    }


def baseline(cfg: TuneConfig, space: TileSpace) -> tuple[Params | None, str]:
    """The point the winner is compared with, and what to call it: our kernels' cache-model default (None:
    the kernel derives its tiles); for a user kernel, --baseline-params (every parameter, each a value of
    the space) or the first value of each parameter."""
    if cfg.kernel is None:
        return None, "the cache-model default"
    if cfg.baseline_params is None:
        return {
            name: values[0] for name, values in space.params
        }, "the baseline (first value of each parameter)"
    given = dict(cfg.baseline_params)
    names = [name for name, _ in space.params]
    if set(given) != set(names):
        raise UsageError(
            f"--baseline-params must set exactly {', '.join(names)} (got {', '.join(given) or 'none'})"
        )
    for name, values in space.params:
        if given[name] not in values:
            raise UsageError(
                f"--baseline-params: {name}={given[name]!r} is not a value of the space ({list(values)})"
            )
    return {name: given[name] for name in names}, "the baseline (--baseline-params)"


def confirm(cfg: TuneConfig, study: optuna.Study, runner: IsolatedRunner, space: TileSpace) -> Confirmation:
    """Re-measure the top-k distinct points and the baseline (our kernels: the cache-model default),
    interleaved over rounds with a stricter timer; medians with 95% bootstrap intervals, and the best's
    speed-up over the baseline."""
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    base, base_name = baseline(cfg, space)
    attr = "params" if cfg.kernel is not None else "tiles"

    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE and "gflops" in t.user_attrs
    ]
    ranked: dict[str, Params] = {}
    for t in sorted(done, key=lambda t: -t.user_attrs["gflops"]):
        ranked.setdefault(t.user_attrs["key"], t.user_attrs[attr])
        if len(ranked) == cfg.confirm_top:
            break
    candidates: list[tuple[str, Params | None]] = [("default", base)]
    candidates += [(f"#{i + 1}", tiles) for i, tiles in enumerate(ranked.values())]
    return confirm_points(cfg, runner, candidates, base_name)


def confirm_points(
    cfg: TuneConfig, runner: Runner, candidates: list[tuple[str, Params | None]], base_name: str
) -> Confirmation:
    """Re-measure named points, the first named "default" (the baseline: None, the cache-model default,
    for our kernels), interleaved over cfg.confirm_rounds rounds in cfg.confirm_processes processes (a
    portfolio confirms a shape's own best, its portfolio tiling and the default so); the best's speed-up
    over the baseline."""
    base = candidates[0][1]
    # per candidate, per process: each round's samples (the interval draws processes, then rounds)
    nested: dict[str, dict[int, list[list[float]]]] = {name: {} for name, _ in candidates}
    speeds: dict[str, list[float]] = {name: [] for name, _ in candidates}
    flags: dict[str, set[str]] = {name: set() for name, _ in candidates}
    failures: dict[str, str] = {}
    ran: dict[str, Params] = {}  # the tiles each candidate ran with (the default's from the model)
    runners = confirmation_runners(cfg, runner)
    try:
        for round_index in range(cfg.confirm_rounds):
            process = round_index % len(runners)
            for name, tiles in candidates:
                if name in failures:
                    continue
                asked, _ = request(cfg, tiles)
                answer = runners[process].run(
                    {**asked, "timer": CONFIRM_TIMER}, max(cfg.trial_timeout_s, 120.0)
                )
                outcome = Outcome.of(answer["status"], answer.get("reason"))
                if not outcome.ok:
                    failures[name] = str(outcome.text)
                    continue
                nested[name].setdefault(process, []).append(list(answer["time"]["samples_s"]))
                ran.setdefault(name, answer.get("tiles") or tiles or {})
                if (speed := answer.get("machine_speed")) is not None:
                    speeds[name].append(speed)
                flags[name].update(answer.get("flags") or [])
    finally:
        for extra in runners:
            if extra is not runner:
                extra.close()
    flops = cfg.op.flops(cfg.shape)
    rows: list[ConfirmationRow] = []
    for name, tiles in candidates:
        if name in failures or not nested[name]:
            rows.append({"name": name, "tiles": tiles, "failure": failures.get(name, "no samples")})
            continue
        s = sorted(x for rounds in nested[name].values() for r in rounds for x in r)
        median = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
        lo, hi = sampling.interval(list(nested[name].values()))
        per = sampling.by_process(nested[name]) if len(nested[name]) > 1 else []
        rows.append(
            {
                "name": name,
                "tiles": tiles,
                "n_samples": len(s),
                "median_s": median,
                "gflops": flops / median / 1e9,
                "gflops_ci": [flops / hi / 1e9, flops / lo / 1e9],
                # The in-run reference of its rounds: how fast the machine ran while this row was measured.
                "machine_speed": sorted(speeds[name])[len(speeds[name]) // 2] if speeds[name] else None,
                "flags": sorted(flags[name]),
                "processes": len(nested[name]),
                "process_medians_s": [float(x["median_s"]) for x in per],
            }
        )
    for r in rows:
        if r["name"] == "default":
            r["tiles"] = ran.get("default") or (base if cfg.kernel is not None else _model_tiles(cfg))
    _mark_as_default(cfg, rows, ran)
    measured = [r for r in rows if "gflops" in r and r["name"] != "default"]
    default = next(r for r in rows if r["name"] == "default")
    best = max(measured, key=lambda r: r["gflops"]) if measured else None
    result: Confirmation = {"rows": rows, "best": best, "default": default, "baseline_name": base_name}
    if best is not None and "gflops" in default:
        result["speedup"] = best["gflops"] / default["gflops"]
    return result


# The ops whose kernels clamp each block to the dimension it blocks (csrc/gemm/blocked.cpp: mc = min(tile_m,
# M), kc = min(tile_k, K); the recurrent layers' two products alike, to T*B rows, G*H columns and max(I, H)
# deep, the dimensions their tile_names give): tiles past a dimension run as the whole of it.
_CLAMPED = frozenset({"gemm", "rnn", "gru", "lstm"})
AS_DEFAULT = "as_default"  # the flag of a candidate that runs as the default does


def _effective(tiles: Params, dims: dict[str, int] | None) -> Params:
    """The tiles as the kernel runs them: each of tile_m, tile_n and tile_k at most its dimension in `dims`
    (the op's tile_names, where it clamps them: tile_k 512 on a K = 256 product is one K block of 256); as
    given where dims is None."""
    out = dict(tiles)
    if dims is None:
        return out
    for tile, dim in (("tile_m", "m"), ("tile_n", "n"), ("tile_k", "k")):
        value = out.get(tile)
        if isinstance(value, int) and dim in dims:
            out[tile] = min(value, dims[dim])
    return out


def _mark_as_default(cfg: TuneConfig, rows: list[ConfirmationRow], ran: dict[str, Params]) -> None:
    """Flag each measured candidate that ran with the default's own blocking (the model's tiles past a
    dimension clamped as the kernel clamps them; every other field the same): it is the default measured
    twice, and whatever it gains over it is noise (record_verdict saves no record for it)."""
    if cfg.kernel is not None or "default" not in ran:
        return  # a user kernel's points are its own; a default that never ran has no tiles to compare
    dims = cfg.op.tile_names(cfg.shape, cfg.isa, cfg.dtype) if cfg.op.key in _CLAMPED else None
    default = _effective(ran["default"], dims)
    for r in rows:
        if r["name"] != "default" and "gflops" in r and _effective(ran.get(r["name"], {}), dims) == default:
            r["flags"] = sorted({*r.get("flags", []), AS_DEFAULT})


def confirmation_runners(cfg: TuneConfig, runner: Runner) -> list[Runner]:
    """The workers the confirmation's rounds run in: the trials' own where one process was asked for,
    else cfg.confirm_processes fresh ones, each with a randomized layout (opbench.layout), so that the
    interval spans how much one fresh process differs from another."""
    if cfg.confirm_processes <= 1 or not isinstance(runner, IsolatedRunner):
        return [runner]  # one process asked for, or a replayed table (replay.py) that has no process
    runner.close()  # its process (the trials') would measure alongside the fresh ones
    return [IsolatedRunner(runner.init, layout=draw()) for _ in range(cfg.confirm_processes)]


def _model_tiles(cfg: TuneConfig) -> Params:
    """The cache model's tiles, when the default never ran (it failed at once): GEMM's for its N, the
    LSTM's kernel set's; conv derives its own per problem (shown as "cache-model default")."""
    if cfg.op.name == "conv":
        return {}
    shape = cfg.shape
    n = shape.n if cfg.op.key == "gemm" and isinstance(shape, GemmShape) else 0
    info = kernels.default_tiles(cfg.isa, n)
    return {"tile_m": info["tile_m"], "tile_n": info["tile_n"], "tile_k": info["tile_k"]}


def record_verdict(confirmation: Confirmation) -> str | None:
    """None when the confirmed best may be saved as the tuned record: it was measured faster than the
    baseline (our kernels: the cache-model default) beyond both 95% confidence intervals (or the baseline
    itself failed). Otherwise why the baseline stays."""
    best, default = confirmation.get("best"), confirmation.get("default") or {}
    base_name = confirmation.get("baseline_name") or "the cache-model default"
    if best is None:
        return "no candidate was confirmed"
    if AS_DEFAULT in (best.get("flags") or []):
        return (
            f"the best tiling runs as {base_name} does: its blocks past the problem's dimensions are the "
            "whole dimension, as the default's are, so it is the default measured twice"
        )
    if "gflops_ci" not in default:
        return None  # the default failed: any confirmed tiling that works is better
    if best["gflops_ci"][0] > default["gflops_ci"][1]:
        return None
    return (
        f"the best tiling ({best['gflops']:.1f} GFLOPS, 95% CI {best['gflops_ci'][0]:.1f}-"
        f"{best['gflops_ci'][1]:.1f}) is not faster than {base_name} ({default['gflops']:.1f}, "
        f"95% CI {default['gflops_ci'][0]:.1f}-{default['gflops_ci'][1]:.1f}) beyond the confidence intervals"
    )
