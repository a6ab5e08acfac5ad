"""How many claims it takes to get a parent while 50 threads enqueue its children (issue 30).

PYTHONPATH=.:benchmarks python -c "import workflow_claim_tries as w; w.main(DSN, 20)"

Each round enqueues a parent P with one child (so it has children), starts 50 threads that
each enqueue children of P in a loop (one job per transaction, on a connection of its own),
waits until they run, then claims P's queue one job at a time until it gets P, counting the
claims that came back empty. Prints the tries per round: their median and maximum, and the
children enqueued meanwhile. Not a speed figure: a claim of P either waits for no enqueue or
skips P while any holds it.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import timedelta

from pgq_bench import throwaway_schema
from pgq_core import Queue

THREADS = 50


def one_round(dsn: str, schema: str, q: Queue) -> tuple[int, int]:
    """(claims it took to get the parent, children enqueued meanwhile)."""
    parent = q.enqueue("wf", {})
    q.enqueue("wf_kids", {}, depends_on=[parent])
    stop = threading.Event()
    started = threading.Barrier(THREADS + 1)
    counts = [0] * THREADS

    def enqueue(n: int) -> None:
        with Queue.connect(dsn, schema) as mine:
            started.wait()
            while not stop.is_set():
                mine.enqueue("wf_kids", {}, depends_on=[parent])
                counts[n] += 1

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.2)  # every thread in its loop
    tries = 0
    while True:
        tries += 1
        got = q.claim("wf", 1, timedelta(seconds=30), "bench")
        if got:
            assert got[0].id == parent
            break
    stop.set()
    for t in threads:
        t.join()
    q.complete(parent, got[0].fence)
    return tries, sum(counts)


def main(dsn: str, rounds: int) -> None:
    with throwaway_schema(dsn, "bench_wf_claim") as schema, Queue.connect(dsn, schema) as q:
        results = [one_round(dsn, schema, q) for _ in range(rounds)]
    tries = [r[0] for r in results]
    print(f"claims to get the parent, {rounds} rounds, {THREADS} enqueuing threads: "
          f"median {statistics.median(tries):g}, max {max(tries)}, all {tries}")
    print(f"children enqueued per round: median {statistics.median(r[1] for r in results):g}")
