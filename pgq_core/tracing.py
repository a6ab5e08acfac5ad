"""OpenTelemetry, when the application has it: an enqueue records the caller's trace context
in the job (`jobs.trace`, W3C trace context as JSON), and the worker runs each handler in a
span of its own, linked to that context.

Invariants:
- Without `opentelemetry-api` installed nothing changes and nothing of it is imported: the
  enqueue sends NULL and the handler runs as it would (`handler_span` is a no-op). Installed
  but with no tracer provider set (the API's default proxy records nothing), the handler runs
  without a span too: a span nobody records cost the worker ~15 us per job.
- With it, the handler's span is a CONSUMER span named `<queue> process`, current while the
  handler runs (a span the handler starts is its child), with the job's queue, id, attempt and
  fence as attributes, and a link (not a parent) to the enqueue's context: a job may run long
  after, and more than once. A handler that raises marks the span as an error; recording it
  never changes what the handler raised (an exception whose text cannot be read included).
- No trace is ever the job's fault: a context that cannot be read is dropped, never raised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, Protocol

from .extras import installed


class TracedJob(Protocol):
    """What a handler's span is made from (the worker's JobContext has it)."""

    id: int
    queue: str
    attempts: int
    fence: int
    trace: Mapping[str, Any] | None

#: The instrumentation scope's name, as tracers and exporters show it.
SCOPE = "pgq"


@cache
def available() -> bool:
    """Whether the OpenTelemetry API is installed (looked up once, imported only if so)."""
    return installed("otel")


def current() -> dict[str, str] | None:
    """The caller's trace context as W3C headers (`traceparent`, `tracestate`), or None when
    there is none to record (no OpenTelemetry, or no span is active)."""
    if not available():
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    with contextlib.suppress(Exception):
        propagate.inject(carrier)
    return carrier or None


_UNTRACED = contextlib.nullcontext()


def recording() -> bool:
    """Whether a handler's span would go anywhere: OpenTelemetry installed and a tracer
    provider set by the application (asked per job: it may be set after the worker started)."""
    if not available():
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def handler_span(ctx: TracedJob) -> contextlib.AbstractContextManager[None]:
    """Run the block (the handler) in the job's span; a no-op when nothing records spans."""
    return _span(ctx) if recording() else _UNTRACED


@contextlib.contextmanager
def _span(ctx: TracedJob) -> Iterator[None]:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    links = []
    parent = _span_context(ctx.trace)
    if parent is not None:
        links.append(Link(parent))
    tracer = trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
        f"{ctx.queue} process",
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "pgq",
            "messaging.operation.type": "process",
            "messaging.destination.name": ctx.queue,
            "messaging.message.id": str(ctx.id),
            "pgq.job.id": ctx.id,
            "pgq.job.attempt": ctx.attempts,
            "pgq.job.fence": ctx.fence,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except BaseException as exc:
            # the handler's own exception goes on; an exception whose text cannot be read
            # (its __str__ raises) must not replace it while the span records it
            with contextlib.suppress(Exception):
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.record_exception(exc)
            raise


def _span_context(carrier: Mapping[str, Any] | None) -> Any:
    """The span context a carrier holds, or None (none recorded, or unreadable)."""
    if not carrier or not isinstance(carrier, Mapping):
        return None
    from opentelemetry import propagate, trace

    try:
        headers = {str(k): str(v) for k, v in carrier.items()}
        span_context = trace.get_current_span(propagate.extract(headers)).get_span_context()
    except Exception:  # noqa: BLE001 - a context that cannot be read is dropped, never raised
        return None
    return span_context if span_context.is_valid else None
