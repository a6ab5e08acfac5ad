"""FastAPI with pgq: one `AsyncQueue` opened in the app's lifespan, a job enqueued in a request.

Run it (PGQ_DSN and PGQ_SCHEMA name the queue's database and schema, migrated with
`pgq migrate`):

    uvicorn fastapi_reports.main:app          # the web app
    pgq worker --tasks fastapi_reports.main:tasks   # a worker for its tasks

`POST /reports/{account}` enqueues a report (one at a time per account: the unique key) and
answers its job id; `GET /jobs/{id}` tells how the job is doing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from pgq_core import AsyncQueue, JobNotFound, Tasks

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


def create_app(dsn: str | None = None, schema: str | None = None) -> FastAPI:
    """The app; `dsn` and `schema` default to PGQ_DSN and PGQ_SCHEMA, read at startup."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """One queue client for the app's life (a pool suits many concurrent requests)."""
        app.state.queue = await AsyncQueue.connect(
            dsn or os.environ["PGQ_DSN"], schema or os.environ.get("PGQ_SCHEMA", "pgq")
        )
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
