"""Errors that mean "the user asked for something invalid": the CLI prints them in one line and exits 2."""


class UsageError(Exception):
    """Bad input (unknown op or backend, malformed sizes, a shape that cannot fit): never a traceback."""


class BackendUnavailable(Exception):
    """A backend cannot run here (not installed, no such device); the case is recorded as skipped."""


# Optional dependencies: the module a feature imports -> the extra that installs it.
OPTIONAL_MODULES = {
    "optuna": "tune",
    "cmaes": "tune",
    "scipy": "tune",
    "psycopg": "tune",
    "torch": "torch",
    "mindspore": "mindspore",
    "tensorflow": "tensorflow",
}


# Our compiled kernels (csrc/, built by `pip install`): the reading commands run without them, a measuring
# command cannot (the peaks, the machine's identity and the cpp backend are theirs).
EXTENSION = "opbench._core"


def missing_dependency(error: ImportError) -> UsageError | None:
    """A one-line error with the install hint for an optional dependency that is not installed, or for our
    compiled kernels where they are not built or do not load (None when the module is not one of ours to
    hint at: a real bug)."""
    if error.name == EXTENSION:
        reason = " ".join(str(error).split()) if not isinstance(error, ModuleNotFoundError) else "not built"
        return UsageError(
            f"opbench's compiled kernels ({EXTENSION}) do not load here ({reason}); this command measures "
            "with them: reinstall opbench from its source (pip install ., a C++17 compiler and CMake); "
            "report, compare and suites run without them"
        )
    if not isinstance(error, ModuleNotFoundError):
        return None
    top = (error.name or "").split(".")[0]
    extra = OPTIONAL_MODULES.get(top)
    if extra is None:
        return None
    return UsageError(f"{top} is not installed; this command needs it: pip install 'opbench[{extra}]'")
