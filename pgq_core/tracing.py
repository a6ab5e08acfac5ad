"""OpenTelemetry, when the application has it: an enqueue records the caller's trace context
in the job (`jobs.trace`, W3C trace context as JSON), and the worker runs each handler in a
span of its own, linked to that context.

Invariants:
- Without `opentelemetry-api` installed nothing changes and nothing of it is imported: the
  enqueue sends NULL and the handler runs as it would (`handler_span` is a no-op). Installed
  but never imported by the application, an enqueue imports none of it either (no span can
  be active; importing it cost a short `pgq enqueue` ~7 ms) and sends NULL. Installed
  but with no tracer provider set (the API's default proxy records nothing), the handler runs
  without a span too: a span nobody records cost the worker ~15 us per job.
- With it, the handler's span is a CONSUMER span named `<queue> process`, current while the
  handler runs (a span the handler starts is its child), with the job's queue, id, attempt and
  fence as attributes, and a link (not a parent) to the enqueue's context: a job may run long
  after, and more than once. A handler that raises marks the span as an error; recording it
  never changes what the handler raised (an exception whose text cannot be read included).
- No trace is ever the job's fault: a context that cannot be read is dropped, never raised,
  and every call into the tracing API or SDK around a handler (the provider, the tracer, the
  span's start with its processors' `on_start`, its context, its status, its end with their
  `on_end`) is guarded: what it raises is logged once per stage and exception type and
  swallowed, and the handler runs (without a span if none could start) and ends as it would
  untraced. The job's outcome is the handler's alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any, Protocol, TypeVar

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

log = logging.getLogger("pgq.tracing")

#: The module holding the current context: a process that never imported it has none.
_CONTEXT = "opentelemetry.context"

_T = TypeVar("_T")
_said: set[tuple[str, str]] = set()
_said_lock = threading.Lock()


def _guarded(stage: str, call: Callable[[], _T]) -> _T | None:
    """`call()`, or None when it raises: the tracer's failure is logged once per stage and
    exception type (a broken processor would otherwise log every job) and never raised."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - a tracer never decides a job's outcome
        kind = (stage, f"{type(exc).__module__}.{type(exc).__qualname__}")
        with _said_lock:
            first = kind not in _said
            _said.add(kind)
        if first:
            log.warning(
                "tracing failed at %s (%s: %s); the job runs on, this is said once",
                stage,
                type(exc).__name__,
                _text(exc),
            )
        return None


def _text(exc: BaseException) -> str:
    """An exception's first line, or a placeholder when its text cannot be read."""
    try:
        return str(exc).splitlines()[0][:200] if str(exc) else ""
    except Exception:  # noqa: BLE001 - an unreadable message is still a failure to report
        return "(unprintable)"


@cache
def available() -> bool:
    """Whether the OpenTelemetry API is installed (looked up once, imported only if so)."""
    return installed("otel")


def current() -> dict[str, str] | None:
    """The caller's trace context as W3C headers (`traceparent`, `tracestate`), or None when
    there is none to record (no OpenTelemetry, or no span is active)."""
    if not available() or _CONTEXT not in sys.modules:
        return None  # never imported: nothing can have set a span or baggage (nor is it now)
    baggage, propagate, trace, context = _api()
    carrier: dict[str, str] = {}
    with contextlib.suppress(Exception):
        if not context.get_current():  # an empty context holds no span and no baggage
            return None
        # propagators carry the active span's context and the baggage: with neither there is
        # nothing to inject (asking is a few us cheaper than an injection that writes nothing)
        if not trace.get_current_span().get_span_context().is_valid and not baggage.get_all():
            return None
        propagate.inject(carrier)
    return carrier or None


@cache
def _api() -> tuple[Any, Any, Any, Any]:
    """OpenTelemetry's baggage, propagate, trace and context modules, imported once (on each
    enqueue a `from ... import` cost more than the look-ups it serves)."""
    from opentelemetry import baggage, context, propagate, trace

    return baggage, propagate, trace, context


_UNTRACED = contextlib.nullcontext()


def recording() -> bool:
    """Whether a handler's span would go anywhere: OpenTelemetry installed and a tracer
    provider set by the application (asked per job: it may be set after the worker started)."""
    if not available():
        return False
    return bool(_guarded("provider", _provider_records))


def _provider_records() -> bool:
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def handler_span(ctx: TracedJob) -> contextlib.AbstractContextManager[None]:
    """Run the block (the handler) in the job's span; a no-op when nothing records spans.
    Nothing the tracer raises leaves this (the block's own exception goes on unchanged)."""
    return _span(ctx) if recording() else _UNTRACED


@contextlib.contextmanager
def _span(ctx: TracedJob) -> Iterator[None]:
    from opentelemetry import context, trace

    span = _guarded("start", lambda: _start(ctx))
    token = None
    if span is not None:
        token = _guarded("context", lambda: context.attach(trace.set_span_in_context(span)))
    try:
        yield
    except BaseException as exc:
        # the handler's own exception goes on; one the span raises while recording it (an
        # exception whose text cannot be read included) must not replace it
        if span is not None:
            _guarded("status", functools.partial(_record, span, exc))
        raise
    finally:
        if token is not None:
            _guarded("context", lambda: context.detach(token))
        if span is not None:
            _guarded("end", span.end)


def _start(ctx: TracedJob) -> Any:
    """The job's span, started (its processors' `on_start` ran) but not yet current."""
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind

    links = []
    parent = _span_context(ctx.trace)
    if parent is not None:
        links.append(Link(parent))
    return trace.get_tracer(SCOPE).start_span(
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
    )


def _record(span: Any, exc: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    span.record_exception(exc)


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
