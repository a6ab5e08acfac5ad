"""What pinning search_path (version 10) costs the functions pgq calls on its hot paths.

python benchmarks/pinned_search_path.py DSN [ROUNDS]

Three throwaway schemas at the latest version: as migrated (`pinned`: the procedural functions
pinned, the two error-group SQL functions qualified and inlinable), with every setting taken
off again (`unpinned`: version 9's behaviour), and with the error-group functions pinned too
(`all SET`: what pinning them would cost, since a function with a SET clause is never inlined).
Interleaved rounds (the order rotates), median per side:
- the error group of 100,000 error texts (what the trigger computes for each failed job);
- 2,000 single-row inserts into jobs in one DO loop (the jobs trigger runs once per statement);
- 20,000 rows given an error by one UPDATE (the error-group trigger runs once per row).
Everything runs server-side, so the figures are the functions' own cost, not round trips.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from pgq_bench import throwaway_schema

STEPS = {
    "error_group() of 100,000 texts": (
        "SELECT pg_catalog.count({s}.error_group('error ' || g || ' at 0x' || to_hex(g)))"
        " FROM generate_series(1, 100000) g"
    ),
    "2,000 one-row inserts (jobs trigger)": (
        "DO $$ BEGIN FOR i IN 1..2000 LOOP"
        " INSERT INTO {s}.jobs (queue, payload) VALUES ('b', '{{}}'); END LOOP; END $$"
    ),
    "20,000 rows get an error (row trigger)": (
        "UPDATE {s}.jobs SET last_error = 'error ' || id || ' at 0x' || to_hex(id)"
    ),
}


def unpin(conn: psycopg.Connection[Any], schema: str) -> None:
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.pronamespace = %s::regnamespace AND p.proconfig IS NOT NULL",
        [schema],
    ).fetchall()
    for (signature,) in rows:
        conn.execute(sql.SQL("ALTER FUNCTION {} RESET search_path").format(sql.SQL(signature)))


def pin_error_functions(conn: psycopg.Connection[Any], schema: str) -> None:
    for signature in ("error_pattern(text)", "error_group(text)"):
        conn.execute(
            sql.SQL("ALTER FUNCTION {}.{} SET search_path = pg_catalog, {}, pg_temp").format(
                sql.Identifier(schema), sql.SQL(signature), sql.Identifier(schema)
            )
        )


def timed(conn: psycopg.Connection[Any], schema: str, text: str) -> float:
    started = time.perf_counter()
    conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)))
    return time.perf_counter() - started


def main(dsn: str, rounds: int) -> None:
    with (
        throwaway_schema(dsn, "bench_pinned") as pinned,
        throwaway_schema(dsn, "bench_unpinned") as unpinned,
        throwaway_schema(dsn, "bench_all_set") as all_set,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        unpin(conn, unpinned)
        pin_error_functions(conn, all_set)
        sides = {pinned: "pinned", unpinned: "unpinned", all_set: "all SET"}
        order = list(sides)
        seconds: dict[tuple[str, str], list[float]] = {}
        for n in range(rounds):
            for schema in order[n % 3 :] + order[: n % 3]:
                conn.execute(sql.SQL("TRUNCATE {}.jobs").format(sql.Identifier(schema)))
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.jobs (queue, payload) SELECT 'e', '{{}}'"
                        " FROM generate_series(1, 20000)"
                    ).format(sql.Identifier(schema))
                )
                for step, text in STEPS.items():
                    seconds.setdefault((step, sides[schema]), []).append(
                        timed(conn, schema, text)
                    )
        version = conn.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}, median of {rounds} rounds")
        print(f"{'':40s} {'pinned':>10s} {'unpinned':>10s} {'all SET':>10s}  (ms)")
        for step in STEPS:
            figures = [statistics.median(seconds[(step, side)]) * 1000 for side in sides.values()]
            print(f"{step:40s} " + " ".join(f"{f:10.1f}" for f in figures))

if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)
