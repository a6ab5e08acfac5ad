"""OpenTelemetry: an enqueue records the caller's trace context in the job; the worker runs each
handler in a CONSUMER span linked to it, with the job's queue, id, attempt and fence; without
OpenTelemetry nothing changes and nothing of it is imported."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql
from support import ENV, TIMEOUT, make_worker

from pgq_core import AsyncQueue, JobSpec, Queue
from pgq_core.worker import JobContext

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")

_EXPORTER = in_memory.InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[Any]:
    """The spans this process finishes, recorded in memory (the provider is set once per
    process, as OpenTelemetry allows)."""
    if not isinstance(trace.get_tracer_provider(), sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        provider.add_span_processor(export.SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def stored_trace(queue: Queue, job_id: int) -> Any:
    row = queue.conn.execute(
        sql.SQL("SELECT trace FROM {}.jobs WHERE id = %s").format(sql.Identifier(queue.schema)),
        [job_id],
    ).fetchone()
    assert row is not None
    return row[0]


async def test_a_handler_runs_in_a_span_linked_to_its_enqueue(
    dsn: str, schema: str, queue: Queue, spans: Any
) -> None:
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        single = queue.enqueue("q", {"n": 1})
        batch = queue.enqueue_many([JobSpec("q", {"n": n}) for n in (2, 3)])
    untraced = queue.enqueue("q", {"n": 4})
    wanted = request.get_span_context()
    for job_id in (single, *batch):
        carrier = stored_trace(queue, job_id)
        assert carrier["traceparent"].split("-")[1] == format(wanted.trace_id, "032x")
    assert stored_trace(queue, untraced) is None

    inner: dict[int, Any] = {}

    async def handler(ctx: JobContext) -> None:
        with tracer.start_as_current_span("inside") as span:
            inner[ctx.id] = span.parent

    await asyncio.wait_for(make_worker(dsn, schema, handler, burst=True).run(), TIMEOUT)
    processed = {
        s.attributes["pgq.job.id"]: s for s in spans.get_finished_spans() if s.name == "q process"
    }
    assert set(processed) == {single, *batch, untraced}
    for job_id, span in processed.items():
        assert span.kind is trace.SpanKind.CONSUMER
        assert span.attributes["messaging.destination.name"] == "q"
        assert (span.attributes["pgq.job.attempt"], span.attributes["pgq.job.fence"]) == (1, 1)
        assert inner[job_id].span_id == span.context.span_id  # the handler's span is its child
        linked = [link.context for link in span.links]
        if job_id == untraced:
            assert linked == []
        else:
            assert [(c.trace_id, c.span_id) for c in linked] == [
                (wanted.trace_id, wanted.span_id)
            ]
            assert span.parent is None  # linked, not parented: a job may run much later


async def test_a_failing_sync_handlers_span_is_an_error(
    dsn: str, schema: str, queue: Queue, spans: Any
) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=1)

    def handler(ctx: JobContext) -> None:
        raise ValueError("boom")

    await asyncio.wait_for(make_worker(dsn, schema, handler, burst=True).run(), TIMEOUT)
    [span] = [s for s in spans.get_finished_spans() if s.name == "q process"]
    assert span.attributes["pgq.job.id"] == job_id
    assert span.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


async def test_the_async_queue_records_the_context_too(
    aqueue: AsyncQueue, queue: Queue, spans: Any
) -> None:
    with trace.get_tracer("app").start_as_current_span("request") as request:
        job_id = await aqueue.enqueue("q", {})
    carrier = stored_trace(queue, job_id)
    span_id = format(request.get_span_context().span_id, "016x")
    assert carrier["traceparent"].split("-")[2] == span_id


def test_without_opentelemetry_nothing_changes_and_nothing_is_imported(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A process where opentelemetry cannot be imported (an import of it would raise) enqueues
    and runs a job: pgq finds it absent, the job has no trace and runs as always."""
    script = """
import asyncio, json, sys
sys.modules["opentelemetry"] = None  # as if it were not installed
from pgq_core import Queue
from pgq_core.worker import Worker

dsn, schema = sys.argv[1], sys.argv[2]
with Queue.connect(dsn, schema) as q:
    job_id = q.enqueue("q", {})

async def handler(ctx):
    return None

asyncio.run(Worker(dsn, ["q"], handler, schema=schema, burst=True, poll_interval=0.05).run())
with Queue.connect(dsn, schema) as q:
    status = q.job(job_id).status
from pgq_core import tracing
print(json.dumps({"id": job_id, "status": status, "available": tracing.available()}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script, dsn, schema],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={k: v for k, v in os.environ.items() if k not in ENV},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["status"], result["available"]) == ("done", False)
    assert stored_trace(queue, result["id"]) is None


def test_a_namespace_without_the_api_counts_as_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another opentelemetry-* distribution leaves the `opentelemetry` namespace behind without
    the API (seen after uninstalling it): pgq treats that as no OpenTelemetry, not a crash."""
    from pgq_core import tracing

    monkeypatch.setitem(sys.modules, "opentelemetry.propagate", None)
    tracing.available.cache_clear()
    try:
        assert tracing.available() is False
        assert tracing.current() is None
    finally:
        monkeypatch.undo()
        tracing.available.cache_clear()
    assert tracing.available() is True


async def test_recording_a_handlers_unreadable_exception_keeps_its_outcome(
    dsn: str, schema: str, queue: Queue, spans: Any
) -> None:
    """An exception whose __str__ raises: the span records what it can, and the job fails
    with the handler's own exception, as it does without tracing."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    job_id = queue.enqueue("q", {}, max_attempts=1)

    def handler(ctx: JobContext) -> None:
        raise Unprintable

    await asyncio.wait_for(make_worker(dsn, schema, handler, burst=True).run(), TIMEOUT)
    assert queue.job(job_id).last_error == "Unprintable (unprintable)"
    [span] = [s for s in spans.get_finished_spans() if s.name == "q process"]
    assert span.status.status_code is trace.StatusCode.ERROR


def test_no_span_is_made_until_the_application_sets_a_tracer_provider() -> None:
    """With the API installed but no provider set, spans would go nowhere: the handler runs
    without one (a span nobody records cost the worker ~15 us per job). A provider set later,
    while the worker runs, is seen at the next job."""
    script = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from pgq_core import tracing

class Job:
    id, queue, attempts, fence, trace = 1, "q", 1, 1, None

before = (tracing.recording(), type(tracing.handler_span(Job())).__name__)
trace.set_tracer_provider(TracerProvider())
with tracing.handler_span(Job()):
    recorded = trace.get_current_span().is_recording()
print(before[0], before[1], tracing.recording(), recorded)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "nullcontext", "True", "True"]
