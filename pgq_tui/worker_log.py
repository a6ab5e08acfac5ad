"""A logging handler that hands the app's workers' records to the app, from any thread.

Imports no Textual: the app gives it a `post` callable that is safe to call from any thread
(`App.post_message` is)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .state import LogLine

LOGGER = "pgq.worker"


class WorkerLogHandler(logging.Handler):
    """Formats each record to one line and passes it on; never raises into the worker."""

    def __init__(self, post: Callable[[LogLine], object], level: int = logging.INFO) -> None:
        super().__init__(level)
        self.post = post
        self._logger: logging.Logger | None = None
        self._level_before = logging.NOTSET

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text = f"{text}: {type(exc).__name__}: {exc}"
            self.post(LogLine(record.created, record.levelname, text))
        except Exception:  # noqa: BLE001 - logging must never break a worker
            self.handleError(record)

    def attach(self) -> None:
        """Listen to `pgq.worker`; lets its INFO records through while attached (a logger
        left at the default level passes only warnings)."""
        logger = logging.getLogger(LOGGER)
        self._logger = logger
        self._level_before = logger.level
        if not logger.isEnabledFor(self.level):
            logger.setLevel(self.level)
        logger.addHandler(self)

    def detach(self) -> None:
        logger = self._logger
        if logger is None:
            return
        logger.removeHandler(self)
        logger.setLevel(self._level_before)
        self._logger = None
