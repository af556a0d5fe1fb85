"""Command line: argument parsing and validation -> library calls. One module per command (sweep, peak,
tune, report); this one dispatches and turns every error into one line on stderr and exit code 2, before
anything is written. A command's module is imported when that command runs (and each imports what it
uses at its top): `opbench --help` or `opbench suites` does not pay for numpy, the ops and the sweep."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable

from opbench.cli.parser import build_parser
from opbench.errors import UsageError, missing_dependency
from opbench.kernels import unloadable
from opbench.secrets import mask, mask_argv, register

__all__ = ["COMMANDS", "build_parser", "main"]

# command -> (its module under opbench.cli, the function that runs it)
COMMANDS = {
    "report": ("report", "cmd_report"),
    "compare": ("report", "cmd_compare"),
    "sweep": ("sweep", "cmd_sweep"),
    "ab": ("ab", "cmd_ab"),
    "tune": ("tune", "cmd_tune"),
    "studies": ("tune", "cmd_studies"),
    "shapes": ("shapes", "cmd_shapes"),
    "peak": ("peak", "cmd_peak"),
    "suites": ("report", "cmd_suites"),
    "info": ("peak", "cmd_info"),
}


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs command `name`, its module imported now."""
    module, function = COMMANDS[name]
    run: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"opbench.cli.{module}"), function
    )
    return run


def _one_line(text: str) -> str:
    """A message as one printable line, whatever it quotes from the input: whitespace runs become one space,
    other control characters (a terminal escape sequence in an argument) are shown escaped."""
    text = " ".join(str(text).split())
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _internal_error(e: BaseException) -> int:
    """A bug, not bad input: the traceback (credentials masked) for a report, and exit status 1."""
    sys.stderr.write(mask("".join(traceback.format_exception(type(e), e, e.__traceback__))))
    print(
        f"opbench: internal error: {mask(e)} (a bug in opbench; please report it with the traceback above)",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for token in argv:  # passwords given on the command line are masked in every message from here on
        if "://" in token or "password" in token.lower():
            register(token)
    try:
        for i, token in enumerate(argv):
            if "\x00" in token:  # no path or value can hold one (a real command line cannot even pass it)
                raise UsageError(f"argument {i + 1} holds a NUL byte")
        args = build_parser().parse_args(argv)
        args.command_line = ["opbench", *mask_argv(argv)]  # what results, reports and studies record
        return command(args.command)(args)
    except UsageError as e:
        msg = _one_line(mask(e))
        print(msg if msg.startswith("opbench") else f"opbench: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("opbench: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("opbench: error: out of memory (a smaller problem, or --max-memory)", file=sys.stderr)
        return 2
    except ImportError as e:  # an optional dependency this command needs (opbench[tune], ...), our kernels
        hint = missing_dependency(e) or unloadable(e)
        if hint is None:
            return _internal_error(e)
        print(f"opbench: error: {hint}", file=sys.stderr)
        return 2
    except OSError as e:  # the file system refused: a path given on the command line, a full disk
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"opbench: error: {mask(where)}{mask(e.strerror or e)}", file=sys.stderr)
        return 2
    except Exception as e:
        return _internal_error(e)


if __name__ == "__main__":
    sys.exit(main())
