"""A portfolio of tilings for a set of shapes (`opbench tune --portfolio K`): at most K tilings and a rule
that picks one per shape, scored by the count-weighted geometric mean, over the shapes, of (the shape's own
best time) / (the time of the tiling the rule gives it). This module is the arithmetic, on a partly measured
shapes x tilings grid; portfolio_run.py measures the grid.

- **The rule** is the nearest listed shape's tiling (`rule`): the shape whose sizes are nearest in sum of
  |log ratio| among those with the same exact fields (tuned.shape_distance, which `sweep --tuned` looks
  records up by), so a portfolio saved as records dispatches unlisted shapes the same way.
- **Selection** (`select`) is greedy, then swaps until none helps: a member out, a non-member in, kept when
  the score rises (Helion's bounded portfolio, pytorch/helion#3360, does the same on a full matrix).
- **The grid is not measured whole.** An unmeasured cell is estimated (`estimate`) from the same tiling's
  relative speed on the other shapes, weighted by how near they are; `next_cells` names the cells the
  current selection rests on and that are not yet measured: on each shape, the members estimated within
  FILL_MARGIN of its fastest. Measuring them and selecting again until none is left means that every
  shape's member, and so every speed the portfolio reports, was measured; a member estimated well behind
  on a shape is not measured there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from opbench.tuned import shape_distance

FAILED = math.inf  # a cell that was measured and failed (crash, wrong answer, refused tiles)
Cells = Mapping[tuple[int, int], float]  # (shape index, tiling index) -> seconds
BANDWIDTH = 1.0  # the estimate's nearness scale, in sum of |log ratio| (a factor e in one size)
PRIOR_SPEED = 0.5  # the relative speed assumed for a tiling on a shape nothing near has measured
FILL_MARGIN = 0.1  # a member estimated this far behind a shape's fastest member is not measured there
RANK_PRIOR = 0.25  # the weight of PRIOR_SPEED in `ranked`: that of a shape a factor e^1.4 away in one size


@dataclass
class Grid:
    """Shapes (their fields) with weights (counts), tilings (each a key naming it), and the cells measured:
    (shape index, tiling index) -> seconds, FAILED for a failure."""

    shapes: list[Mapping[str, int]]
    weights: list[float]
    tilings: list[str] = field(default_factory=list)
    times: dict[tuple[int, int], float] = field(default_factory=dict)

    def add_tiling(self, key: str) -> int:
        if key not in self.tilings:
            self.tilings.append(key)
        return self.tilings.index(key)

    def put(self, shape: int, key: str, seconds: float) -> None:
        self.times[(shape, self.add_tiling(key))] = seconds

    def best(self, shape: int) -> float:
        """The shape's own best: the fastest cell measured on it (FAILED where none ran)."""
        return min((t for (i, _), t in self.times.items() if i == shape), default=FAILED)

    def best_tiling(self, shape: int) -> int | None:
        cells = [(t, j) for (i, j), t in self.times.items() if i == shape and t < FAILED]
        return min(cells)[1] if cells else None

    def speed(self, shape: int, tiling: int, estimates: Cells) -> float:
        """best / time of a cell (0 for a failure), measured or else estimated (0 where neither)."""
        t = self.times.get((shape, tiling), estimates.get((shape, tiling), FAILED))
        best = self.best(shape)
        return 0.0 if t == FAILED or best == FAILED else min(1.0, best / t)


def score(grid: Grid, chosen: Sequence[int], estimates: Cells | None = None) -> float:
    """The weighted geometric mean over the shapes of the chosen tilings' best relative speed (each shape
    served by whichever of them is fastest on it: the rule on a listed shape); 0 where a shape has none."""
    est = estimates or {}
    total = sum(grid.weights)
    if not chosen or total <= 0:
        return 0.0
    log_sum = 0.0
    for i, w in enumerate(grid.weights):
        s = max(grid.speed(i, j, est) for j in chosen)
        if s <= 0:
            return 0.0
        log_sum += w * math.log(s)
    return math.exp(log_sum / total)


def assign(grid: Grid, chosen: Sequence[int], estimates: Cells | None = None) -> list[int]:
    """Each shape's tiling among `chosen`: the fastest on it (ties to the earlier member)."""
    est = estimates or {}
    return [
        max(chosen, key=lambda j: (grid.speed(i, j, est), -chosen.index(j))) for i in range(len(grid.shapes))
    ]


def select(
    grid: Grid,
    k: int,
    among: Sequence[int] | None = None,
    estimates: Cells | None = None,
) -> list[int]:
    """At most k tilings of `among` (default: all) maximising score: greedy additions, then single swaps
    while one raises the score (by more than 1e-12, so that it ends), then any member the others cover
    as well dropped."""
    pool = list(range(len(grid.tilings)) if among is None else among)
    chosen: list[int] = []
    while len(chosen) < min(k, len(pool)):
        gains = [(score(grid, [*chosen, j], estimates), -j) for j in pool if j not in chosen]
        best, neg = max(gains)
        if chosen and best <= score(grid, chosen, estimates) + 1e-12:
            break  # nothing left adds anything: a smaller portfolio serves as well
        chosen.append(-neg)
    improved = True
    while improved:
        improved = False
        current = score(grid, chosen, estimates)
        for a in list(chosen):
            for b in pool:
                if b in chosen:
                    continue
                trial = [b if x == a else x for x in chosen]
                if score(grid, trial, estimates) > current + 1e-12:
                    chosen, current, improved = trial, score(grid, trial, estimates), True
                    break
            if improved:
                break
    for a in list(chosen):  # a member the others cover as well goes: fewer tilings serve the same
        rest = [x for x in chosen if x != a]
        if rest and score(grid, rest, estimates) >= score(grid, chosen, estimates) - 1e-12:
            chosen = rest
    return chosen


def _measured(grid: Grid, tiling: int, bests: Sequence[float]) -> list[tuple[int, float]]:
    """(shape index, seconds) of a tiling's cells on the shapes where something ran."""
    return [(i, t) for i in range(len(grid.shapes)) if (t := grid.times.get((i, tiling))) is not None
            and bests[i] < FAILED]  # fmt: skip


def _transfer(grid: Grid, fields: Mapping[str, int], known: Sequence[tuple[int, float]],
              bests: Sequence[float], prior: float = 0.0) -> float:  # fmt: skip
    """A tiling's relative speed on a shape of `fields`: the geometric mean of its relative speeds `known`
    ((shape index, seconds) pairs) weighted by exp(-distance / BANDWIDTH), shapes whose exact fields differ
    left out, with PRIOR_SPEED counted at weight `prior` (PRIOR_SPEED where nothing counts)."""
    num, den = prior * math.log(PRIOR_SPEED), prior
    for other, t in known:
        d = shape_distance(fields, grid.shapes[other])
        if d is None:
            continue
        w = math.exp(-d / BANDWIDTH)
        speed = bests[other] / t if t < FAILED else 1e-3  # a failure elsewhere: unlikely here
        num += w * math.log(min(1.0, speed))
        den += w
    return math.exp(num / den) if den > 0 else PRIOR_SPEED


def estimate(grid: Grid) -> dict[tuple[int, int], float]:
    """A time for every unmeasured cell: the shape's best over the tiling's estimated relative speed, the
    geometric mean of its measured relative speeds on the other shapes weighted by exp(-distance /
    BANDWIDTH) (shapes whose exact fields differ do not count); PRIOR_SPEED where none counts."""
    out: dict[tuple[int, int], float] = {}
    n = len(grid.shapes)
    bests = [grid.best(i) for i in range(n)]
    for j in range(len(grid.tilings)):
        known = _measured(grid, j, bests)
        for i in range(n):
            if (i, j) not in grid.times and bests[i] < FAILED:
                out[(i, j)] = bests[i] / _transfer(grid, grid.shapes[i], known, bests)
    return out


def ranked(grid: Grid, fields: Mapping[str, int], prior: float = RANK_PRIOR) -> list[int]:
    """The tilings measured on some shape, most promising first for a shape of `fields` that has measured
    none: by the relative speed the measured shapes near it transfer (as `estimate`), shrunk towards
    PRIOR_SPEED with weight `prior` so that one far shape's best does not outrank what near shapes agree
    on (ties: the earlier tiling)."""
    bests = [grid.best(i) for i in range(len(grid.shapes))]
    speeds = []
    for j in range(len(grid.tilings)):
        known = _measured(grid, j, bests)
        if known:
            speeds.append((-_transfer(grid, fields, known, bests, prior), j))
    return [j for _, j in sorted(speeds)]


def next_cells(
    grid: Grid, k: int, among: Sequence[int] | None = None, margin: float = FILL_MARGIN
) -> tuple[list[int], list[tuple[int, int]]]:
    """The portfolio selected on the grid with its unmeasured cells estimated, and the cells its choice
    rests on that are still unmeasured (what to measure next; none: every shape's member is measured): on
    each shape, the members whose speed there, measured or estimated, is within `margin` of the fastest
    member's. A member estimated further behind on a shape is not measured there: it would not serve it."""
    est = estimate(grid)
    chosen = select(grid, k, among, est)
    missing = []
    for i in range(len(grid.shapes)):
        speeds = {j: grid.speed(i, j, est) for j in chosen}
        top = max(speeds.values(), default=0.0)
        missing += [(i, j) for j in chosen if (i, j) not in grid.times and speeds[j] >= top * (1.0 - margin)]
    return chosen, missing


def rule(
    listed: Sequence[Mapping[str, int]], assigned: Sequence[int], shape: Mapping[str, int]
) -> int | None:
    """The tiling of the listed shape nearest `shape` (tuned.shape_distance; the earlier on a tie), None
    where no listed shape has its exact fields."""
    best: tuple[float, int] | None = None
    for i, other in enumerate(listed):
        d = shape_distance(shape, other)
        if d is not None and (best is None or d < best[0]):
            best = (d, assigned[i])
    return None if best is None else best[1]
