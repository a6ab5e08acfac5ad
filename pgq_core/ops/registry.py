"""The live worker registry (sql/registry.sql): a worker's beat, and its row gone at exit.
"""

from __future__ import annotations

from collections.abc import Sequence

from .op import Op


def worker_beat(
    worker_id: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
    version: str,
    ttl: float,
    counts: tuple[int, int, int],
) -> Op[None]:
    """A worker's beat: its row written, live for `ttl` seconds; `counts`: running, done,
    failed. Expired rows of others are deleted."""
    running, done, failed = counts
    params = {
        "id": worker_id, "host": host, "pid": pid, "queues": list(queues),
        "concurrency": concurrency, "version": version, "ttl": ttl,
        "running": running, "done": done, "failed": failed,
    }
    return Op("worker_beat", params, lambda rows: None)


def worker_gone(worker_id: str) -> Op[None]:
    return Op("worker_gone", {"id": worker_id}, lambda rows: None)
