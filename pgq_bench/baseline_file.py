"""The baseline's side of `pgq enqueue --file`, at equal resources: a process that starts,
connects, reads a JSON-lines file and enqueues every non-blank line with the baseline's batch
INSERT, BATCH lines per statement, each line's text as it is (jsonb parses it, as it does the
lines pgq sends through COPY). It imports psycopg alone, as a plain-SQL script would.

`python -m pgq_bench.baseline_file PATH QUEUE`, with BASELINE_DSN, BASELINE_SCHEMA and
BASELINE_STATEMENT (the batch INSERT, from the parent: reading baseline.sql here would
import pgq_core) in the environment."""

from __future__ import annotations

import os
import sys

import psycopg

#: Lines per statement: the batch size of the in-process baseline.
BATCH = 1000


def main() -> None:
    path, queue = sys.argv[1], sys.argv[2]
    with open(path, "rb") as file:
        lines = [line for line in file.read().decode().split("\n") if line.strip()]
    options = f"-c search_path={os.environ['BASELINE_SCHEMA']}"
    statement = os.environ["BASELINE_STATEMENT"]
    with psycopg.connect(os.environ["BASELINE_DSN"], autocommit=True, options=options) as conn:
        for at in range(0, len(lines), BATCH):
            conn.execute(statement.encode(), {"queue": queue, "payloads": lines[at : at + BATCH]})


if __name__ == "__main__":
    main()
