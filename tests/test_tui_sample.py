"""The snapshot tests' sample source reads filters as the real queue does: its rows, loaded
into a real schema, give the same ids through `Queue` as through `SampleSource` for every
listing and filter the dashboard sends."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest
from psycopg import sql
from tui_support.sample import ERRORS, EVERY_JOB, STATS, SampleSource

from pgq_core import JobRow, Queue
from pgq_core.filters import ACTION_STATUSES, FILTER_STATUSES, JobFilter, parse_filter

QUEUES = [None, *(s.queue for s in STATS)]
ALL = len(EVERY_JOB) + 1


@pytest.fixture
def loaded(queue: Queue, conn: psycopg.Connection[tuple[object, ...]]) -> Queue:
    """The sample's every job, as rows of the real table (the trigger sets each error group)."""
    rows = [
        (j.id, j.queue, {}, j.status, j.run_at, j.attempts, j.max_attempts, j.lease_until,
         j.fence, j.last_error, j.queued_at, j.worker, j.finished_at)
        for j in EVERY_JOB
    ]
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "INSERT INTO {}.jobs (id, queue, payload, status, run_at, attempts, max_attempts,"
                " lease_until, fence, last_error, queued_at, worker, finished_at)"
                " VALUES (%s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            ).format(sql.Identifier(queue.schema)),
            [(r[0], r[1], "{}", *r[3:]) for r in rows],
        )
    conn.commit()
    return queue


def _ids(rows: Sequence[JobRow]) -> list[int]:
    return [row.id for row in rows]


def test_the_sample_lists_jobs_as_the_queue_does(loaded: Queue) -> None:
    sample = SampleSource()
    listed = 0
    for queue_name in QUEUES:
        for status in (None, "ready", "running", "done", "dead"):
            real = _ids(loaded.jobs(queue_name, status, ALL))
            listed += len(real)
            assert _ids(asyncio.run(sample.jobs(queue_name, status, ALL))) == real, (
                queue_name,
                status,
            )
    assert listed >= 2 * len(EVERY_JOB)


FILTERS = [
    "", "status:failed", "status:failed,dead", "status:ready", "status:ready,failed",
    "error:503", "error:HTTP", "error:TIMEOUT", "error:report", "error:'connection reset'",
    "status:dead error:503", "queue:webhooks status:dead error:503", "queue:reports",
    "queue:webhooks status:running", "error:%", "error:_",
]


@pytest.mark.parametrize("text", FILTERS)
def test_the_sample_reads_a_filter_as_the_queue_does(loaded: Queue, text: str) -> None:
    where = parse_filter(text)
    sample = SampleSource()
    real = _ids(loaded.jobs_matching(where, ALL))
    assert _ids(asyncio.run(sample.jobs_matching(where, ALL))) == real
    for action in ACTION_STATUSES:
        try:
            narrowed = where.for_action(action)
        except ValueError:
            continue
        count = loaded.count_matching(narrowed)
        assert asyncio.run(sample.count_matching(where, action)) == count, action


def test_every_status_alone_reads_alike(loaded: Queue) -> None:
    sample = SampleSource()
    for status in FILTER_STATUSES:
        where = JobFilter(statuses=(status,))
        real = _ids(loaded.jobs_matching(where, ALL))
        assert _ids(asyncio.run(sample.jobs_matching(where, ALL))) == real, status


def test_the_sample_groups_errors_as_the_queue_does(
    loaded: Queue, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    """Each group the errors view shows selects, by the sample's id, the jobs the queue's
    own group id (of the group's example) selects."""
    sample = SampleSource()
    for group in ERRORS:
        got = conn.execute(
            sql.SQL("SELECT {}.error_group(%s)").format(sql.Identifier(loaded.schema)),
            (group.example_error.splitlines()[0],),
        ).fetchone()
        assert got is not None and isinstance(got[0], str)
        want = _ids(loaded.jobs_matching(JobFilter(error_group=got[0]), ALL))
        assert want, group.pattern
        mine = asyncio.run(sample.jobs_matching(JobFilter(error_group=group.group), ALL))
        assert _ids(mine) == want, group.pattern
