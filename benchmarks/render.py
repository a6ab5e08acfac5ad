"""Markdown tables from `pgq bench --json` result files (used to write README.md).

python benchmarks/render.py benchmarks/results/pg18-embedded.json [more.json ...]

Files written before the baseline had its name (`seed`, `ratio_to_seed`, ...) read as well:
`read_result` gives both under today's names.
"""

from __future__ import annotations

import sys
from typing import Any

from pgq_bench import read_result


def _n(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{float(value):,.{digits}f}"


SIDES = ("baseline", "pgq_same_batch", "pgq")


def _label(name: str, claim: int) -> str:
    return f"baseline (LIMIT {claim})" if name == "baseline" else f"pgq (claim {claim})"


def side_by_side(d: dict[str, Any]) -> str:
    sides = {name: d[name] for name in SIDES}
    baseline = sides["baseline"]
    labels = [_label(k, v["claim_size"]) for k, v in sides.items()]
    rows = [
        ("enqueue (jobs/s; baseline: INSERT per job, pgq: enqueue_many)", "enqueue_rate", 0),
        ("**drain (jobs/s)**", "drain_rate", 0),
        ("pickup latency p50 (ms)", "pickup_p50_ms", 1),
        ("pickup latency p99 (ms)", "pickup_p99_ms", 1),
        ("drain: transactions / job", "drain_xacts_per_job", 3),
        ("drain: WAL bytes / job", "drain_wal_bytes_per_job", 0),
        ("drain: worker-process CPU µs / job", "drain_worker_cpu_us_per_job", 0),
        ("drain: whole-machine CPU µs / job", "drain_machine_cpu_us_per_job", 0),
        ("enqueue: transactions / job", "enqueue_xacts_per_job", 3),
        ("enqueue: WAL bytes / job", "enqueue_wal_bytes_per_job", 0),
    ]
    out = [
        "| | "
        + " | ".join(labels)
        + " | "
        + " | ".join(f"{x} / baseline" for x in labels[1:])
        + " |",
        "|---|" + "--:|" * (2 * len(labels) - 1),
    ]
    for label, key, digits in rows:
        values = [v.get(key) for v in sides.values()]
        a = baseline.get(key)
        ratios = [f"{v / a:.2f}x" if a and v is not None else "-" for v in values[1:]]
        cells = [_n(v, digits) for v in values]
        out.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    done = [f"{v['done']}/{v['jobs']}" for v in sides.values()]
    out.append("| jobs done | " + " | ".join(done) + " | | |")
    out.append(
        f"\n**ratio (pgq drain / baseline drain) = {d['ratio']:.2f}x** at claim "
        f"{sides['pgq']['claim_size']}; ratio_same_batch = {d['ratio_same_batch']:.2f}x at "
        f"claim {baseline['claim_size']}."
    )
    rounds = "; ".join(f"{k} " + " / ".join(_n(r) for r in v) for k, v in d["drain_rounds"].items())
    out.append(f"\nDrain rounds (jobs/s): {rounds}.")
    return "\n".join(out)


def runs(d: dict[str, Any]) -> str:
    out = [
        "| run | claim | jobs | jobs/s | transactions / job | WAL bytes / job "
        "| worker CPU µs / job |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for group in ("enqueue", "drain"):
        for name, ph in d[group].items():
            extra = ""
            if "listeners" in ph:
                extra = f" ({ph['listeners']} listeners, {ph['notifications_received']} received)"
            out.append(
                f"| {group}: {name}{extra} | {_n(ph.get('claim'))} | {ph['jobs']} | "
                f"{_n(ph['rate'])} | {_n(ph['xacts_per_job'], 3)} | "
                f"{_n(ph['wal_bytes_per_job'])} | {_n(ph.get('worker_cpu_us_per_job'))} |"
            )
    return "\n".join(out)


def scale(d: dict[str, Any]) -> str:
    c = d["counts"]
    out = [
        f"{c['done']:,} done (3 history rows each), {c['ready']:,} ready, "
        f"{c['running']:,} running, {c['dead']:,} dead; fill {d['fill_seconds']:.0f} s.\n",
        "| call | p50 ms | p95 ms | max ms | seq scan of jobs | buffers | plan uses |",
        "|---|--:|--:|--:|---|--:|---|",
    ]
    for name in ("stats", "leases"):
        t, e = d[name], d["explain"][name]
        out.append(
            f"| {name}() | {t['p50_ms']:.2f} | {t['p95_ms']:.2f} | {t['max_ms']:.2f} | "
            f"{'yes' if e['seq_scan_of_jobs'] else 'no'} | {e['shared_blocks']} | "
            f"{', '.join(e['index_scans'])}; seq scans: {', '.join(e['seq_scans']) or 'none'} |"
        )
    a, e = d["prune"]["stats_after"], d["prune"].get("explain_stats_after")
    plan = "| | |"
    if e:
        plan = (
            f"{'yes' if e['seq_scan_of_jobs'] else 'no'} | {e['shared_blocks']} | "
            f"{', '.join(e['index_scans'])}; seq scans: {', '.join(e['seq_scans']) or 'none'} |"
        )
    out.append(
        f"| stats() after prune + VACUUM | {a['p50_ms']:.2f} | {a['p95_ms']:.2f} | "
        f"{a['max_ms']:.2f} | {plan}"
    )
    out += [
        "",
        "| relation | MB own | MB with indexes + TOAST | per million done jobs (MB) "
        "| after prune + VACUUM (MB) |",
        "|---|--:|--:|--:|--:|",
    ]
    after = d["prune"]["sizes_after_vacuum"]
    for name, s in d["sizes"].items():
        out.append(
            f"| {name} | {s['bytes'] / 2**20:,.1f} | {s['total_bytes'] / 2**20:,.1f} | "
            f"{s['mb_per_million_done']:,.1f} | {after[name]['total_bytes'] / 2**20:,.1f} |"
        )
    p = d["prune"]
    out.append(
        f"\nprune (done older than {p['older_than_days']} days): {p['deleted']:,} jobs in "
        f"{p['seconds']:.1f} s ({_n(p['rows_per_second'])} jobs/s), then VACUUM ANALYZE "
        f"{p['vacuum_seconds']:.1f} s; {p['done_left']:,} done jobs left."
    )
    return "\n".join(out)


def main(paths: list[str]) -> None:
    for path in paths:
        d = read_result(path)
        server = d["server"]
        print(
            f"### {path}: PostgreSQL {server['version']}"
            f"{' (embedded)' if server['embedded'] else ''}\n"
        )
        m = d["machine"]
        print(
            f"Machine: {m['nproc']} CPUs, {m['memory_gb']} GB; load average (1/5/15 min) "
            f"{m.get('load_at_start')} at start, {m.get('load_at_end')} at end.\n"
        )
        if "counts" in d:
            print(scale(d))
        else:
            print(side_by_side(d))
            print()
            print(runs(d))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
