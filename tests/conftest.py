"""Fixtures: a real PostgreSQL (embedded by default, PGQ_TEST_DSN for any other) and a fresh,
migrated schema per test, so tests never see each other's jobs."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgq_core import AsyncQueue, Queue, migrate


@pytest.fixture(scope="session")
def pg_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pgq-home")


@pytest.fixture(scope="session")
def dsn(pg_home: Path) -> str:
    """The server every database test uses."""
    external = os.environ.get("PGQ_TEST_DSN")
    if external:
        return external
    from pgq_core import embedded

    return embedded.start(pg_home)


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    name = f"t_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn, name)
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def queue(dsn: str, schema: str) -> Iterator[Queue]:
    with Queue.connect(dsn, schema) as q:
        yield q


@pytest.fixture
async def aqueue(dsn: str, schema: str) -> AsyncIterator[AsyncQueue]:
    q = await AsyncQueue.connect(dsn, schema)
    try:
        yield q
    finally:
        await q.close()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c
