"""Turn a soak's JSON lines (`pgq bench --soak ... --json-lines FILE`) into a PNG.

    .venv/bin/pip install matplotlib     # not a pgq dependency: install it for this script
    .venv/bin/python benchmarks/plot_soak.py benchmarks/results/soak-60m.jsonl \
        benchmarks/results/soak-60m.png

Three panels over elapsed minutes: table and index sizes of `jobs` and `job_events` (MB), dead
tuples, and claim latency (enqueue to claim, p50 and p99, ms), with the verdict in the title.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    header: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    samples = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        if "soak" in data:
            header = data["soak"]
        elif "summary" in data:
            summary = data["summary"]
        else:
            samples.append(data)
    return header, samples, summary


def plot(src: Path, dst: Path) -> None:
    header, samples, summary = load(src)
    minutes = [s["elapsed_s"] / 60 for s in samples]
    fig, (sizes, dead, latency) = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    for table in ("jobs", "job_events"):
        for part, style in (("table_bytes", "-"), ("index_bytes", "--")):
            values = [s["tables"].get(table, {}).get(part, 0) / 2**20 for s in samples]
            sizes.plot(minutes, values, style, label=f"{table} {part.split('_')[0]}")
        dead.plot(
            minutes, [s["tables"].get(table, {}).get("dead_tuples", 0) for s in samples],
            label=table,
        )
    sizes.set_ylabel("MB")
    sizes.legend(loc="upper left", fontsize="small")
    dead.set_ylabel("dead tuples")
    dead.legend(loc="upper left", fontsize="small")
    for key, label in (("claim_p50_ms", "claim p50"), ("claim_p99_ms", "claim p99")):
        latency.plot(minutes, [s.get(key) for s in samples], label=label)
    latency.set_ylabel("enqueue to claim, ms")
    latency.set_yscale("log")
    latency.set_xlabel("minutes")
    latency.legend(loc="upper left", fontsize="small")
    verdict = {True: "passed", False: "failed", None: "not judged"}.get(summary.get("passed"))
    fig.suptitle(
        f"pgq soak: {header.get('rate', '?')} jobs/s, {header.get('workers', '?')} workers, "
        f"PostgreSQL {header.get('server', '?')}; flat after warm-up: {verdict}"
    )
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_soak.py RESULTS.jsonl OUT.png")
    plot(Path(sys.argv[1]), Path(sys.argv[2]))
