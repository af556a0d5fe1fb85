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


def missing_dependency(error: ImportError) -> UsageError | None:
    """A one-line error with the install hint for an optional dependency that is not installed (None when
    the module is not one of ours to hint at: a real bug; our own compiled kernels: kernels.unloadable)."""
    if not isinstance(error, ModuleNotFoundError):
        return None
    top = (error.name or "").split(".")[0]
    extra = OPTIONAL_MODULES.get(top)
    if extra is None:
        return None
    return UsageError(f"{top} is not installed; this command needs it: pip install 'opbench[{extra}]'")
