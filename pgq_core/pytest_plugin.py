"""pytest fixtures for testing your own tasks: enable them in your `conftest.py` with
`pytest_plugins = ["pgq_core.pytest_plugin"]` (see `pgq_core.testing`).

- `pgq_schema`: a private, migrated schema for the test (PGQ_DSN's server, else the embedded
  one), dropped after it;
- `pgq_queue`: a `Queue` on it;
- `pgq_drain`: `pgq_drain(tasks_or_handler, queues=None)` runs the queues' due jobs with a
  burst worker in this process and returns its snapshot (done, failed, lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from .queue import Queue
from .testing import PrivateSchema, drain, private_schema
from .worker import WorkerSnapshot


@pytest.fixture
def pgq_schema() -> Iterator[PrivateSchema]:
    with private_schema() as where:
        yield where


@pytest.fixture
def pgq_queue(pgq_schema: PrivateSchema) -> Iterator[Queue]:
    with pgq_schema.queue() as queue:
        yield queue


@pytest.fixture
def pgq_drain(
    pgq_schema: PrivateSchema,
) -> Callable[..., WorkerSnapshot]:
    def run(handler: Any, queues: Sequence[str] | None = None, **options: Any) -> WorkerSnapshot:
        return drain(handler, pgq_schema, queues, **options)

    return run
