"""benchdnn-style problem descriptors: `--problem DESC` and `--batch-file FILE` on sweep, tune and ab, and
the canonical descriptor of a shape (`describe`), which every record's repro command uses.

The grammar is oneDNN benchdnn's, for the ops opbench runs:

    conv    [gX][mbX]icX[ihX][iwX]ocX[ohX][owX][khX][kwX][shX][swX][phX][pwX][dhX][dwX]   '_' ignored
            defaults: g 1, mb 2, strides 1, dilation 0 (benchdnn counts the taps skipped: opbench's
            dilation is dh + 1), iw = ih, kw = kh; a problem without ih (iw, kw, ... only) is 1-D, run as
            2-D with height 1. ph/pw pad the top and the left; with an output size given, the bottom and
            right padding follow from it (benchdnn's padding_r), and ph/pw, when not given, are half of all
            the padding it needs. A key given twice takes the later value (with a note).
    matmul  MxK:KxN, or BxMxK:BxKxN (batched: B may be several dimensions, B1xB2xMxK; their product is the
            batch)                                      a third `:MxN` part (the output) is checked
    rnn     [lX][tX][mbX]sicX[slcX][dhcX][dicX]         defaults: l 1, t 1, mb 2, slc = dhc = sic,
                                                        dic = dhc; --alg VANILLA_RNN (RELU activation),
                                                        VANILLA_LSTM, LBR_GRU
Any of them may end in a name: `n"resnet_50:conv1"` or `nNAME`.

A descriptor under the options in force (`Options`: what a batch file's benchdnn options set, read by
batchfiles.py) expands into a Problem for each combination of their values opbench runs and a Skipped, with
its reason, for each it does not (`expand`); `parse` wants one that runs (--problem).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod
from typing import Any

from opbench.documents import Scalar, SkippedDict
from opbench.errors import UsageError
from opbench.ops import OPS, conv, gemm
from opbench.ops.base import Op, Shape
from opbench.ops.recurrent_shape import RecurrentShape

RECURRENT_ALGS = {"VANILLA_RNN": "rnn", "VANILLA_LSTM": "lstm", "LBR_GRU": "gru"}
ALG_OF = {op: alg for alg, op in RECURRENT_ALGS.items()}
REFUSED_ALGS = {
    "VANILLA_GRU": "it applies the reset gate before the recurrent product; opbench's gru is "
    "torch's (linear before reset): use --alg=LBR_GRU",
    "VANILLA_AUGRU": "AUGRU is not an opbench op",
    "LBR_AUGRU": "AUGRU is not an opbench op",
}
DTYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}
DRIVERS = {"conv": "conv", "matmul": "gemm", "rnn": "rnn"}
FORWARD = ("FWD_B", "FWD_D", "FWD_I")

_CONV_KEYS = ("g", "mb", "ic", "ih", "iw", "oc", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw")
_H_KEYS = ("ih", "oh", "kh", "sh", "ph", "dh")
_RNN_KEYS = ("l", "t", "mb", "sic", "slc", "dhc", "dic")
_FLAT_DEPTH = {"id": 1, "od": 1, "kd": 1, "sd": 1, "pd": 0, "dd": 0}  # the depth entries of a 2-D problem
_THREE_D = tuple(_FLAT_DEPTH)
_ENTRY = re.compile(r"([a-z]+)(\d+)")


class Unrunnable(ValueError):
    """A well-formed problem opbench does not run (`kind`: what makes it so, for the summary)."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind


@dataclass(frozen=True)
class Problem:
    """One descriptor, read: the op it maps to, its shape, and the dtypes its options named (None: the
    command line's)."""

    op: Op[Any]
    shape: Shape
    dtypes: tuple[str, ...] | None
    text: str
    where: str  # "--problem" or "FILE:LINE"
    name: str = ""
    notes: tuple[str, ...] = ()
    count: int = 1  # calls of this problem a model makes (a batch file's `# count=N`: `opbench shapes`)


@dataclass(frozen=True)
class Skipped:
    """A problem of a batch file that opbench does not run, and why (`kind` groups the reasons)."""

    text: str
    where: str
    kind: str
    reason: str
    family: str = ""  # conv, gemm or recurrent: the descriptor's form

    def to_dict(self) -> SkippedDict:
        return {
            "where": self.where,
            "text": self.text,
            "family": self.family,
            "kind": self.kind,
            "reason": self.reason,
        }


@dataclass
class Options:
    """The benchdnn options in force at a point of a batch file (lists: every value runs)."""

    driver: str | None = None
    cfgs: tuple[str, ...] | None = None
    dirs: tuple[str, ...] = ("FWD_B",)
    algs: tuple[str, ...] | None = None
    activations: tuple[str, ...] | None = None
    mbs: tuple[int, ...] = (0,)
    ts: tuple[int, ...] = (0,)  # rnn: --t and --l override the descriptor's (0: its own)
    ls: tuple[int, ...] = (0,)
    directions: tuple[str, ...] = ("left2right",)
    match: re.Pattern[str] | None = None
    changes: tuple[tuple[str, str], ...] = ()  # (option, what it changes) in force
    unknown: str | None = None  # an option opbench does not read, in force

    @property
    def dtypes(self) -> tuple[str, ...] | None:
        """The runnable dtypes the cfgs name (None: the command line's)."""
        if self.cfgs is None:
            return None
        return tuple(dict.fromkeys(DTYPES[c] for c in self.cfgs if c in DTYPES))


def _name_split(text: str) -> tuple[str, str]:
    """(entries, name): the `n"NAME"` or `nNAME` tail split off (no other entry starts with n)."""
    i = text.find("n")
    if i < 0:
        return text, ""
    return text[:i], text[i + 1 :].strip('"')


def _entries(text: str, keys: tuple[str, ...], what: str, notes: list[str]) -> dict[str, int]:
    """NAME<integer> entries; a key given twice takes the later value, with a note (benchdnn's rule)."""
    body = text.replace("_", "")
    out: dict[str, int] = {}
    pos = 0
    while pos < len(body):
        m = _ENTRY.match(body, pos)
        if m is None:
            raise ValueError(f"cannot read '{body[pos:]}' as NAME<integer> entries")
        key, value = m.group(1), int(m.group(2))
        pos = m.end()
        if key in _THREE_D:  # a depth of 1 (id1 kd1 od1 sd1 pd0 dd0) is a 2-D problem
            if value != _FLAT_DEPTH[key]:
                raise Unrunnable(
                    "3-D", f"{key}{value} makes it a 3-D {what}; opbench runs 1-D and 2-D convolutions"
                )
            continue
        if key not in keys:
            raise ValueError(f"unknown {what} entry '{key}' (known: {' '.join(keys)})")
        if key in out and out[key] != value:
            notes.append(
                f"'{key}' given twice: the later {key}{value} is used (not {key}{out[key]}), as benchdnn does"
            )
        out[key] = value
    return out


def _padding(axis: str, size: int, k: int, st: int, d: int, o: int | None, p: int | None) -> tuple[int, int]:
    """(start, end) padding of one axis, as benchdnn derives them: without an output size both sides are p
    (0 if not given); with one, p when not given is half of what it needs (rounded down) and the end is what
    makes that output size."""
    extent = (k - 1) * d + 1
    if o is None:
        start = p or 0
        end = start
    else:
        if o < 1:
            raise ValueError(f"'o{axis}' must be >= 1, got {o}")
        need = (o - 1) * st - size + extent
        start = int(need / 2) if p is None else p  # C's division, as benchdnn's
        end = need - start
    if start < 0:
        raise Unrunnable(
            "negative padding", f"o{axis}{o} needs p{axis}{start}: negative padding crops the input"
        )
    if end < 0:  # the last rows are not read: the smallest end padding that gives the same output
        out = (size + start - extent) // st + 1
        if out != o:
            raise Unrunnable(
                "negative padding",
                f"o{axis}{o} needs {end} padding at the end: negative padding crops the input",
            )
        end = 0
    if (size + start + end - extent) // st + 1 < 1:
        raise ValueError(f"k{axis}{k} (dilation {d - 1}) does not fit i{axis}{size} with p{axis}{start}")
    return start, end


def _conv(text: str, mb: int, notes: list[str]) -> Shape:
    e = _entries(text, _CONV_KEYS, "convolution", notes)
    for key in ("ic", "oc"):
        if key not in e:
            raise ValueError(f"'{key}' is required")
    if "ih" not in e:
        if any(k in e for k in _H_KEYS) or "iw" not in e:
            raise ValueError("'ih' is required (a 1-D convolution gives iw, kw, ... only)")
        e.update(ih=1, kh=1, sh=1, ph=0, dh=0, oh=1)  # 1-D: benchdnn's meaning, height 1
        if "kw" not in e:
            raise ValueError("'kw' is required")
    if "kh" not in e:
        raise ValueError("'kh' is required")
    g = e.get("g", 1)
    n = mb or e.get("mb", 2)
    # benchdnn's one implicit rule: a width value not given is the height's (a square problem)
    h, r, sh, dh = e["ih"], e["kh"], e.get("sh", 1), e.get("dh", 0)
    w, s, sw, dw = e.get("iw", h), e.get("kw", r), e.get("sw", sh), e.get("dw", dh)
    oh, ow = e.get("oh"), e.get("ow", e.get("oh") if "iw" not in e else None)
    ph, pw = e.get("ph"), e.get("pw", e.get("ph") if "ow" not in e else None)
    for key, v in (("mb", n), ("g", g), ("ic", e["ic"]), ("oc", e["oc"]), ("ih", h), ("iw", w), ("kh", r),
                   ("kw", s), ("sh", sh), ("sw", sw)):  # fmt: skip
        if v < 1:
            raise ValueError(f"'{key}' must be >= 1, got {v}")
    top, bottom = _padding("h", h, r, sh, dh + 1, oh, ph)
    left, right = _padding("w", w, s, sw, dw + 1, ow, pw)
    return conv.OP.shape_from_case(
        {"n": n, "c": e["ic"], "h": h, "w": w, "k": e["oc"], "r": r, "s": s, "stride_h": sh, "stride_w": sw,
         "pad_h": top, "pad_w": left, "pad_h_end": bottom, "pad_w_end": right, "dil_h": dh + 1,
         "dil_w": dw + 1, "groups": g}
    )  # fmt: skip


def _dims(part: str) -> list[int]:
    try:
        return [int(v) for v in part.split("x")]
    except ValueError:
        raise ValueError("expected MxK:KxN with integer sizes") from None


def _matmul(text: str) -> Shape:
    parts = text.replace("_", "").split(":")
    if len(parts) not in (2, 3):
        raise ValueError("expected MxK:KxN or BxMxK:BxKxN")
    a, b = _dims(parts[0]), _dims(parts[1])
    if len(a) < 2 or len(b) < 2:
        raise ValueError("expected MxK:KxN or BxMxK:BxKxN")
    (m, k), (k2, n) = a[-2:], b[-2:]
    if k != k2:
        raise ValueError(f"the inner dimensions differ ({k} and {k2})")
    lead_a, lead_b = a[:-2], b[:-2]
    if lead_a != lead_b:
        if len(lead_a) == len(lead_b) and all(
            x == y or 1 in (x, y) for x, y in zip(lead_a, lead_b, strict=True)
        ):
            raise Unrunnable("broadcast", "a broadcast batched matmul (batch dimensions of 1 against more)")
        if len(lead_a) != len(lead_b):
            raise Unrunnable("broadcast", "a broadcast matmul (operands of different ranks)")
        raise ValueError(
            f"the batch dimensions differ ({'x'.join(map(str, lead_a))} and {'x'.join(map(str, lead_b))})"
        )
    if len(parts) == 3 and _dims(parts[2]) != [*lead_a, m, n]:
        raise ValueError(f"the output '{parts[2]}' is not {'x'.join(map(str, [*lead_a, m, n]))}")
    if min(a + b) < 1:
        raise ValueError("sizes must be >= 1")
    return gemm.OP.shape_from_case({"m": m, "n": n, "k": k, "batch": prod(lead_a)})


def _recurrent(
    text: str, op_name: str, sizes: dict[str, int], activation: str | None, notes: list[str]
) -> Shape:
    e = _entries(text, _RNN_KEYS, "rnn", notes)
    e.update({k: v for k, v in sizes.items() if v})  # --mb, --t, --l
    if "sic" not in e:
        raise ValueError("'sic' is required")
    if e.get("l", 1) != 1:
        raise Unrunnable("layers", f"l{e['l']}: opbench's recurrent ops run one layer")
    hidden = e.get("dhc", e["sic"])
    if e["sic"] != hidden:
        raise Unrunnable(
            "state size", f"sic{e['sic']} differs from dhc{hidden}: opbench's h0 has the hidden size"
        )
    if e.get("dic", hidden) != hidden:
        raise Unrunnable(
            "projection", f"dic{e['dic']} differs from dhc{hidden}: a projection is not an opbench op"
        )
    fields: dict[str, Scalar] = {
        "seq_len": e.get("t", 1),
        "batch": e.get("mb", 2),
        "input_size": e.get("slc", e["sic"]),
        "hidden": hidden,
    }
    if op_name == "rnn":
        activation = activation or "RELU"  # benchdnn's default for VANILLA_RNN
        if activation not in ("RELU", "TANH"):
            raise Unrunnable("activation", f"--activation={activation}: opbench's rnn is tanh or ReLU")
        fields["relu"] = int(activation == "RELU")
    return OPS[op_name].shape_from_case(fields)


def _recurrent_op(command_op: str | None, alg: str | None) -> str:
    if alg is None:
        return command_op if command_op in ALG_OF else "rnn"  # benchdnn's default alg is VANILLA_RNN
    if alg in REFUSED_ALGS:
        raise Unrunnable("alg", f"--alg={alg}: {REFUSED_ALGS[alg]}")
    if alg not in RECURRENT_ALGS:
        raise ValueError(f"unknown --alg={alg} (known: {', '.join([*RECURRENT_ALGS, *REFUSED_ALGS])})")
    return RECURRENT_ALGS[alg]


def _kind(text: str) -> str:
    """conv, gemm or recurrent, from the descriptor's form."""
    if ":" in text and "x" in text.split(":")[0]:
        return "gemm"
    if "sic" in text:
        return "recurrent"
    return "conv"


def _one(
    entries: str, kind: str, command_op: str | None, sizes: dict[str, int], alg: str | None,
    activation: str | None, notes: list[str],
) -> tuple[str, Any]:  # fmt: skip
    """(op, shape) of one combination of the options' values (`sizes`: --mb, --t, --l; 0 where not given)."""
    if kind == "gemm":
        op_name, shape = "gemm", _matmul(entries)
    elif kind == "conv":
        op_name, shape = "conv", _conv(entries, sizes["mb"], notes)
    else:
        op_name = _recurrent_op(command_op, alg)
        shape = _recurrent(entries, op_name, sizes, activation, notes)
    if command_op is not None and op_name != command_op:
        detail = f" (--alg={ALG_OF[op_name]})" if op_name in ALG_OF else ""
        raise Unrunnable("other op", f"a {op_name} problem{detail}, but the command runs {command_op}")
    return op_name, shape


def expand(
    text: str, command_op: str | None = None, where: str = "--problem", opts: Options | None = None
) -> list[Problem | Skipped]:
    """A descriptor under the options in force: a Problem for each combination of their values opbench
    runs, a Skipped for each it does not; UsageError naming `where` if it is malformed."""
    opts = opts or Options()
    out: list[Problem | Skipped] = []
    notes: list[str] = []
    entries, name = _name_split(text.strip())
    kind = _kind(entries)

    def skip(why: str, reason: str) -> None:
        if not any(isinstance(s, Skipped) and s.reason == reason for s in out):
            out.append(Skipped(text, where, why, reason, kind))

    try:
        if opts.driver is not None:
            wanted = "recurrent" if opts.driver == "rnn" else opts.driver
            if kind != wanted:
                raise ValueError(f"a {kind} descriptor under --{_driver_flag(opts.driver)}")
        if opts.match is not None and not opts.match.fullmatch(text.strip()):
            skip("--match", f"not matched by --match={opts.match.pattern}")
            return out
        if opts.unknown is not None:
            skip("option", f"{opts.unknown} is in force: an option opbench does not read")
            return out
        if opts.changes:
            option, what = opts.changes[0]
            skip("attributes", f"{option} makes it a problem with {what}")
            return out
        dropped = [c for c in opts.cfgs or () if c not in DTYPES]
        if dropped:
            skip(
                "dtype",
                f"--cfg={','.join(dropped)}: opbench runs f32, f16 and bf16 with one type for every tensor",
            )
        if opts.cfgs is not None and not opts.dtypes:
            return out
        for d in opts.dirs:
            if d not in FORWARD:
                skip("backward", f"--dir={d}: a backward problem (opbench measures backward with --pass bwd)")
        if not any(d in FORWARD for d in opts.dirs):
            return out
        recurrent = kind == "recurrent"
        for direction in opts.directions if recurrent else ("left2right",):
            if direction != "left2right":
                skip("direction", f"--direction={direction}: opbench's recurrent ops run left2right")
        if recurrent and "left2right" not in opts.directions:
            return out
        combos = [
            ({"mb": mb, "t": t, "l": layers}, alg, act)
            for mb in opts.mbs
            for t in (opts.ts if recurrent else (0,))
            for layers in (opts.ls if recurrent else (0,))
            for alg in ((opts.algs or (None,)) if recurrent else (None,))
            for act in ((opts.activations or (None,)) if recurrent else (None,))
        ]
        for sizes, alg, act in combos:
            try:
                op_name, shape = _one(entries, kind, command_op, sizes, alg, act, notes)
            except Unrunnable as u:
                skip(u.kind, str(u))
                continue
            problem = Problem(
                OPS[op_name], shape, opts.dtypes, text, where, name, tuple(dict.fromkeys(notes))
            )
            if problem not in out:
                out.append(problem)
    except Unrunnable as u:
        skip(u.kind, str(u))
    except ValueError as e:
        raise UsageError(f"{where}: '{text}': {e}") from None
    return out


def parse(
    text: str, command_op: str | None = None, where: str = "--problem", opts: Options | None = None
) -> Problem:
    """One descriptor that must run (--problem): its first problem; UsageError naming `where` and the
    problem (malformed, or why opbench does not run it) otherwise."""
    items = expand(text, command_op, where, opts)
    for item in items:
        if isinstance(item, Problem):
            return item
    reasons = [item.reason for item in items if isinstance(item, Skipped)]
    raise UsageError(f"{where}: '{text}': {reasons[0]}")


def _driver_flag(driver: str) -> str:
    return {v: k for k, v in DRIVERS.items()}.get(driver, driver)


def options(activation: str | None = None) -> Options:
    """The options a command line starts a problem with (--nonlinearity: the rnn's activation)."""
    return Options(activations=(activation.upper(),) if activation else None)


def describe(op_name: str, shape: Shape) -> str:
    """The canonical descriptor of a shape: `parse(describe(op, s), op).shape == s`. A conv whose sides are
    padded differently is written with its output size (benchdnn's form): its end padding reads back as the
    least that gives that output, the same computation where a shape pads rows no output reads."""
    if isinstance(shape, gemm.GemmShape):
        lead = f"{shape.batch}x" if shape.batch > 1 else ""
        return f"{lead}{shape.m}x{shape.k}:{lead}{shape.k}x{shape.n}"
    if isinstance(shape, conv.ConvShape):
        s = shape
        out = "" if s.symmetric else f"oh{s.out_h}ow{s.out_w}"
        return (
            f"g{s.groups}mb{s.n}_ic{s.c}ih{s.h}iw{s.w}_oc{s.k}{out}_kh{s.r}kw{s.s}"
            f"_sh{s.stride_h}sw{s.stride_w}_ph{s.pad_h}pw{s.pad_w}_dh{s.dil_h - 1}dw{s.dil_w - 1}"
        )
    if isinstance(shape, RecurrentShape):
        h = shape.hidden
        return f"l1t{shape.seq_len}mb{shape.batch}_sic{h}slc{shape.input_size}dhc{h}dic{h}"
    raise ValueError(f"no descriptor for {op_name} shape {shape.label()}")


def problem_options(op_name: str, shape: Shape) -> str:
    """What a descriptor alone cannot say and the command line must (the rnn's activation)."""
    if op_name.split(":")[0] == "rnn":
        return f"--nonlinearity {'relu' if shape.to_dict().get('relu') else 'tanh'}"
    return ""
