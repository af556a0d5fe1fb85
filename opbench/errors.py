"""Errors that mean "the user asked for something invalid": the CLI prints them in one line and exits 2."""


class UsageError(Exception):
    """Bad input (unknown op or backend, malformed sizes, a shape that cannot fit): never a traceback."""


class BackendUnavailable(Exception):
    """A backend cannot run here (not installed, no such device); the case is recorded as skipped."""
