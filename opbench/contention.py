"""Contention capture: what else used our CPUs while a case was measured, from /proc.

Per window (one visit of a case): the busy time of the CPUs this process may run on (/proc/stat: user,
nice, system, irq, softirq) less this process's own CPU time is what other processes used there; steal is
what the hypervisor gave to other guests. Both are shares of the window's CPU capacity (wall x CPUs). A
visit where either reaches CONTENDED_SHARE is `contended`. Per run: the load average, the other processes
that used the most CPU time during the run, CPU frequency and governor where readable.

/proc/stat counts in clock ticks (USER_HZ, usually 10 ms), so a share is only resolved to about
ticks / (wall x CPUs); windows shorter than MIN_WINDOW_S are not judged alone. The visits of one case are
also judged together (`pooled`): three 38 ms visits beside a process spinning on one of two CPUs were
each too short to judge, and together plainly contended.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opbench.blocks import Environment
from opbench.record_blocks import ProcessUseBlock, SnapshotBlock, WindowBlock

CONTENDED_SHARE = 0.10
MIN_WINDOW_S = 0.05
TOP_PROCESSES = 5

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
# Helper processes whose CPU time is the measurement's own (an A/B side run by another Python environment:
# backends/remote.py), not contention: adopt(pid) while they live.
_ADOPTED: set[int] = set()


def adopt(pid: int) -> None:
    _ADOPTED.add(pid)


def release(pid: int) -> None:
    _ADOPTED.discard(pid)


def adopted_threads_cpu_ns() -> int:
    """CPU time (ns, from schedstat) of every thread of the helper processes adopted (0 where unreadable):
    machine.wait_until_quiet waits for their pools too."""
    total = 0
    for pid in list(_ADOPTED):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # the thread ended meanwhile
    return total


def _process_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return (int(fields[11]) + int(fields[12])) * _TICK_S
    except (IndexError, ValueError):
        return 0.0


def own_cpu_s() -> float:
    """This process's CPU time, and that of the helper processes it adopted."""
    return time.process_time() + sum(_process_seconds(pid) for pid in list(_ADOPTED))


@dataclass(frozen=True)
class CpuTimes:
    busy_s: float
    steal_s: float
    own_s: float  # this process's CPU time, every thread
    wall_s: float

    @staticmethod
    def read(cpus: list[int]) -> CpuTimes | None:
        try:
            lines = Path("/proc/stat").read_text().splitlines()
        except OSError:
            return None
        wanted = {f"cpu{c}" for c in cpus}
        busy = steal = 0
        seen = 0
        for line in lines:
            parts = line.split()
            if not parts or parts[0] not in wanted:
                continue
            v = [int(x) for x in parts[1:9]]  # user nice system idle iowait irq softirq steal
            busy += v[0] + v[1] + v[2] + v[5] + v[6]
            steal += v[7]
            seen += 1
        if seen == 0:
            return None
        return CpuTimes(busy * _TICK_S, steal * _TICK_S, own_cpu_s(), time.perf_counter())


def cpu_mhz(cpus: list[int]) -> float | None:
    """Mean current frequency of `cpus`: cpufreq's scaling_cur_freq, else /proc/cpuinfo's cpu MHz."""
    values = []
    for c in cpus:
        try:
            values.append(
                int(Path(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq").read_text()) / 1e3
            )
        except (OSError, ValueError):
            break
    if len(values) == len(cpus) and values:
        return sum(values) / len(values)
    try:
        mhz: dict[int, float] = {}
        proc = None
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("processor"):
                proc = int(line.split(":", 1)[1])
            elif line.startswith("cpu MHz") and proc is not None:
                mhz[proc] = float(line.split(":", 1)[1])
        got = [mhz[c] for c in cpus if c in mhz]
        return sum(got) / len(got) if got else None
    except (OSError, ValueError):
        return None


def governor(cpus: list[int]) -> str | None:
    names = set()
    for c in cpus:
        try:
            names.add(Path(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor").read_text().strip())
        except OSError:
            return None
    return ",".join(sorted(names)) or None


def _process_cpu_s() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds so far) of every process readable in /proc."""
    out: dict[int, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        lpar, rpar = text.find("("), text.rfind(")")
        fields = text[rpar + 2 :].split()
        try:
            out[int(entry.name)] = (text[lpar + 1 : rpar], (int(fields[11]) + int(fields[12])) * _TICK_S)
        except (IndexError, ValueError):
            continue
    return out


def snapshot(cpus: list[int]) -> SnapshotBlock:
    """The machine now: load average, run queue, frequency and governor of our CPUs."""
    out: SnapshotBlock = {"cpus": cpus}
    try:
        load = Path("/proc/loadavg").read_text().split()
        out["loadavg"] = [float(x) for x in load[:3]]
        out["procs_running"] = int(load[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        out["loadavg"] = None
    out["cpu_mhz"] = cpu_mhz(cpus)
    out["governor"] = governor(cpus)
    return out


class Monitor:
    """Measures contention over windows (visits) and over the whole run."""

    def __init__(self, cpus: list[int], read: Callable[[list[int]], CpuTimes | None] = CpuTimes.read) -> None:
        self.cpus = cpus
        self._read = read
        self.start_snapshot = snapshot(cpus)
        self._run_start = read(cpus)
        self._procs_last = _process_cpu_s()
        self._used: dict[int, tuple[str, float]] = {}  # other processes' CPU seconds during the run
        self.contended_visits = 0
        self.visits = 0
        self.worst: WindowBlock | None = None

    def begin(self) -> CpuTimes | None:
        return self._read(self.cpus)

    def end(self, start: CpuTimes | None) -> WindowBlock:
        """Contention over the window since `start`: others' CPU share, steal share, flag."""
        stop = self._read(self.cpus)
        if start is None or stop is None:
            return {"available": False}
        out = shares(start, stop, len(self.cpus))
        out["cpu_mhz"] = cpu_mhz(self.cpus)
        self.visits += 1
        if out["contended"]:
            self._scan()  # now, while the competitor still exists: one that ends before the run does counts
            self.contended_visits += 1
            if self.worst is None or out["others_share"] > self.worst["others_share"]:
                self.worst = out
        return out

    def _scan(self) -> None:
        """Add the CPU time each other process used since the last scan."""
        me = os.getpid()
        now = _process_cpu_s()
        for pid, (name, cpu) in now.items():
            if pid == me or pid in _ADOPTED:
                continue
            delta = cpu - self._procs_last.get(pid, (name, 0.0))[1]
            if delta > 0:
                self._used[pid] = (name, self._used.get(pid, (name, 0.0))[1] + delta)
        self._procs_last = now

    def finish(self, contended_cases: int | None = None) -> Environment:
        """The run's environment block: start and end snapshots, the run's shares, the busiest other
        processes and the warnings. `contended_cases`: how many cases the caller flagged contended (their
        visits judged together too, so there can be some where no single visit was)."""
        stop = self._read(self.cpus)
        start = self._run_start
        run = shares(start, stop, len(self.cpus)) if start is not None and stop is not None else None
        self._scan()
        used: list[ProcessUseBlock] = [
            {"pid": pid, "name": name, "cpu_s": round(cpu, 2)}
            for pid, (name, cpu) in self._used.items()
            if cpu >= 0.05
        ]
        others = sorted(used, key=lambda p: -float(p["cpu_s"]))[:TOP_PROCESSES]
        env = Environment(
            start=self.start_snapshot, end=snapshot(self.cpus), run=run, other_processes=tuple(others)
        )
        if self.contended_visits or contended_cases:
            top = others[0] if others else None
            who = f"; busiest: {top['name']} (pid {top['pid']}, {top['cpu_s']:g} s CPU)" if top else ""
            worst = self.worst
            how = (
                f" (up to {100 * worst['others_share']:.0f}% of them, steal up to "
                f"{100 * worst['steal_share']:.0f}%)"
                if worst
                else ""
            )
            cases = (
                f"; {contended_cases} case(s) flagged contended (a case's visits too short to judge alone "
                "are judged together)"
                if contended_cases is not None
                else ": those cases are flagged contended"
            )
            env = env.warned(
                f"{self.contended_visits} of {self.visits} measurement(s) ran while other processes used our "
                f"CPUs{how}{who}{cases}"
            )
        return env


def pooled(windows: list[WindowBlock]) -> WindowBlock | None:
    """The shares over several windows of the same CPUs together (their wall-weighted means), judged like
    one window; None when no window was measured."""
    got = [w for w in windows if w.get("wall_s")]
    wall = sum(w["wall_s"] for w in got)
    if not got or wall <= 0:
        return None
    others = sum(w["others_share"] * w["wall_s"] for w in got) / wall
    steal = sum(w["steal_share"] * w["wall_s"] for w in got) / wall
    return {
        "wall_s": round(wall, 4),
        "others_share": round(others, 4),
        "steal_share": round(steal, 4),
        "contended": wall >= MIN_WINDOW_S and max(others, steal) >= CONTENDED_SHARE,
    }


def shares(start: CpuTimes, stop: CpuTimes, ncpus: int) -> WindowBlock:
    wall = max(stop.wall_s - start.wall_s, 1e-9)
    capacity = wall * max(ncpus, 1)
    others = max(0.0, (stop.busy_s - start.busy_s) - (stop.own_s - start.own_s))
    steal = max(0.0, stop.steal_s - start.steal_s)
    out: WindowBlock = {
        "wall_s": round(wall, 4),
        "others_cpu_s": round(others, 4),
        "others_share": round(others / capacity, 4),
        "steal_share": round(steal / capacity, 4),
    }
    judged = wall >= MIN_WINDOW_S
    out["contended"] = judged and (
        out["others_share"] >= CONTENDED_SHARE or out["steal_share"] >= CONTENDED_SHARE
    )
    return out
