"""Files: crash-safe writes (a temporary file beside the target, fsync, then a rename over it, so a reader or
a later run after a kill sees either the old complete file or the new complete file), names reserved with
O_EXCL (so concurrent runs never share a results file), and bounded reads of input files (regular files
only, under a size cap)."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opbench.errors import UsageError


def current_umask() -> int:
    """The process umask, read without changing it where Linux exposes it (os.umask both sets and reads,
    which would briefly change it under other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _finite(obj: object) -> object:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_text(obj: object) -> str:
    """Strict JSON (no NaN or Infinity, which are not JSON): a non-finite number is written as null, the
    value opbench uses for 'missing'. Every JSON file opbench writes goes through here."""
    return json.dumps(_finite(obj), indent=1, allow_nan=False) + "\n"


def json_line(obj: object, default: Callable[[Any], object] | None = None) -> str:
    """One line of strict JSON for a pipe protocol (a non-finite number as null, as in json_text)."""
    return json.dumps(_finite(obj), allow_nan=False, default=default) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _written_beside(path: Path, data: bytes) -> str:
    """A temporary file beside `path` holding `data`, synced to disk, with the permissions an ordinary
    open() would give (mkstemp makes it 0600); its name is returned for a rename or link onto `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _written_beside(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_exclusive(path: Path, data: bytes) -> None:
    """Create `path` holding `data`, atomically and only if it does not exist (FileExistsError otherwise):
    the content is written to a temporary file first and hard-linked to the name, so no reader ever sees
    an empty or partial file. Where hard links are not supported, O_EXCL and then the write."""
    tmp = _written_beside(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # no hard links here
            with open(path, "xb") as f:
                f.write(data)
    finally:
        os.unlink(tmp)


def reserve(out_dir: Path, stem: str, contents: dict[str, str]) -> str:
    """A name `stem[-N]` for which every `name.<suffix>` in out_dir was created by this call, holding
    contents[suffix] (exclusively: concurrent callers with the same stem get different names, and no
    existing file is ever overwritten)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for n in range(100_000):
        name = stem + (f"-{n}" if n else "")
        made: list[Path] = []
        try:
            for suffix, text in contents.items():
                path = out_dir / f"{name}.{suffix}"
                _create_exclusive(path, text.encode("utf-8"))
                made.append(path)
            return name
        except FileExistsError:
            for path in made:  # a partial claim: give it back and try the next name
                path.unlink(missing_ok=True)
    raise FileExistsError(f"no free name for {stem} in {out_dir}")


def check_writable_dir(path: Path, option: str) -> Path:
    """`path` as an output directory, refused up front (UsageError, nothing created) when it is a file, or
    when its nearest existing directory cannot be written (a probe file is created there and removed)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} exists and is not a directory")
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{option} {path}: {probe} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write in {probe} ({e.strerror or e})") from None
    return path


# Size caps of the files opbench reads (docs/robustness.md): a results file of the largest suite is a few MB.
MAX_RESULTS_BYTES = 256 << 20
MAX_SPEC_BYTES = 1 << 20


def read_input(path: str | Path, cap: int, what: str) -> bytes:
    """The bytes of a regular file of at most `cap` bytes, else UsageError naming it: a directory, a device
    (/dev/zero), a FIFO or a socket is refused without blocking (opened O_NONBLOCK and checked with fstat,
    so the check and the read are of the same file)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{p}: no such file") from None
    except OSError as e:
        raise UsageError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{p}: cannot read: a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{p}: cannot read: not a regular file (a device, FIFO or socket), not a {what}")
        if st.st_size > cap:
            raise UsageError(f"{p}: {st.st_size} bytes, over the {cap >> 20} MiB limit for a {what}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while being read
                raise UsageError(f"{p}: over the {cap >> 20} MiB limit for a {what}")
        return b"".join(chunks)
    except OSError as e:
        raise UsageError(f"{p}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
