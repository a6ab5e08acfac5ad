"""PgQueuer's side of `pgq enqueue --file`, at equal resources: a process that starts,
connects (asyncpg), reads a JSON-lines file and enqueues every non-blank line with PgQueuer's
batch enqueue (`Queries.enqueue`), BATCH lines per call, each line's bytes as its payload (as
PgQueuer stores one). It imports PgQueuer and asyncpg, as a script of PgQueuer's would: no
psycopg, no pgq code. On uvloop when installed, as PgQueuer's CLI runs.

`python -m pgq_bench.pgqueuer_file PATH SCHEMA`, with PEER_CONNECT in the environment: the
JSON of `pgqueuer_side.connect_params` (the parent reads the DSN: psycopg's reader would be
imported here otherwise)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .pgqueuer_side import ENTRYPOINT, connect_with, queries, run_loop

#: Lines per call: the batch size of the in-process sides.
BATCH = 1000


async def enqueue_file(path: str, schema: str, params: dict[str, Any]) -> float:
    """Every non-blank line of `path` as a job in `schema`'s PgQueuer queue; how many."""
    with open(path, "rb") as file:
        lines = [line for line in file.read().split(b"\n") if line.strip()]
    conn = await connect_with(params)
    try:
        q = queries(conn, schema)
        for at in range(0, len(lines), BATCH):
            chunk: list[bytes | None] = list(lines[at : at + BATCH])
            await q.enqueue([ENTRYPOINT] * len(chunk), chunk, [0] * len(chunk))
    finally:
        await conn.close()
    return float(len(lines))


def main() -> None:
    path, schema = sys.argv[1], sys.argv[2]
    run_loop(enqueue_file(path, schema, json.loads(os.environ["PEER_CONNECT"])))


if __name__ == "__main__":
    main()
