"""Stuck jobs (issue 23): a running job whose lease is still renewed (its worker heartbeats)
but whose run so far is past its queue's p99 run time times a factor, and past a floor. Rows
are made real (enqueue, claim, complete) and their times set by SQL; read through
`Queue.health`, `pgq health` (human and --json), the exporter and the dashboard's Health view."""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from support import Pgq, dashboard, error_line, ok

from pgq_core import AsyncQueue, JobSpec, Queue, ops
from pgq_core.exporter import QueueCollector

#: run time of every done job of the `steady` queue: its p99 is this, so 3x is 90 s
DONE_RUN = 30.0


@dataclass(frozen=True)
class Scene:
    flagged: int  # steady, 120 s running, live lease: past 3 x p99 (90 s)
    expired: int  # steady, 120 s running, lease expired: the reaper's, not stuck
    under: int  # steady, 75 s running: past the floor (60 s), under 3 x p99
    fresh: int  # fresh (no done jobs), 70 s running, live lease: past the floor alone
    young: int  # fresh, 30 s running: under the floor
    stale_history: int  # old: done jobs only 2 h ago (out of the window), 70 s running


def _set(queue: Queue, job_id: int, assignments: str, *params: Any) -> None:
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET " + assignments + " WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [*params, job_id],
    )


def _running(queue: Queue, name: str, ran: float, lease_left: float, worker: str) -> int:
    job_id = queue.enqueue(name, {"ran": ran})
    jobs = queue.claim(name, 1, timedelta(seconds=30), worker)
    assert [j.id for j in jobs] == [job_id]
    _set(
        queue,
        job_id,
        "claimed_at = now() - make_interval(secs => %s),"
        " lease_until = now() + make_interval(secs => %s)",
        ran,
        lease_left,
    )
    return job_id


def _done(queue: Queue, name: str, count: int, run: float, ago: float) -> None:
    queue.enqueue_many([JobSpec(name, {"n": i}) for i in range(count)])
    for job in queue.claim(name, count, timedelta(seconds=30), "past-worker"):
        queue.complete(job.id, job.fence)
        _set(
            queue,
            job.id,
            "finished_at = now() - make_interval(secs => %s),"
            " claimed_at = now() - make_interval(secs => %s)",
            ago,
            ago + run,
        )


def make_scene(queue: Queue) -> Scene:
    _done(queue, "steady", 20, DONE_RUN, 600)
    _done(queue, "old", 5, 1000, 7200)
    return Scene(
        flagged=_running(queue, "steady", 120, 20, "w-alive"),
        expired=_running(queue, "steady", 120, -5, "w-gone"),
        under=_running(queue, "steady", 75, 20, "w-alive"),
        fresh=_running(queue, "fresh", 70, 20, "w-\x1b[31m[bold]x"),
        young=_running(queue, "fresh", 30, 20, "w-alive"),
        stale_history=_running(queue, "old", 70, 20, "w-alive"),
    )


def test_stuck_jobs_past_p99_times_factor_or_the_floor_with_a_live_lease(queue: Queue) -> None:
    scene = make_scene(queue)
    stuck = queue.health().stuck_jobs
    assert stuck is not None
    assert (stuck.factor, stuck.floor_seconds, stuck.window_seconds) == (3.0, 60.0, 3600.0)
    # the longest running first
    assert [j.id for j in stuck.jobs] == [scene.flagged, scene.fresh, scene.stale_history]
    assert stuck.total == 3
    by_id = {j.id: j for j in stuck.jobs}
    steady = by_id[scene.flagged]
    assert steady.queue == "steady" and steady.worker == "w-alive"
    assert steady.p99_seconds == pytest.approx(DONE_RUN, abs=0.01)
    assert steady.done_jobs == 20
    assert steady.threshold_seconds == pytest.approx(3 * DONE_RUN, abs=0.01)
    assert 119 < steady.running_seconds < 130
    for job_id in (scene.fresh, scene.stale_history):
        job = by_id[job_id]
        assert job.p99_seconds is None and job.done_jobs == 0
        assert job.threshold_seconds == 60.0
    warnings = [w for w in queue.health().warnings if "stuck" in w]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "3 running jobs stuck (past 3x the queue's p99 run time, the longest done run and 1m,"
    )
    assert f"job {scene.flagged} on 'steady'" in warnings[0]


def test_factor_floor_and_limit_are_settable(queue: Queue) -> None:
    scene = make_scene(queue)
    # factor 1: steady's threshold is max(30, 60) = 60, so the 75 s job is stuck too
    loose = queue.health(stuck_factor=1).stuck_jobs
    assert loose is not None
    assert {j.id for j in loose.jobs} == {
        scene.flagged,
        scene.under,
        scene.fresh,
        scene.stale_history,
    }
    # floor 0: fresh's threshold is 0, so even the 30 s job is stuck; steady keeps 3 x p99
    no_floor = queue.health(stuck_floor=timedelta(0)).stuck_jobs
    assert no_floor is not None
    assert {j.id for j in no_floor.jobs} == {
        scene.flagged,
        scene.fresh,
        scene.young,
        scene.stale_history,
    }
    # a high floor wins over 3 x p99
    high = queue.health(stuck_floor=timedelta(seconds=100)).stuck_jobs
    assert high is not None and [j.id for j in high.jobs] == [scene.flagged]
    assert high.jobs[0].threshold_seconds == 100.0
    # bounded list, whole count
    one = queue.health(stuck_limit=1).stuck_jobs
    assert one is not None and [j.id for j in one.jobs] == [scene.flagged] and one.total == 3
    assert queue.stuck_counts() == {"fresh": 1, "old": 1, "steady": 1}
    assert queue.stuck_counts(factor=1) == {"fresh": 1, "old": 1, "steady": 2}
    assert scene.expired not in {j.id for j in no_floor.jobs}


@pytest.mark.parametrize(
    ("factor", "floor"), [(0.0, timedelta(0)), (-1.0, timedelta(0)), (3.0, timedelta(seconds=-1))]
)
def test_bad_factor_or_floor_is_refused(queue: Queue, factor: float, floor: timedelta) -> None:
    with pytest.raises(ValueError, match="stuck"):
        queue.health(stuck_factor=factor, stuck_floor=floor)


def test_no_running_job_no_stuck_job(queue: Queue) -> None:
    _done(queue, "steady", 3, DONE_RUN, 60)
    health = queue.health()
    assert health.stuck_jobs is not None and health.stuck_jobs.total == 0
    assert health.stuck_jobs.jobs == []
    assert not [w for w in health.warnings if "stuck" in w]


async def test_async_queue_reads_the_same(aqueue: AsyncQueue, queue: Queue) -> None:
    scene = make_scene(queue)
    stuck = (await aqueue.health(stuck_factor=1)).stuck_jobs
    assert stuck is not None and stuck.total == 4
    assert stuck.jobs[0].id == scene.flagged


# ---------------------------------------------------------------------------- pgq health


def test_cli_health_json_adds_stuck_jobs_and_keeps_its_keys(pgq: Pgq, queue: Queue) -> None:
    scene = make_scene(queue)
    data = json.loads(ok(pgq("health", "--json")))
    assert list(data) == [
        "tables", "xmin", "notify_usage", "lock_waits", "warnings", "stuck_jobs", "stranded"
    ]
    stuck = data["stuck_jobs"]
    assert {k: stuck[k] for k in ("factor", "floor_seconds", "window_seconds", "limit")} == {
        "factor": 3.0,
        "floor_seconds": 60.0,
        "window_seconds": 3600.0,
        "limit": 100,
    }
    assert stuck["total"] == 3
    assert [j["id"] for j in stuck["jobs"]] == [scene.flagged, scene.fresh, scene.stale_history]
    fresh = stuck["jobs"][1]
    assert fresh["worker"] == "w-\x1b[31m[bold]x"  # JSON: exact
    assert fresh["p99_seconds"] is None and fresh["threshold_seconds"] == 60.0
    assert any("stuck" in w for w in data["warnings"])
    looser = json.loads(ok(pgq("health", "--json", "--stuck-factor", "1", "--stuck-floor", "1m")))
    assert looser["stuck_jobs"]["total"] == 4 and looser["stuck_jobs"]["factor"] == 1.0


def test_cli_health_human_lists_stuck_jobs_escaped(pgq: Pgq, queue: Queue) -> None:
    scene = make_scene(queue)
    human = ok(pgq("health"))
    assert "stuck jobs: 3 (running past 3x their queue's p99 run time (with fewer" in human
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in human.splitlines()]
    rows = {int(c[0]): c for c in cells if c and c[0].isdigit()}
    assert list(rows) == [scene.flagged, scene.fresh, scene.stale_history]
    assert rows[scene.flagged][1:6] == ["steady", "2m", "(30s, 20 jobs)", "30s", "1m30s"]
    assert rows[scene.fresh][1:6] == ["fresh", "1m10s", "no history", "—", "1m"]
    assert (
        f"job {scene.flagged}: running 2m, past 3x the longest of 20 done jobs (30s; too few "
        "for a p99), the floor: stuck past 1m30s" in " ".join(human.split())
    )
    assert "\x1b" not in human and "\\x1b[31m[bold]x" in human
    assert "warning:" in human
    none = ok(pgq("health", "--stuck-floor", "1h"))
    assert "stuck jobs: none" in none


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--stuck-factor", "0"], "stuck-factor"),
        (["--stuck-factor", "x"], "stuck-factor"),
        (["--stuck-floor", "-5s"], "stuck-floor"),
        (["--stuck-floor", "soon"], "stuck-floor"),
    ],
)
def test_cli_health_bad_stuck_options(
    pgq: Pgq, queue: Queue, args: list[str], fragment: str
) -> None:
    error_line(pgq("health", *args), 2, fragment)


# ---------------------------------------------------------------------------- exporter


def test_exporter_reports_stuck_jobs_per_queue(dsn: str, schema: str, queue: Queue) -> None:
    make_scene(queue)
    queue.enqueue("idle", {})

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True)

    collector = QueueCollector(connect, schema)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, _ = start_http_server(0, "127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        collector.close()
    stuck = {
        s.labels["queue"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "pgq_jobs_stuck"
    }
    assert stuck == {"steady": 1, "fresh": 1, "old": 1, "idle": 0}
    assert "# HELP pgq_jobs_stuck" in text and "3x" in text


def test_exporter_refuses_a_bad_factor() -> None:
    with pytest.raises(ValueError, match="stuck factor"):
        QueueCollector(lambda: None, "pgq", stuck_factor=0)  # type: ignore[arg-type,return-value]


# ---------------------------------------------------------------------------- dashboard


async def test_dashboard_health_view_lists_stuck_jobs_and_enter_opens_one(
    dsn: str, schema: str, queue: Queue
) -> None:
    from textual.widgets import Static
    from tui_support.pilot import wait_for

    from pgq_tui.screens.job_detail import JobDetailScreen
    from pgq_tui.widgets.keyed_table import plain
    from pgq_tui.widgets.stuck_table import StuckTable

    scene = make_scene(queue)
    app = dashboard(dsn, schema)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("6")
        dash = app.dashboard
        table = dash.query_one(StuckTable)
        await wait_for(pilot, lambda: table.row_count == 3, "the stuck jobs listed")
        order = [str(row.key.value) for row in table.ordered_rows]
        assert order == [str(scene.flagged), str(scene.fresh), str(scene.stale_history)]
        cells = [plain(c) for c in table.get_row(str(scene.flagged))]
        assert cells[:2] == [str(scene.flagged), "steady"]
        assert cells[2].startswith("2m") and cells[3] == "30s" and cells[4] == "1m30s"
        worker = plain(table.get_row(str(scene.fresh))[5])
        assert worker == "w-\\x1b[31m[bold]x"  # control characters shown, markup not parsed
        assert plain(table.get_row(str(scene.fresh))[3]) == "no history"
        bar = dash.query_one("#stuck-bar", Static)
        assert "3 stuck jobs" in str(bar.render())
        assert app.focused is table
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), "job detail")
        detail = app.screen
        assert isinstance(detail, JobDetailScreen) and detail.job_id == scene.fresh
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.dashboard, "back to the dashboard")
        assert dash.selected_job() == (scene.fresh, "running", "fresh")


async def test_dashboard_health_view_without_stuck_jobs_hides_the_list(
    dsn: str, schema: str, queue: Queue
) -> None:
    from textual.widgets import Static
    from tui_support.pilot import wait_for

    from pgq_tui.widgets.health_panel import HealthPanel
    from pgq_tui.widgets.stuck_table import StuckTable

    queue.enqueue("idle", {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("6")
        dash = app.dashboard
        await wait_for(pilot, lambda: dash.health is not None, "health read")
        assert not dash.query_one(StuckTable).display
        assert "no stuck jobs" in str(dash.query_one("#stuck-bar", Static).render())
        assert app.focused is dash.query_one(HealthPanel)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


@pytest.mark.parametrize("name", ["health_stuck", "metrics_stuck"])
def test_the_p99_is_computed_once_per_queue_not_per_running_job(queue: Queue, name: str) -> None:
    from pgq_core.queries import query

    make_scene(queue)
    for _ in range(4):  # steady: 6 running jobs past the floor in all, fresh and old: 2 and 1
        _running(queue, "steady", 100, 20, "w-more")
    op = ops.health_stuck(floor=timedelta(0)) if name == "health_stuck" else ops.metrics_stuck()
    [(plan,)] = queue.conn.execute(
        sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + query(name, queue.schema), op.params
    ).fetchall()
    done_reads = [
        n for n in _nodes(plan[0]["Plan"]) if n.get("Relation Name") == "jobs" and n["Alias"] == "j"
    ]
    assert len(done_reads) == 1
    assert done_reads[0]["Actual Loops"] == 3  # steady, fresh, old


async def test_dashboard_stuck_list_goes_when_the_job_is_no_longer_stuck(
    dsn: str, schema: str, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tui_support.pilot import wait_for

    from pgq_tui import app as app_module
    from pgq_tui.widgets.health_panel import HealthPanel
    from pgq_tui.widgets.stuck_table import StuckTable

    # the shown Health view is read again on its own timer: every 0.5 s here, not every 5 s
    monkeypatch.setattr(app_module, "SLOW_REFRESH", 0.5)
    stuck = _running(queue, "fresh", 90, 20, "w-alive")
    app = dashboard(dsn, schema)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("6")
        dash = app.dashboard
        table = dash.query_one(StuckTable)
        await wait_for(pilot, lambda: table.row_count == 1, "the stuck job listed")
        assert app.focused is table
        _set(queue, stuck, "lease_until = now() - interval '1 second'")  # now the reaper's
        await wait_for(pilot, lambda: not table.display, "the list hidden", timeout=30)
        panel = dash.query_one(HealthPanel)
        await wait_for(pilot, lambda: app.focused is panel, "the cursor back on the health panel")


def _history(queue: Queue, name: str, runs: list[float]) -> None:
    """Done jobs of `name` that ran `runs` seconds, finished over the last 10 minutes."""
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, payload, status, run_at, claimed_at, finished_at)"
            " SELECT %(queue)s, jsonb_build_object(), 'done', f - make_interval(secs => t.r),"
            "        f - make_interval(secs => t.r), f"
            "   FROM unnest(%(runs)s::float8[]) WITH ORDINALITY AS t(r, i),"
            "        LATERAL (SELECT now() - t.i * interval '500 milliseconds' AS f) x"
        ).format(sql.Identifier(queue.schema)),
        {"queue": name, "runs": runs},
    )


def test_a_rare_long_tail_does_not_make_its_jobs_stuck(pgq: Pgq, queue: Queue) -> None:
    """1,000 done jobs of 1 s and 8 of 10 minutes (0.8%: the p99 is 1 s): a job running 5
    minutes is not stuck (before: flagged, 300 s past 3 x 1 s and the floor); one running 11
    minutes is, and `pgq health` says why (past the longest done run). With fewer than
    STUCK_MIN_DONE done jobs, 3x the longest of them stands for the p99."""
    _history(queue, "tail", [1.0] * 1000 + [600.0] * 8)
    _history(queue, "few", [10.0] * 5)
    _running(queue, "tail", 300, 30, "w")  # 5 minutes: not stuck (the list below)
    eleven = _running(queue, "tail", 660, 30, "w")
    short_history = _running(queue, "few", 25, 30, "w")
    stuck = queue.health().stuck_jobs
    assert stuck is not None
    assert [j.id for j in stuck.jobs] == [eleven]
    [job] = stuck.jobs
    assert (job.p99_seconds, job.done_jobs, job.trusted) == (pytest.approx(1.0), 1008, True)
    assert job.longest_seconds == pytest.approx(600.0)
    assert job.threshold_seconds == pytest.approx(600.0)
    assert re.fullmatch(
        r"running 11m[0-9.]*s?, past 3x the p99 of 1,008 done jobs \(1s\), the longest done "
        r"run \(10m\), the floor: stuck past 10m",
        job.reason,
    ), job.reason
    # 5 done jobs of 10 s: 3x their longest (30 s) stands for the p99
    low_floor = queue.health(stuck_floor=timedelta(seconds=1)).stuck_jobs
    assert low_floor is not None and short_history not in [j.id for j in low_floor.jobs]
    looser = queue.health(stuck_factor=2.0, stuck_floor=timedelta(seconds=1)).stuck_jobs
    assert looser is not None
    [few] = [j for j in looser.jobs if j.id == short_history]
    assert (few.trusted, few.threshold_seconds) == (False, pytest.approx(20.0))
    assert "2x the longest of 5 done jobs (10s; too few for a p99)" in few.reason
    said = " ".join(ok(pgq("health")).split())
    assert re.search(rf"job {eleven}: running 11m[0-9.]*s?, past 3x the p99 of 1,008", said)
    assert re.search(rf"job {eleven} on 'tail', running 11m[0-9.]*s?, past", said)  # warning


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "0", "-1"])
def test_a_bad_stuck_factor_is_a_usage_error(pgq: Pgq, value: str) -> None:
    """`--stuck-factor nan` said 'unexpected ValueError' and exited 1."""
    result = pgq("health", "--stuck-factor", value)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--stuck-factor'" in error_line(result, 2)
    assert "unexpected" not in result.output
