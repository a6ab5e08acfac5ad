"""Jobs that wait for others (sql/workflows.sql): enqueued after their parents, and a job's
parents and children read back.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..defaults import LINKS_LIMIT
from ..errors import PgqError
from ..models import JobLink
from .op import Op, Rows
from .spec import JobSpec, job_arrays


def enqueue_after(specs: Sequence[JobSpec]) -> Op[list[int]]:
    """One `enqueue_after` statement (sql/workflows.sql) for `specs`, already checked, none with
    a unique key: their ids in order. PgqError naming the parents that do not exist (then
    nothing was inserted)."""

    def read(rows: Rows) -> list[int]:
        missing = [int(r[1]) for r in rows if r[0] == "missing"]
        if missing:
            shown = ", ".join(str(i) for i in missing[:10])
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise PgqError(f"depends_on: no job {shown}{more}; nothing was enqueued")
        return [int(r[1]) for r in rows if r[0] == "job"]

    ns = [n for n, spec in enumerate(specs, 1) for _ in spec.depends_on]
    parents = [int(p) for spec in specs for p in spec.depends_on]
    return Op(
        "enqueue_after",
        {**job_arrays(specs), "dep_ns": ns, "dep_parents": parents},
        read,
    )


def job_links(job_id: int, kind: str, limit: int = LINKS_LIMIT) -> Op[tuple[list[JobLink], int]]:
    """A job's parents (`kind` 'parents') or children ('children'): at most `limit`, lowest id
    first, and how many there are in all."""
    assert kind in ("parents", "children")

    def read(rows: Rows) -> tuple[list[JobLink], int]:
        links = [JobLink(int(r[0]), r[1], r[2]) for r in rows]
        return links, int(rows[0][3]) if rows else 0

    params = {"id": job_id, "limit": limit}
    if kind == "parents":
        return Op("job_parents", params, read)
    return Op("job_children", params, read)
