"""benchdnn-style problem descriptors: `--problem DESC` and `--batch-file FILE` on sweep, tune and ab, and
the canonical descriptor of a shape (`describe`), which every record's repro command uses.

The grammar is oneDNN benchdnn's, for the ops opbench runs:

    conv    [gX][mbX]icX[ihX][iwX]ocX[ohX][owX][khX][kwX][shX][swX][phX][pwX][dhX][dwX]   '_' ignored
            defaults: g 1, mb 2, strides 1, dilation 0 (benchdnn counts the taps skipped: opbench's
            dilation is dh + 1), iw = ih, kw = kh; ph/pw deduced from oh/ow when those are given, else 0.
    matmul  MxK:KxN                                     (2-D; batched descriptors are refused)
    rnn     [lX][tX][mbX]sicX[slcX][dhcX][dicX]         defaults: l 1, t 1, mb 2, slc = dhc = sic,
                                                        dic = dhc; --alg VANILLA_RNN (RELU activation),
                                                        VANILLA_LSTM, LBR_GRU
Any of them may end in a name: `n"resnet_50:conv1"` or `nNAME`.

A batch file holds one or more descriptors per line, `#` comments, and the benchdnn options that map to
what opbench runs: the driver (`--conv`, `--matmul`, `--rnn`), `--cfg`/`--dt` (f32, f16, bf16), `--dir`/
`--prop` (forward only: the backward pass is `--pass bwd`), `--alg`, `--activation`, `--direction`
(left2right only), `--mb` (overrides the minibatch), `--reset`, `--batch=FILE` (relative to this file)
and, harmless here, `--mode`. Options hold for the descriptors after them until changed or reset.
Anything else is refused with its line number: opbench never guesses at a problem.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from opbench.errors import UsageError
from opbench.files import MAX_SPEC_BYTES, read_input
from opbench.ops import get_op

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
MAX_INCLUDE_DEPTH = 8

_CONV_KEYS = ("g", "mb", "ic", "ih", "iw", "oc", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw")
_RNN_KEYS = ("l", "t", "mb", "sic", "slc", "dhc", "dic")
_THREE_D = ("id", "od", "kd", "sd", "pd", "dd")
_ENTRY = re.compile(r"([a-z]+)(\d+)")


@dataclass(frozen=True)
class Problem:
    """One descriptor, read: the op it maps to, its shape, and the dtypes its options named (None: the
    command line's)."""

    op: str
    shape: Any
    dtypes: tuple[str, ...] | None
    text: str
    where: str  # "--problem" or "FILE:LINE"
    name: str = ""


@dataclass
class _Options:
    """The benchdnn options in force at a point of a batch file."""

    driver: str | None = None
    dtypes: tuple[str, ...] | None = None
    alg: str | None = None
    activation: str | None = None
    mb: int = 0


def _name_split(text: str) -> tuple[str, str]:
    """(entries, name): the `n"NAME"` or `nNAME` tail split off (no other entry starts with n)."""
    i = text.find("n")
    if i < 0:
        return text, ""
    return text[:i], text[i + 1 :].strip('"')


def _entries(text: str, keys: tuple[str, ...], what: str) -> dict[str, int]:
    body = text.replace("_", "")
    out: dict[str, int] = {}
    pos = 0
    while pos < len(body):
        m = _ENTRY.match(body, pos)
        if m is None:
            raise ValueError(f"cannot read '{body[pos:]}' as NAME<integer> entries")
        key, value = m.group(1), int(m.group(2))
        if key in _THREE_D:
            raise ValueError(f"'{key}' makes it a 3-D {what}; opbench runs 2-D convolutions")
        if key not in keys:
            raise ValueError(f"unknown {what} entry '{key}' (known: {' '.join(keys)})")
        if key in out:
            raise ValueError(f"'{key}' given twice")
        out[key] = value
        pos = m.end()
    return out


def _conv(text: str, opts: _Options) -> Any:
    e = _entries(text, _CONV_KEYS, "convolution")
    for key in ("ic", "oc"):
        if key not in e:
            raise ValueError(f"'{key}' is required")
    if "ih" not in e:
        raise ValueError("'ih' is required (a 1-D convolution is written ih1)")
    if "kh" not in e:
        raise ValueError("'kh' is required")
    g = e.get("g", 1)
    n = opts.mb or e.get("mb", 2)
    # benchdnn's one implicit rule: a width value not given is the height's (a square problem)
    h, r, sh, dh = e["ih"], e["kh"], e.get("sh", 1), e.get("dh", 0)
    w, s, sw, dw = e.get("iw", h), e.get("kw", r), e.get("sw", sh), e.get("dw", dh)
    oh, ow = e.get("oh"), e.get("ow", e.get("oh") if "iw" not in e else None)
    ph, pw = e.get("ph"), e.get("pw", e.get("ph") if "ow" not in e else None)
    for key, v in (("mb", n), ("g", g), ("ic", e["ic"]), ("oc", e["oc"]), ("ih", h), ("iw", w), ("kh", r),
                   ("kw", s), ("sh", sh), ("sw", sw)):  # fmt: skip
        if v < 1:
            raise ValueError(f"'{key}' must be >= 1, got {v}")
    pads = []
    for axis, size, k, st, d, o, p in (("h", h, r, sh, dh + 1, oh, ph), ("w", w, s, sw, dw + 1, ow, pw)):
        if p is None:  # deduced from the output size, as benchdnn does; 0 without one
            p = 0 if o is None else max(0, ((o - 1) * st - size + (k - 1) * d + 1) // 2)
        out = (size + 2 * p - d * (k - 1) - 1) // st + 1
        if out < 1:
            raise ValueError(f"k{axis}{k} (dilation {d - 1}) does not fit i{axis}{size} with p{axis}{p}")
        if o is not None and o != out:
            raise ValueError(
                f"o{axis}{o} does not follow from i{axis}{size} k{axis}{k} s{axis}{st} p{axis}{p} "
                f"d{axis}{d - 1}: that gives o{axis}{out} (opbench pads both sides alike)"
            )
        pads.append(p)
    op = get_op("conv")
    return op.shape_from_case(
        {"n": n, "c": e["ic"], "h": h, "w": w, "k": e["oc"], "r": r, "s": s, "stride_h": sh, "stride_w": sw,
         "pad_h": pads[0], "pad_w": pads[1], "dil_h": dh + 1, "dil_w": dw + 1, "groups": g}
    )  # fmt: skip


def _matmul(text: str) -> Any:
    left, sep, right = text.replace("_", "").partition(":")
    a = left.split("x")
    b = right.split("x")
    if not sep or len(a) != len(b) or len(a) < 2:
        raise ValueError("expected MxK:KxN")
    if len(a) > 2:
        raise ValueError("a batched matmul; opbench's gemm is 2-D (MxK:KxN)")
    try:
        m, k, k2, n = (int(v) for v in (*a, *b))
    except ValueError:
        raise ValueError("expected MxK:KxN with integer sizes") from None
    if k != k2:
        raise ValueError(f"the inner dimensions differ ({k} and {k2})")
    return get_op("gemm").shape_from_case({"m": m, "n": n, "k": k})


def _recurrent(text: str, op_name: str, opts: _Options) -> Any:
    e = _entries(text, _RNN_KEYS, "rnn")
    if "sic" not in e:
        raise ValueError("'sic' is required")
    if e.get("l", 1) != 1:
        raise ValueError(f"l{e['l']}: opbench's recurrent ops run one layer")
    hidden = e.get("dhc", e["sic"])
    if e["sic"] != hidden:
        raise ValueError(f"sic{e['sic']} differs from dhc{hidden}: opbench's h0 has the hidden size")
    if e.get("dic", hidden) != hidden:
        raise ValueError(f"dic{e['dic']} differs from dhc{hidden}: a projection is not an opbench op")
    fields: dict[str, Any] = {
        "seq_len": e.get("t", 1),
        "batch": opts.mb or e.get("mb", 2),
        "input_size": e.get("slc", e["sic"]),
        "hidden": hidden,
    }
    if op_name == "rnn":
        activation = opts.activation or "RELU"  # benchdnn's default for VANILLA_RNN
        if activation not in ("RELU", "TANH"):
            raise ValueError(f"--activation={activation}: opbench's rnn is tanh or ReLU")
        fields["relu"] = int(activation == "RELU")
    return get_op(op_name).shape_from_case(fields)


def _recurrent_op(command_op: str | None, opts: _Options) -> str:
    if opts.alg is None:
        return command_op if command_op in ALG_OF else "rnn"  # benchdnn's default alg is VANILLA_RNN
    if opts.alg in REFUSED_ALGS:
        raise ValueError(f"--alg={opts.alg}: {REFUSED_ALGS[opts.alg]}")
    if opts.alg not in RECURRENT_ALGS:
        raise ValueError(f"unknown --alg={opts.alg} (known: {', '.join(RECURRENT_ALGS)})")
    return RECURRENT_ALGS[opts.alg]


def _kind(text: str) -> str:
    """conv, gemm or recurrent, from the descriptor's form."""
    if ":" in text and "x" in text.split(":")[0]:
        return "gemm"
    if "sic" in text:
        return "recurrent"
    return "conv"


def parse(text: str, command_op: str | None = None, where: str = "--problem", opts: Any = None) -> Problem:
    """One descriptor. `command_op` is the op the command names (None: the descriptor's form decides);
    UsageError naming `where` and the problem otherwise."""
    opts = opts or _Options()
    try:
        entries, name = _name_split(text.strip())
        kind = _kind(entries)
        if opts.driver is not None:
            wanted = "recurrent" if opts.driver == "rnn" else opts.driver
            if kind != wanted:
                raise ValueError(f"a {kind} descriptor under --{_driver_flag(opts.driver)}")
        if kind == "gemm":
            op_name, shape = "gemm", _matmul(entries)
        elif kind == "conv":
            op_name, shape = "conv", _conv(entries, opts)
        else:
            op_name = _recurrent_op(command_op, opts)
            shape = _recurrent(entries, op_name, opts)
        if command_op is not None and op_name != command_op:
            detail = f" (--alg={ALG_OF[op_name]})" if op_name in ALG_OF else ""
            raise ValueError(f"a {op_name} problem{detail}, but the command runs {command_op}")
    except ValueError as e:
        raise UsageError(f"{where}: '{text}': {e}") from None
    return Problem(op_name, shape, opts.dtypes, text, where, name)


def _driver_flag(driver: str) -> str:
    return {v: k for k, v in DRIVERS.items()}.get(driver, driver)


def _dtypes(value: str) -> tuple[str, ...]:
    out = []
    for cfg in value.split(","):
        parts = [p for p in re.split(r"[:]|(?<=\d)(?=[a-z])", cfg) if p]  # f32, f16:f16:f16, bf16bf16bf16
        kinds = set(parts)
        if len(kinds) != 1 or next(iter(kinds)) not in DTYPES:
            raise ValueError(f"'{cfg}': opbench runs f32, f16 and bf16 with one type for every tensor")
        out.append(DTYPES[next(iter(kinds))])
    return tuple(dict.fromkeys(out))


def _option(token: str, opts: _Options) -> _Options:
    key, sep, value = token[2:].partition("=")
    if key in DRIVERS and not sep:
        return replace(opts, driver=DRIVERS[key])
    if key == "reset" and not sep:
        return _Options()
    if not sep or not value:
        raise ValueError(f"'{token}' is not an option opbench reads (expected --NAME=VALUE)")
    if key in ("cfg", "dt"):
        return replace(opts, dtypes=_dtypes(value))
    if key in ("dir", "prop"):
        if value.upper() not in FORWARD:
            raise ValueError(f"--{key}={value}: only forward problems here; the backward pass is --pass bwd")
        return opts
    if key == "alg":
        return replace(opts, alg=value.upper())
    if key == "activation":
        return replace(opts, activation=value.upper())
    if key == "direction":
        if value != "left2right":
            raise ValueError(f"--direction={value}: opbench's recurrent ops run left2right only")
        return opts
    if key == "mb":
        if not value.isdigit():
            raise ValueError(f"--mb={value}: expected an integer")
        return replace(opts, mb=int(value))
    if key == "mode":
        return opts  # correctness or performance: opbench always verifies and times
    raise ValueError(f"--{key} is not a benchdnn option opbench maps to its ops")


def options(activation: str | None = None) -> _Options:
    """The options a command line starts a problem with (--nonlinearity: the rnn's activation)."""
    return _Options(activation=activation.upper() if activation else None)


def load_batch(path: Path | str, command_op: str | None = None, start: Any = None) -> list[Problem]:
    """Every problem of a batch file (and the files it includes), in order; `start`: the options in force
    at its first line (`options()`)."""
    return read_batch(path, command_op, start)[0]


def read_batch(
    path: Path | str, command_op: str | None = None, start: Any = None, _depth: int = 0
) -> tuple[list[Problem], str]:
    """load_batch's problems, and the file's description: its leading `#` lines, joined."""
    path = Path(path)
    if _depth > MAX_INCLUDE_DEPTH:
        raise UsageError(f"batch file {path}: --batch includes nest deeper than {MAX_INCLUDE_DEPTH}")
    try:
        text = read_input(path, MAX_SPEC_BYTES, "batch file").decode("utf-8")
    except UsageError as e:
        raise UsageError(f"batch file {e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"batch file {path}: not UTF-8 text") from None
    problems: list[Problem] = []
    opts = start or _Options()
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as e:
            raise UsageError(f"{where}: {e}") from None
        for token in tokens:
            if token.startswith("--batch="):
                include = (path.parent / token.split("=", 1)[1]).resolve()
                problems += read_batch(include, command_op, opts, _depth + 1)[0]
            elif token.startswith("-"):
                try:
                    opts = _option(token, opts)
                except ValueError as e:
                    raise UsageError(f"{where}: {e}") from None
            else:
                problems.append(parse(token, command_op, where, opts))
    if not problems and _depth == 0:
        raise UsageError(f"batch file {path}: no problem descriptors in it")
    head = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        head.append(line.lstrip("#").strip())
    return problems, " ".join(t for t in head if t)


def describe(op_name: str, shape: Any) -> str:
    """The canonical descriptor of a shape: `parse(describe(op, s), op).shape == s`."""
    op = op_name.split(":")[0]
    f = shape.to_dict()
    if op == "gemm":
        return f"{f['m']}x{f['k']}:{f['k']}x{f['n']}"
    if op == "conv":
        return (
            f"g{f['groups']}mb{f['n']}_ic{f['c']}ih{f['h']}iw{f['w']}_oc{f['k']}_kh{f['r']}kw{f['s']}"
            f"_sh{f['stride_h']}sw{f['stride_w']}_ph{f['pad_h']}pw{f['pad_w']}"
            f"_dh{f['dil_h'] - 1}dw{f['dil_w'] - 1}"
        )
    h = f["hidden"]
    return f"l1t{f['seq_len']}mb{f['batch']}_sic{h}slc{f['input_size']}dhc{h}dic{h}"


def problem_options(op_name: str, shape: Any) -> str:
    """What a descriptor alone cannot say and the command line must (the rnn's activation)."""
    if op_name.split(":")[0] == "rnn":
        return f"--nonlinearity {'relu' if shape.to_dict().get('relu') else 'tanh'}"
    return ""
