"""FastAPI with pgq: one `AsyncQueue` opened in the app's lifespan, a job enqueued in a request.

Run it from `examples/` as its README says: with no PGQ_DSN on the embedded PostgreSQL, with
PGQ_DSN (and PGQ_SCHEMA) on that database; the app migrates pgq's schema as it starts.

    uvicorn fastapi_reports.main:app                # the web app
    pgq worker --tasks fastapi_reports.main:tasks   # a worker for its tasks

`POST /reports/{account}` enqueues a report (one at a time per account: the unique key) and
answers its job id; `GET /jobs/{id}` tells how the job is doing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException, Request

from pgq_core import AsyncQueue, JobNotFound, Tasks, find_target, migrate

tasks = Tasks(queue="reports")


@tasks.task(
    timeout=120,
    max_attempts=4,
    backoff_base=5,
    retry_on=(ConnectionError, TimeoutError),
    unique_key="report-{account}",
)
async def build_report(account: int, period: str = "month") -> dict[str, Any]:
    """The report; its return value is stored with the job (`result`)."""
    await asyncio.sleep(0)  # the real work: queries, rendering, an upload
    return {"account": account, "period": period, "rows": 3}


def prepare(dsn: str | None, schema: str | None) -> tuple[str, str]:
    """The queue's database (`dsn`, else PGQ_DSN, else the embedded server) and schema (`schema`,
    else PGQ_SCHEMA, else pgq), that schema migrated: nothing to set up by hand."""
    target = find_target(dsn, schema)
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        migrate(conn, target.schema)  # a no-op once up to date
    return target.dsn, target.schema


def create_app(dsn: str | None = None, schema: str | None = None) -> FastAPI:
    """The app; the database is found (and migrated) when it starts, not when it is imported."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """One queue client for the app's life (a pool suits many concurrent requests)."""
        found_dsn, found_schema = await asyncio.to_thread(prepare, dsn, schema)
        app.state.queue = await AsyncQueue.connect(found_dsn, found_schema)
        try:
            yield
        finally:
            await app.state.queue.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/reports/{account}")
    async def request_report(
        account: int, request: Request, period: str = "month"
    ) -> dict[str, int]:
        queue: AsyncQueue = request.app.state.queue
        job_id = await build_report.enqueue_async(account, period=period, conn=queue)
        return {"job": job_id}

    @app.get("/jobs/{job_id}")
    async def job_status(job_id: int, request: Request) -> dict[str, Any]:
        queue: AsyncQueue = request.app.state.queue
        try:
            job = await queue.job(job_id)
        except JobNotFound:
            raise HTTPException(status_code=404, detail=f"no job {job_id}") from None
        return {"id": job.id, "status": job.status, "attempts": job.attempts, "result": job.result}

    return app


app = create_app()
