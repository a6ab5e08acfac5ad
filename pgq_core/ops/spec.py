"""A job to enqueue (`JobSpec`), the checks every enqueue makes before sending anything, and
the parallel arrays a batch of specs travels as.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from psycopg.types.json import Jsonb

from .. import jsontext, tracing
from ..config import check_new_queue_name, check_queue_name
from ..defaults import BACKOFF_MAX, DEFAULT_MAX_ATTEMPTS, UNIQUE_KEY_MAX_BYTES

_T = TypeVar("_T")


def _filled_at_once(cls: type[_T]) -> type[_T]:
    """Frozen dataclass `cls` with an __init__ of dataclass's signature and defaults that fills
    the new instance's __dict__ in one update, then calls __post_init__: dataclass's own sets
    each field through object.__setattr__, and a batch makes thousands (docs/performance.md)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(f.default_factory is not dataclasses.MISSING or not f.init for f in fields):
        raise TypeError(f"{cls.__name__}: only fields with plain defaults are filled at once")
    given = inspect.signature(cls.__init__).parameters
    defaults = {n: p.default for n, p in given.items() if p.default is not p.empty}
    names = [f.name for f in fields]
    params = ", ".join(f"{n}=_defaults[{n!r}]" if n in defaults else n for n in names)
    fill = ", ".join(f"{n}={n}" for n in names)
    source = f"def __init__(self, {params}):\n self.__dict__.update({fill})\n self.__post_init__()"
    # made in the class's module, as dataclass makes its own: its string annotations resolve
    # there (typing.get_type_hints), and it is that module's; the defaults come from `scope`
    scope: dict[str, Any] = {"_defaults": defaults}
    exec(source, vars(sys.modules[cls.__module__]), scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__, init.__annotations__ = cls.__init__.__doc__, cls.__init__.__annotations__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@_filled_at_once
@dataclass(frozen=True)
class JobSpec:
    """A job to enqueue. `run_at` wins over `delay`; with neither the job is due now. A naive
    `run_at` is the client's local time.

    With a `unique_key`, nothing is inserted while a ready (due or scheduled) or running job
    holds that key: the enqueue returns the holder's id instead. Done and dead jobs hold no key.
    """

    queue: str
    payload: Any
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: higher is claimed first among due jobs of the queue
    priority: int = 0
    unique_key: str | None = None
    #: ids of jobs this one waits for (status 'waiting'): it becomes ready once every one is
    #: done, and dies when one dies (docs/guides/enqueue.md, workflows). Each must exist; one
    #: done already is satisfied. Not with a unique_key (a waiting job holds no key).
    depends_on: Sequence[int] = ()
    #: seconds: a failed attempt n waits min(backoff_cap, backoff_base * 2**n) before the next
    #: (less jitter); None is the settling worker's (its retry_base; BACKOFF_CAP)
    backoff_base: float | None = None
    backoff_cap: float | None = None

    def __post_init__(self) -> None:
        if self.run_at is not None and self.run_at.tzinfo is None:
            object.__setattr__(self, "run_at", client_time(self.run_at))


def client_time(at: datetime | None) -> datetime | None:
    """A naive datetime is the client's local time, as the CLI's --run-at reads one, never the
    server's TimeZone: made aware here, before any statement sees it."""
    return at if at is None or at.tzinfo is not None else at.astimezone()


def check_unique_key(key: str) -> str:
    """ValueError unless `key` is storable and indexable: not empty, no NUL, valid UTF-8, at
    most UNIQUE_KEY_MAX_BYTES bytes."""
    if not key:
        raise ValueError("unique key must not be empty")
    if "\x00" in key:
        raise ValueError("unique key must not hold a NUL character")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("unique key is not valid UTF-8") from None
    if size > UNIQUE_KEY_MAX_BYTES:
        raise ValueError(
            f"unique key is {size} bytes long (UTF-8); at most {UNIQUE_KEY_MAX_BYTES} fit "
            "(it is indexed)"
        )
    return key


#: max_attempts and priority are int4 columns.
_INT4_MIN, _INT4_MAX = -(2**31), 2**31 - 1


def check_max_attempts(value: Any) -> int:
    """ValueError unless `value` is an int from 1 to 2**31 - 1 (not a float, not a bool)."""
    return _int4(value, "max_attempts", 1)


def check_priority(value: Any) -> int:
    """ValueError unless `value` is an int of 32 bits (not a float, not a bool)."""
    return _int4(value, "priority", _INT4_MIN)


def _int4(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= _INT4_MAX:
        raise ValueError(f"{what} must be an integer from {least} to {_INT4_MAX}, got {value!r}")
    return value


def check_backoff(seconds: float | None, what: str) -> float | None:
    """ValueError unless `seconds` is None or a number of seconds from 0 to BACKOFF_MAX."""
    if seconds is None:
        return None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise ValueError(f"{what} must be a number of seconds, got {type(seconds).__name__}")
    if not 0 <= seconds <= BACKOFF_MAX:
        raise ValueError(f"{what} must be from 0 to {BACKOFF_MAX:g} seconds, got {seconds!r}")
    return float(seconds)


def check_spec(spec: JobSpec, named: set[str] | None = None) -> None:
    """ValueError unless `spec` may be enqueued. `named`: queue names already checked by the
    caller's earlier calls, and this one's added (a batch's jobs mostly share a queue, and a
    name's check is most of a spec's)."""
    if named is None or type(spec.queue) is not str or spec.queue not in named:
        check_new_queue_name(spec.queue)
        if named is not None:
            named.add(spec.queue)
    attempts, priority = spec.max_attempts, spec.priority
    if type(attempts) is not int or not 0 < attempts <= _INT4_MAX:  # inline: the common case
        check_max_attempts(attempts)
    if type(priority) is not int or not _INT4_MIN <= priority <= _INT4_MAX:
        check_priority(priority)
    if spec.unique_key is not None:
        check_unique_key(spec.unique_key)
    check_backoff(spec.backoff_base, "backoff_base")
    check_backoff(spec.backoff_cap, "backoff_cap")
    if spec.depends_on:
        check_depends_on(spec.depends_on)
        if spec.unique_key is not None:
            raise ValueError(
                "a job with depends_on cannot have a unique_key (a waiting job holds no key)"
            )


def check_depends_on(ids: Sequence[int]) -> None:
    """ValueError unless `ids` are job ids (positive integers)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise ValueError(f"depends_on must be a sequence of job ids, got {ids!r}")
    for job_id in ids:
        if not isinstance(job_id, int) or isinstance(job_id, bool) or not 0 < job_id < 2**63:
            raise ValueError(f"depends_on: {job_id!r} is not a job id")


def trace_context() -> Jsonb | None:
    """The enqueuing code's trace context, recorded in its jobs (`tracing`)."""
    carrier = tracing.current()
    return None if carrier is None else Jsonb(carrier)


def job_arrays(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """The parallel arrays of a batch enqueue (the fragment `job_input`), and the trace. An
    array of NULLs only is sent empty: `ROWS FROM` pads a shorter array with NULLs, and
    psycopg's dumping of a list is per element, in Python."""
    return {
        "queues": [s.queue for s in specs],
        "payloads": jsontext.jsonb([s.payload for s in specs]),
        "run_ats": unless_all_none([s.run_at for s in specs]),
        "delays": unless_all_none([s.delay for s in specs]),
        "max_attempts": [s.max_attempts for s in specs],
        "unique_keys": unless_all_none([s.unique_key for s in specs]),
        "priorities": [s.priority for s in specs],
        "backoff_bases": unless_all_none([s.backoff_base for s in specs]),
        "backoff_caps": unless_all_none([s.backoff_cap for s in specs]),
        "trace": trace_context(),
    }


def unless_all_none(values: list[Any]) -> list[Any]:
    """`values`, or [] when every one is None (a batch's array `ROWS FROM` pads with NULLs)."""
    return values if any(v is not None for v in values) else []


def check_queue(queue: str) -> None:
    """ValueError unless `queue` is a name a job can have (`config.check_queue_name`): a
    longer one could be paused but never resumed (its NOTIFY payload is too long)."""
    check_queue_name(queue)
