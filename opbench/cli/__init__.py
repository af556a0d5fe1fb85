"""Command line: argument parsing and validation -> library calls. One module per command (sweep, peak,
tune, report); this one dispatches and turns every error into one line on stderr and exit code 2, before
anything is written."""

from __future__ import annotations

import sys

from opbench.cli.ab import cmd_ab
from opbench.cli.parser import build_parser
from opbench.cli.peak import cmd_info, cmd_peak
from opbench.cli.report import cmd_compare, cmd_report, cmd_suites
from opbench.cli.sweep import cmd_sweep
from opbench.cli.tune import cmd_studies, cmd_tune
from opbench.errors import UsageError, missing_dependency

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = {
    "report": cmd_report,
    "compare": cmd_compare,
    "sweep": cmd_sweep,
    "ab": cmd_ab,
    "tune": cmd_tune,
    "studies": cmd_studies,
    "peak": cmd_peak,
    "suites": cmd_suites,
    "info": cmd_info,
}


def _one_line(text: str) -> str:
    """A message as one printable line, whatever it quotes from the input: whitespace runs become one space,
    other control characters (a terminal escape sequence in an argument) are shown escaped."""
    text = " ".join(str(text).split())
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _internal_error(e: BaseException) -> int:
    """A bug, not bad input: the traceback (credentials masked) for a report, and exit status 1."""
    import traceback

    from opbench.secrets import mask

    sys.stderr.write(mask("".join(traceback.format_exception(type(e), e, e.__traceback__))))
    print(
        f"opbench: internal error: {mask(e)} (a bug in opbench; please report it with the traceback above)",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    from opbench.secrets import mask, mask_argv, register

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
        return COMMANDS[args.command](args)
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
    except ModuleNotFoundError as e:  # an optional dependency this command needs (opbench[tune], ...)
        hint = missing_dependency(e)
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
