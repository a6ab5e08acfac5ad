"""The bulk path (`enqueue_copy_ids`, `may_copy`, `enqueue_copy` of sql/enqueue.sql): jobs
without a unique key or dependencies through COPY, their ids taken first, all or nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import islice, repeat
from operator import add
from typing import Any

from psycopg import sql

from .. import jsontext, tracing
from .op import Op, read_nothing
from .spec import JobSpec, check_spec

#: The bulk path's COPY: an op naming the statement, run through a cursor's `copy` (its text
#: from `copy_text`) rather than executed.
ENQUEUE_COPY: Op[None] = Op("enqueue_copy", {}, read_nothing)
#: Rows per block of COPY text handed to the connection at once.
_COPY_BLOCK = 5000
_NO_DELAY = timedelta(0)
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
#: A backslash, and its COPY text escape (the one character of ASCII JSON COPY must escape).
_BS, _BS2 = "\\", "\\\\"
#: JSON's whitespace that COPY's text format reads as a delimiter or a row's end, escaped.
_WHITESPACE_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r"})
#: Opening brackets a JSON text may hold unparsed (`checked_texts`): it cannot nest deeper,
#: and Python's json reads several times as deep.
_NESTING_UNCHECKED = 200
_NUL = "\x00"


def copy_delays(specs: Sequence[JobSpec]) -> list[timedelta]:
    """Check `specs` for the bulk path (ValueError): as `enqueue_flow` does, and none with a
    unique key or dependencies (those need `enqueue_many`). The distinct delays of the specs
    without a run_at, no delay (due now) first."""
    delays = {_NO_DELAY: None}
    named: set[str] = set()
    for spec in specs:
        check_spec(spec, named)
        if spec.unique_key is not None or spec.depends_on:
            raise ValueError(
                "enqueue_copy takes jobs without a unique_key or depends_on: use enqueue_many"
            )
        if spec.run_at is None and spec.delay is not None:
            delays[spec.delay] = None
    return list(delays)


def copy_ids(
    schema: str, n: int, delays: Sequence[timedelta]
) -> Op[tuple[list[int] | None, list[Any]]]:
    """`n` new job ids (ascending) and the run_at each of `delays` gives, from now(); no ids
    (None) when COPY would refuse the role for row-level security: insert instead
    (`copy_as_specs`)."""
    return Op(
        "enqueue_copy_ids",
        {"jobs": f"{sql.Identifier(schema).as_string(None)}.jobs", "n": n, "delays": list(delays)},
        lambda rows: (None if rows[0][0] is None else sorted(rows[0][0]), list(rows[0][1])),
    )


def copy_as_specs(template: JobSpec, payloads: Sequence[Any]) -> list[JobSpec]:
    """`enqueue_payloads`'s jobs as specs, for the INSERT path: `template` with each payload."""
    return [replace(template, payload=payload) for payload in payloads]


def may_copy(schema: str) -> Op[bool]:
    """Whether the session's role may enqueue through COPY: INSERT on jobs.id, and no
    row-level security applying to it on jobs."""
    return Op(
        "may_copy",
        {"jobs": f"{sql.Identifier(schema).as_string(None)}.jobs"},
        lambda rows: bool(rows[0][0]),
    )


def _copy_field(value: Any) -> str:
    """`value` as a field of COPY's text format: NULL as \\N, a string escaped."""
    if value is None:
        return "\\N"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    return str(value)


def copy_text(
    specs: Sequence[JobSpec],
    ids: Sequence[int],
    delays: Sequence[timedelta],
    run_ats: Sequence[Any],
) -> Iterator[str]:
    """`enqueue_copy`'s rows for `specs`, in blocks of COPY text (columns as in the statement),
    each run_at as the enqueue statements compute it: its own, else now() plus its delay (from
    `copy_ids`)."""
    due = {d: _copy_field(at) for d, at in zip(delays, run_ats, strict=True)}
    trace = _copy_field(_trace_text())
    dumps = jsontext.encoder()
    block: list[str] = []
    for job_id, spec in zip(ids, specs, strict=True):
        run_at = spec.run_at
        when = due[spec.delay or _NO_DELAY] if run_at is None else _copy_field(run_at)
        payload = _copy_json(dumps(spec.payload))
        tail = _copy_tail(when, spec, trace)
        block.append(f"{job_id}\t{_copy_field(spec.queue)}\t{payload}{tail}")
        if len(block) == _COPY_BLOCK:
            yield "".join(block)
            block = []
    if block:
        yield "".join(block)


def payload_texts(payloads: Iterable[Any]) -> Iterator[str]:
    """Each payload as JSON text, as every enqueue path writes it (`jsontext`)."""
    return map(jsontext.encoder(), payloads)


def checked_texts(texts: Iterable[str]) -> list[str]:
    """`texts` as a list, each a str that Python's json reads back: TypeError naming the first
    that is not a str, ValueError the first nested deeper than json reads (a worker could not
    load it: pgq never stores one). Their syntax is left to jsonb, when they are stored."""
    checked = texts if isinstance(texts, list) else list(texts)
    try:  # one pass in C over the common case: no text holds many brackets
        lists, objects = (map(str.count, checked, repeat(b)) for b in "[{")
        if max(map(add, lists, objects), default=0) <= _NESTING_UNCHECKED:
            return checked
    except TypeError:
        pass  # not a str: named below
    for n, text in enumerate(checked):
        if not isinstance(text, str):
            raise TypeError(f"payload text {n} is {type(text).__name__}, not str")
        if text.count("[") + text.count("{") > _NESTING_UNCHECKED:
            try:
                jsontext.loads(text)
            except RecursionError:
                raise ValueError(f"payload text {n} is nested too deeply") from None
            except ValueError:
                pass  # not JSON: jsonb refuses it, with its reason
    return checked


def payload_copy_text(
    template: JobSpec,
    texts: Iterable[str],
    ids: Sequence[int],
    delays: Sequence[timedelta],
    run_ats: Sequence[Any],
) -> Iterator[str]:
    """`copy_text` for one job per JSON text (one id each), each `template` (checked by
    `copy_delays`) but for its payload, without a JobSpec per job: all but the id and the
    payload written once; each text stored as jsonb reads it."""
    run_at = template.run_at
    if run_at is None:
        run_at = dict(zip(delays, run_ats, strict=True))[template.delay or _NO_DELAY]
    head = f"\t{_copy_field(template.queue)}\t"
    tail = _copy_tail(_copy_field(run_at), template, _copy_field(_trace_text()))
    rows = zip(ids, texts, strict=True)
    while block := list(islice(rows, _COPY_BLOCK)):
        fields = _copy_json_fields([t for _, t in block])
        yield "".join([f"{i}{head}{f}{tail}" for (i, _), f in zip(block, fields, strict=True)])


def _copy_json(text: str) -> str:
    """JSON text as a field of COPY's text format: its backslashes doubled, and the whitespace
    JSON allows between tokens that COPY would read as a delimiter or a row's end escaped."""
    text = text.replace(_BS, _BS2)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.translate(_WHITESPACE_ESCAPES)
    return text


def _copy_json_fields(texts: list[str]) -> list[str]:
    """`_copy_json` of each text, escaped together (joined by a NUL, which no text then holds:
    each text alone otherwise)."""
    joined = _NUL.join(texts)
    if joined.count(_NUL) != len(texts) - 1:
        return [_copy_json(t) for t in texts]
    return _copy_json(joined).split(_NUL)


def _copy_tail(when: str, spec: JobSpec, trace: str) -> str:
    """A COPY row's fields after its payload, to its end: `when` (its run_at) and `trace`
    given as COPY fields, and the spec's options between them."""
    options = (spec.max_attempts, spec.priority, spec.backoff_base, spec.backoff_cap)
    return f"\t{when}\t" + "\t".join(map(_copy_field, options)) + f"\t{trace}\n"


def _trace_text() -> str | None:
    """The enqueuing code's trace context as JSON text (`trace_context`), or None."""
    carrier = tracing.current()
    return None if carrier is None else json.dumps(carrier)
