"""A real failover cluster: Patroni with etcd and two PostgreSQL 15 nodes (`pgq_bench.cluster`),
the leader SIGKILLed under three `pgq worker` processes, ten times in a row, asynchronous and
synchronous (`pgq_bench.failover`); the cluster's teardown; the checker failing on what it
exists to catch; `pgq bench --failover`'s usage errors.

The scenarios bring their own PostgreSQL 15, so they run once: in the embedded run, not again
when PGQ_TEST_DSN points the suite at another server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from pgq_bench.cluster import Cluster, missing
from pgq_bench.failover import (
    CLAIM_BACK_LIMIT_S,
    FailoverOptions,
    analyse,
    batches,
    run_failover,
)
from pgq_bench.handlers import FAILOVER_TABLES
from pgq_cli.cli import main
from pgq_core import Queue


def _cluster_skip() -> str | None:
    if os.environ.get("PGQ_TEST_DSN"):
        return "the failover cluster brings its own PostgreSQL 15: it runs in the embedded run"
    reason = missing()
    return f"no failover cluster here: {reason}" if reason else None


needs_cluster = pytest.mark.skipif(_cluster_skip() is not None, reason=_cluster_skip() or "")


def _left_behind(base: Path) -> list[str]:
    """Processes still working under `base`, and zombie children of this process."""
    found = []
    root = str(base)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            cwd = ""
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if cwd == root or cwd.startswith(root + "/"):
            found.append(f"{name} in {cwd}")
        elif int(ppid) == os.getpid() and state == "Z":
            found.append(f"{name} zombie: {stat[: stat.rindex(')') + 1]}")
    return found


@pytest.mark.slow
@needs_cluster
@pytest.mark.parametrize("synchronous", [False, True], ids=["async", "sync"])
def test_ten_failovers_under_load(synchronous: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """3 workers at C=10, 5,000 jobs making fenced writes, the leader killed 10 times: no job
    lost, no stale write, never two holders of one fence, claims back within 10 s of every
    promotion; re-runs only for commits the failover lost, none under synchronous replication."""
    said: list[str] = []
    opts = FailoverOptions(synchronous=synchronous, seed=28)
    result = run_failover(opts, said.append)
    checks = result["checks"]
    rr = checks["re_runs_for_lost_completions"]
    with capsys.disabled():
        print(
            f"\n[{'sync' if synchronous else 'async'} failovers] re-runs for lost completions: "
            f"{rr['jobs']} jobs ({rr['acknowledged_commits_lost']} acknowledged commits lost); "
            f"timings {json.dumps(result['timings'])}; "
            f"attempts spent by the failovers {result['figures']['attempts_spent_by_failovers']}"
        )
    evidence = json.dumps({"checks": checks, "said": said[-15:]}, default=str, indent=1)
    failovers = result["failovers"]
    assert len(failovers) == 10, evidence
    assert [f["timeline"] for f in failovers] == list(range(2, 12)), "each kill was a failover"
    assert all(f["killed"] != f["promoted"] for f in failovers)
    assert all(0 < f["batch_acked_at_kill"] < f["batch_size"] for f in failovers), (
        "each kill came under load, with part of its batch still to run"
    )
    lost = checks["no_job_lost"]
    assert lost["enqueued"] == 5_000 and lost["lost"] == 0, evidence
    assert lost["done"] == 5_000, evidence
    assert checks["every_done_job_has_its_effect"]["done_without_effect"] == 0, evidence
    stale = checks["no_stale_write_accepted"]
    assert stale["effects_not_from_final_claim"] == 0, evidence
    assert stale["jobs_without_exactly_one_applied_row_from_final_claim"] == 0, evidence
    assert checks["never_two_holders_of_one_fence"]["fences_held_twice"] == 0, evidence
    claims = checks["claims_back_within_10s"]["seconds"]
    assert all(s is not None and s < CLAIM_BACK_LIMIT_S for s in claims), evidence
    if synchronous:
        assert rr["jobs"] == 0 and rr["acknowledged_commits_lost"] == 0, evidence
    assert checks["no_worker_exited_by_itself"]["passed"], evidence
    assert result["passed"] is True, evidence


@pytest.mark.slow
@needs_cluster
def test_the_cluster_leaves_nothing_behind_on_an_interrupt() -> None:
    """A KeyboardInterrupt inside the cluster's block: every process of it is gone, none is
    left a zombie, its directory is removed; the killed leader's node had failed over first."""
    with pytest.raises(KeyboardInterrupt), Cluster() as cluster:
        base = cluster.base
        assert cluster.leader() == 0
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (1)")
        assert cluster.kill_leader() == 0
        promotion = cluster.wait_for_promotion(60)
        assert promotion.node == 1 and promotion.timeline == 2
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT inet_server_port(), count(*) FROM kept").fetchone()
            assert row == (cluster.nodes[1].pg_port, 1)
        raise KeyboardInterrupt
    assert _left_behind(base) == []
    assert not base.exists()


@pytest.mark.slow
@needs_cluster
def test_the_watchdog_cleans_up_after_an_owner_that_died() -> None:
    """The owning process exits without closing (os._exit, as a killed test runner would):
    the watchdog kills the cluster's processes and removes its directory."""
    code = (
        "import os, sys\n"
        "from pgq_bench.cluster import Cluster\n"
        "c = Cluster(); c.start()\n"
        "print(c.base, flush=True)\n"
        "os._exit(3)\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180
    )
    assert done.returncode == 3, done.stderr
    base = Path(done.stdout.strip())
    deadline = time.monotonic() + 30
    while (_left_behind(base) or base.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in _left_behind(base) if "zombie" not in p] == []
    assert not base.exists()


def test_batches_split_the_jobs_evenly() -> None:
    assert batches(5_000, 11) == [455] * 6 + [454] * 5
    assert sum(batches(7, 3)) == 7 and batches(7, 3) == [3, 2, 2]


def _run(event: str, job: int, fence: int, run: str) -> dict[str, Any]:
    return {"event": event, "job": job, "fence": fence, "worker": run.split("/")[0],
            "pid": 1, "run": run, "mono": 0.0, "wall": 0.0}  # fmt: skip


@pytest.mark.fresh_schema
def test_the_checks_pass_a_clean_run_and_catch_each_fault(queue: Queue, schema: str) -> None:
    """The checker on a real database: a clean record passes; a job left running, a done job
    without its effect, an effect from another claim, two runs of one fence, and a second
    acknowledged commit under synchronous replication each fail their own check."""
    conn = queue.conn
    conn.execute(sql.SQL(FAILOVER_TABLES).format(s=sql.Identifier(schema)))
    ids = [queue.enqueue("failover", {"n": n}) for n in range(4)]
    jobs = {j.id: j for j in queue.claim("failover", limit=4, worker="w1")}
    assert sorted(jobs) == ids
    a, b, c, d = ids

    def apply(job: int, worker: str, run: str, complete: bool = True) -> None:
        with conn.transaction():
            conn.execute(
                sql.SQL("INSERT INTO {}.effects VALUES (%s, %s, %s, %s) ON CONFLICT (job_id) "
                        "DO UPDATE SET worker = excluded.worker").format(sql.Identifier(schema)),
                [job, jobs[job].fence, worker, run],
            )  # fmt: skip
            conn.execute(
                sql.SQL("INSERT INTO {}.applied (job_id, fence, worker, run) "
                        "VALUES (%s, %s, %s, %s)").format(sql.Identifier(schema)),
                [job, jobs[job].fence, worker, run],
            )  # fmt: skip
            if complete:
                queue.complete(job, jobs[job].fence, worker="w1", conn=conn)

    clean = [j for j in ids if j != d]
    for n, job in enumerate(clean):
        apply(job, "w1", f"w1/1/{n}")
    lines = [_run(e, j, jobs[j].fence, f"w1/1/{n}")
             for n, j in enumerate(clean) for e in ("start", "acked")]  # fmt: skip
    failovers = [{"number": 1, "first_claim_after_promotion_s": 0.4}]
    opts = FailoverOptions(failovers=1, synchronous=True)
    verdict = analyse(conn, clean, lines, failovers, opts, schema)
    assert verdict["passed"] is True, verdict
    assert verdict["figures"]["handler_runs"] == 3

    # the faults: d left running (lost); b done without its effect; c's effect from w2, applied
    # twice; a run again under the same fence and acknowledged twice; one claim back too slow
    conn.execute(sql.SQL("DELETE FROM {}.effects WHERE job_id = %s").format(
        sql.Identifier(schema)), [b])  # fmt: skip
    conn.execute(sql.SQL("DELETE FROM {}.applied WHERE job_id = %s").format(
        sql.Identifier(schema)), [b])  # fmt: skip
    apply(c, "w2", "w2/2/9", complete=False)
    lines += [_run("start", a, jobs[a].fence, "w2/2/7"), _run("acked", a, jobs[a].fence, "w2/2/7")]
    failovers.append({"number": 2, "first_claim_after_promotion_s": 12.5})
    opts = FailoverOptions(failovers=2, synchronous=True)
    verdict = analyse(conn, ids, lines, failovers, opts, schema)
    checks = verdict["checks"]
    assert verdict["passed"] is False
    assert checks["no_job_lost"]["lost"] == 1
    assert checks["no_job_lost"]["sample"][str(d)]["history"][-1].split()[1] == "claimed"
    assert checks["every_done_job_has_its_effect"]["done_without_effect"] == 1
    assert checks["every_done_job_has_its_effect"]["sample"][0]["job"] == b
    stale = checks["no_stale_write_accepted"]
    assert stale["effects_not_from_final_claim"] == 1
    assert stale["jobs_without_exactly_one_applied_row_from_final_claim"] == 1
    assert [s["job"] for s in stale["sample"]] == [c, c]
    assert checks["never_two_holders_of_one_fence"]["sample"][0]["job"] == a
    assert checks["re_runs_for_lost_completions"]["jobs"] == 1
    # a's second commit and b's (deleted above) are acknowledged but not in the database
    assert checks["re_runs_for_lost_completions"]["acknowledged_commits_lost"] == 2
    assert not checks["re_runs_for_lost_completions"]["passed"]
    assert checks["claims_back_within_10s"]["failovers_over_limit"] == [2]
    # under asynchronous replication a re-run for a lost commit is allowed, and counted
    verdict = analyse(conn, ids, lines, failovers, FailoverOptions(failovers=2), schema)
    assert verdict["checks"]["re_runs_for_lost_completions"]["passed"] is True
    assert verdict["checks"]["re_runs_for_lost_completions"]["jobs"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sync"], "--sync is an option of --failover"),
        (["--failover", "--pickup"], "separate runs: pick one"),
        (["--failover", "--lag", "11s"], "must be at most 10s"),
        (["--failover", "--failovers", "0"], "0 is not in the range"),
    ],
)
def test_bench_failover_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
