"""bench's result as a terminal table: one row per level of summary.json."""

from __future__ import annotations

from typing import Any

TABLE_HEADERS = [
    "conc",
    "rate",
    "ok",
    "failed",
    "out tok/s",
    "req/s",
    "TTFT ms",
    "TTFT p99",
    "TPOT ms",
    "ITL p99",
    "E2E ms",
    "achieved",
    "in SLO",
]


def table_rows(levels: list[dict[str, Any]]) -> list[list[object]]:
    """Rows for launcher.output.table; a level that completed nothing shows '-' for its latencies."""
    rows: list[list[object]] = []
    for lv in levels:
        goodput = lv.get("goodput") or {}
        share = goodput.get("share")
        rows.append(
            [
                lv["concurrency"],
                lv.get("request_rate"),
                lv["completed"],
                lv["failed"],
                lv["output_throughput_tok_s"],
                lv["request_throughput_req_s"],
                lv["ttft_ms"]["mean"],
                lv["ttft_ms"]["p99"],
                lv["tpot_ms"]["mean"],
                lv["itl_ms"]["p99"],
                lv["e2el_ms"]["mean"],
                lv["achieved_concurrency"],
                None if share is None else f"{share:.0%}",
            ]
        )
    return rows


def headers_for(levels: list[dict[str, Any]]) -> tuple[list[str], list[list[object]]]:
    """The table without the columns no level uses (rate without --request-rate, in SLO without --slo), and with
    the prompt length when levels differ in it (a context-length sweep)."""
    rows = table_rows(levels)
    keep = [
        i for i, h in enumerate(TABLE_HEADERS) if h not in ("rate", "in SLO") or any(row[i] is not None for row in rows)
    ]
    headers = [TABLE_HEADERS[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    if len({lv.get("input_len") for lv in levels}) > 1:
        headers.insert(1, "in")
        for row, lv in zip(rows, levels, strict=True):
            row.insert(1, lv.get("input_len"))
    return headers, rows


def slo_line(verdict: dict[str, Any], workload: dict[str, Any]) -> str:
    slo = ", ".join(f"{k} <= {v:g} ms" for k, v in (workload.get("slo_ms") or {}).items())
    share = workload.get("slo_share") or 0
    best = verdict.get("highest_meeting") or "no level"
    tail = f"; first missed at {verdict['first_failing']}" if verdict.get("first_failing") else ""
    return f"SLO ({slo}, {share:.0%} of requests): met up to {best}{tail}"


def roofline_line(roofline: dict[str, Any] | None) -> str | None:
    """One line on the bandwidth roofline that summary.json carries when bench started the server."""
    if not roofline:
        return None
    if not roofline.get("applies"):
        return f"roofline: does not apply ({roofline.get('reason')})"
    shares = ", ".join(
        f"c={lv['concurrency']} {lv['percent_of_limit']:.0f}%"
        for lv in roofline.get("levels", [])
        if lv.get("percent_of_limit") is not None
    )
    return (
        f"roofline: at most {roofline['ceiling_per_user_tok_s']:.0f} tok/s per user at c=1 by memory bandwidth; "
        f"measured share of the limit: {shares or '-'} (nemolaunch roofline SUMMARY --model DIR for the table)"
    )
