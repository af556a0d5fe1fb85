"""Study storage: the default SQLite file, URLs with their passwords masked in everything printed
(opbench.secrets), and a connection check that fails with one line instead of a driver traceback."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from opbench.errors import UsageError
from opbench.secrets import mask, register

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna

__all__ = ["default_url", "mask", "open_storage"]

_CREATE_ATTEMPTS = 5
# How PostgreSQL and SQLite report two processes creating Optuna's tables at the same moment.
_CREATION_RACE = ("duplicate key", "already exists", "UNIQUE constraint failed")


def default_url(out_dir: Path) -> str:
    path = (out_dir / "tuning" / "studies.db").resolve()
    return f"sqlite:///{path}"


def open_storage(url: str, heartbeat_s: int, grace_s: int) -> optuna.storages.RDBStorage:
    """An Optuna RDB storage with heartbeats (a worker that dies leaves a RUNNING trial that is failed
    and retried with the same parameters once its heartbeat is grace_s old)."""
    register(url)  # from here on, its password is masked wherever it appears
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                return RDBStorage(
                    url,
                    engine_kwargs={"pool_pre_ping": True},
                    heartbeat_interval=heartbeat_s,
                    grace_period=grace_s,
                    heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
                )
            except ImportError as e:
                raise UsageError(
                    f"storage {mask(url)}: driver missing ({e}); "
                    "for PostgreSQL: pip install 'psycopg[binary]'"
                ) from None
            except Exception as e:  # sqlalchemy's OperationalError and friends carry the URL: mask it
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                # Workers starting together on an empty database race to create Optuna's tables; the loser
                # sees a duplicate: the tables exist now, so try again.
                if attempt + 1 < _CREATE_ATTEMPTS and any(m in first for m in _CREATION_RACE):
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise UsageError(f"cannot open storage {mask(url)}: {mask(first)}") from None
    raise AssertionError("unreachable")
