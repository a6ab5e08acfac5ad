"""OpenTelemetry: an enqueue records the caller's trace context in the job; the worker runs each
handler in a CONSUMER span linked to it, with the job's queue, id, attempt and fence; without
OpenTelemetry nothing changes and nothing of it is imported."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

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


class RaisingProcessor(sdk_trace.SpanProcessor):
    """A real SDK span processor that raises from the hooks named in `hooks` (none unless a
    test says so): a broken exporter or processor as an application may install one."""

    hooks: ClassVar[set[str]] = set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if "on_start" in self.hooks:
            raise RuntimeError("processor on_start broke")

    def on_end(self, span: Any) -> None:
        if "on_end" in self.hooks:
            raise RuntimeError("processor on_end broke")


@pytest.fixture
def spans() -> Iterator[Any]:
    """The spans this process finishes, recorded in memory (the provider is set once per
    process, as OpenTelemetry allows; its raising processor is quiet unless a test says)."""
    if not isinstance(trace.get_tracer_provider(), sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        provider.add_span_processor(RaisingProcessor())
        provider.add_span_processor(export.SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    RaisingProcessor.hooks.clear()
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


def run_script(script: str, dsn: str, schema: str) -> Any:
    """`script` in a Python process of its own, on `dsn` and `schema`, without the test run's
    OpenTelemetry settings: the JSON of its last line."""
    done = subprocess.run(
        [sys.executable, "-c", script, dsn, schema],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={k: v for k, v in os.environ.items() if k not in ENV},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    result = run_script(script, dsn, schema)
    assert (result["status"], result["available"]) == ("done", False)
    assert stored_trace(queue, result["id"]) is None


def test_an_application_that_never_imported_opentelemetry_enqueues_without_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Installed but never imported: an enqueue (one job, a batch, COPY) imports none of it
    and records no trace; once the application starts a span, the next enqueue records it."""
    script = """
import json, sys
from pgq_core import JobSpec, Queue

dsn, schema = sys.argv[1], sys.argv[2]
with Queue.connect(dsn, schema) as q:
    ids = [q.enqueue("q", {}), *q.enqueue_many([JobSpec("q", {})] * 2)]
    ids += q.enqueue_copy([JobSpec("q", {})])
    before = sorted(m for m in sys.modules if m.startswith("opentelemetry."))
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
    with trace.get_tracer("app").start_as_current_span("request"):
        traced = q.enqueue("q", {})
print(json.dumps({"ids": ids, "before": before, "traced": traced}))
"""
    result = run_script(script, dsn, schema)
    assert result["before"] == []
    assert [stored_trace(queue, job_id) for job_id in result["ids"]] == [None] * 4
    assert "traceparent" in stored_trace(queue, result["traced"])


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


@pytest.mark.parametrize("hooks", [{"on_start"}, {"on_end"}, {"on_start", "on_end"}])
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_raising_span_processor_never_decides_the_jobs_outcome(
    dsn: str,
    schema: str,
    queue: Queue,
    spans: Any,
    caplog: pytest.LogCaptureFixture,
    hooks: set[str],
    kind: str,
) -> None:
    """The real SDK with a processor whose on_start / on_end raise: every handler runs once,
    the ten that return are done and the two that raise failed with their own error, nothing
    runs again, and each broken hook is logged once for all twelve jobs."""
    from pgq_core import tracing

    tracing._said.clear()
    RaisingProcessor.hooks.update(hooks)
    ran: list[int] = []
    in_span: list[bool] = []
    ids = [queue.enqueue("q", {"fail": n >= 10}, max_attempts=3) for n in range(12)]

    def work(ctx: JobContext) -> str:
        ran.append(ctx.id)
        in_span.append(trace.get_current_span().is_recording())
        if ctx.payload["fail"]:
            raise ValueError(f"handler {ctx.id} said no")
        return "ok"

    async def async_work(ctx: JobContext) -> str:
        return work(ctx)

    caplog.set_level(logging.WARNING, logger="pgq.tracing")
    handler = work if kind == "sync" else async_work
    await asyncio.wait_for(make_worker(dsn, schema, handler, burst=True).run(), TIMEOUT)

    assert sorted(ran) == sorted(ids)
    for n, job_id in enumerate(ids):
        job = queue.job(job_id)
        if n < 10:
            assert (job.status, job.attempts, job.last_error) == ("done", 1, None)
        else:
            assert (job.status, job.attempts) == ("ready", 1)  # to be retried, for its own reason
            assert job.last_error is not None and "said no" in job.last_error
    said = [r.getMessage() for r in caplog.records if r.name == "pgq.tracing"]
    # a span whose start raised is never made: the handler runs without one, and there is
    # no end to raise; one whose end raised was current while its handler ran
    stages = [m.split()[3] for m in said]
    assert stages == (["start"] if "on_start" in hooks else ["end"])
    assert all("processor on_" in m and "said once" in m for m in said)
    assert in_span == [hooks == {"on_end"}] * 12


def test_a_broken_tracer_provider_runs_the_handler_untraced() -> None:
    """A provider whose get_tracer raises (the SDK's own failure, not a processor's): the
    block runs, its exception goes on unchanged, and the failure is said once."""
    script = """
import logging
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from pgq_core import tracing

class Broken(TracerProvider):
    def get_tracer(self, *args, **kwargs):
        raise LookupError("no tracer today")

logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
trace.set_tracer_provider(Broken())

class Job:
    id, queue, attempts, fence, trace = 1, "q", 1, 1, None

ran = 0
for _ in range(3):
    with tracing.handler_span(Job()):
        ran += 1
try:
    with tracing.handler_span(Job()):
        raise KeyError("the handler's own")
except KeyError as exc:
    print(ran, repr(exc))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(None, 1) == ["3", "KeyError(\"the handler's own\")\n"]
    said = [line for line in done.stderr.splitlines() if line.startswith("pgq.tracing")]
    assert len(said) == 1 and "at start (LookupError: no tracer today)" in said[0]


def test_the_bulk_paths_record_the_trace_context(queue: Queue, spans: Any) -> None:
    with trace.get_tracer("app").start_as_current_span("load") as load:
        copied = queue.enqueue_copy([JobSpec("q", {"n": n}) for n in range(2)])
        loaded = queue.enqueue_payloads("q", [{"n": 2}, {"n": 3}])
    untraced = queue.enqueue_payloads("q", [{"n": 4}])
    wanted = format(load.get_span_context().trace_id, "032x")
    for job_id in (*copied, *loaded):
        assert stored_trace(queue, job_id)["traceparent"].split("-")[1] == wanted
    assert stored_trace(queue, untraced[0]) is None
