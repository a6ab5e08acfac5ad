"""Flask with pgq: a job enqueued in the request's own database transaction.

Run it from `examples/` as its README says: with no PGQ_DSN on the embedded PostgreSQL, with
PGQ_DSN (and PGQ_SCHEMA) on that database; the app migrates pgq's schema and creates its
`uploads` table as it starts.

    flask --app flask_thumbs.app run             # the web app
    pgq worker --tasks flask_thumbs.app:tasks    # a worker for its tasks

`POST /uploads` (JSON `{"image": "cat.jpg"}`) records the upload and enqueues its thumbnail in
one transaction: both are written, or neither. `GET /jobs/<id>` tells how the job is doing.
"""

from __future__ import annotations

from typing import Any

import psycopg
from flask import Flask, abort, current_app, request

from pgq_core import JobNotFound, Queue, Tasks, find_target, migrate

tasks = Tasks(queue="thumbnails")


@tasks.task(max_attempts=3, dont_retry_on=ValueError)
def make_thumbnail(upload_id: int, image: str, width: int = 320) -> dict[str, Any]:
    """A bad image name is not worth retrying (ValueError: dead at once)."""
    if not image.endswith((".jpg", ".png")):
        raise ValueError(f"not an image: {image}")
    return {"upload": upload_id, "thumbnail": f"thumbs/{width}/{image}"}


def create_app(dsn: str | None = None, schema: str | None = None) -> Flask:
    app = Flask(__name__)
    target = find_target(dsn, schema)  # PGQ_DSN / PGQ_SCHEMA, else the embedded server
    app.config["PGQ_DSN"] = target.dsn
    app.config["PGQ_SCHEMA"] = target.schema
    tasks.use_database(target.dsn, target.schema)
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        migrate(conn, target.schema)  # pgq's tables (a no-op once up to date)
        conn.execute(  # the app's own table
            "CREATE TABLE IF NOT EXISTS uploads (id bigserial PRIMARY KEY, image text NOT NULL)"
        )

    @app.post("/uploads")
    def upload() -> dict[str, Any]:
        image = str((request.get_json(silent=True) or {}).get("image", ""))
        with psycopg.connect(current_app.config["PGQ_DSN"]) as conn, conn.transaction():
            row = conn.execute(
                "INSERT INTO uploads (image) VALUES (%s) RETURNING id", [image]
            ).fetchone()
            assert row is not None
            # the job joins this transaction: it exists only if the upload row commits
            job_id = make_thumbnail.enqueue(row[0], image, conn=_queue(conn))
        return {"upload": row[0], "job": job_id}

    @app.get("/jobs/<int:job_id>")
    def job_status(job_id: int) -> dict[str, Any]:
        with Queue.connect(current_app.config["PGQ_DSN"], current_app.config["PGQ_SCHEMA"]) as q:
            try:
                job = q.job(job_id)
            except JobNotFound:
                abort(404)
        return {"id": job.id, "status": job.status, "result": job.result, "error": job.last_error}

    return app


def _queue(conn: psycopg.Connection[Any]) -> Queue:
    """A queue client on the request's connection (and so in its transaction)."""
    return Queue(conn, current_app.config["PGQ_SCHEMA"])
