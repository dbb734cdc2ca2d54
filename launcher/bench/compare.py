"""`nemolaunch compare`: bench runs side by side across the concurrency curve, with ratios to the first run,
a noise verdict when runs have repeats, report.md and two PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher import noise
from launcher.documents import read_json, validate_bench
from launcher.errors import BadInput
from launcher.output import atomic_write_text, table

WORKLOAD_KEYS = ("model", "endpoint", "input_len", "output_len", "prompts_sha")


def load_run(folder: Path) -> dict[str, Any]:
    """A bench run's summary.json, validated (launcher.documents.BenchSummary): a corrupt one is one line naming
    the file and the field."""
    path = folder / "summary.json"
    if not path.is_file():
        raise BadInput(f"{folder} holds no bench run (no summary.json)", "give folders written by nemolaunch bench")
    doc = read_json(path, "give folders written by nemolaunch bench")
    if doc.get("schema") != "nemolaunch.bench/1":
        raise BadInput(
            f"{path} is not a nemolaunch bench summary (schema {doc.get('schema')!r})",
            "give folders written by nemolaunch bench",
        )
    run: dict[str, Any] = dict(validate_bench(doc, path))
    run["_folder"] = str(folder)
    return run


def check_comparable(runs: list[dict[str, Any]], force: bool) -> list[str]:
    """Differences in workload between the runs; an error unless forced (then they are returned as warnings)."""
    base = runs[0]["workload"]
    differences = [
        f"{key}: {base.get(key)!r} in {runs[0]['label']} vs {run['workload'].get(key)!r} in {run['label']}"
        for run in runs[1:]
        for key in WORKLOAD_KEYS
        if run["workload"].get(key) != base.get(key)
    ]
    if differences and not force:
        raise BadInput(
            "the runs measured different workloads (" + "; ".join(differences) + ")",
            "compare runs of the same workload, or pass --force to compare anyway",
        )
    return differences


def noise_verdict(a: dict[str, Any], b: dict[str, Any], repeats: tuple[int, int]) -> str:
    """With repeats on both sides (how many each): the ratio's interval against the threshold, by the rule ab uses
    (launcher.noise)."""
    sa, sb = a.get("output_throughput_stdev"), b.get("output_throughput_stdev")
    if sa is None or sb is None:
        return "single runs: noise unknown"
    ma, mb = a["output_throughput_tok_s"], b["output_throughput_tok_s"]
    got = noise.unpaired_interval((ma, sa, repeats[0]), (mb, sb, repeats[1]))
    if got is None:
        return "single runs: noise unknown"
    where = noise.position(*got, noise.THRESHOLD)
    if where in ("above", "below"):
        return "beyond noise"
    return "within noise" if where == "within" else "inconclusive"


def _repeats(run: dict[str, Any], level: dict[str, Any]) -> int:
    return int(level.get("repeats") or run["workload"].get("repeats") or 1)


def comparison_rows(runs: list[dict[str, Any]]) -> tuple[list[str], list[list[object]]]:
    levels = [{lv["concurrency"]: lv for lv in run["levels"]} for run in runs]
    shared = sorted(set.intersection(*(set(lv) for lv in levels)))
    headers = ["conc"]
    for i, run in enumerate(runs):
        headers += [f"{run['label']} tok/s", "TTFT ms", "TPOT ms"] + (["vs first", "noise"] if i else [])
    rows = []
    for c in shared:
        first = levels[0][c]
        row: list[object] = [c]
        for i, lv in enumerate(level[c] for level in levels):
            row += [lv["output_throughput_tok_s"], lv["ttft_ms"]["mean"], lv["tpot_ms"]["mean"]]
            if i:
                ratio = (
                    lv["output_throughput_tok_s"] / first["output_throughput_tok_s"]
                    if first["output_throughput_tok_s"]
                    else None
                )
                row += [
                    f"{ratio:.3f} ({(ratio - 1) * 100:+.1f}%)" if ratio else None,
                    noise_verdict(first, lv, (_repeats(runs[0], first), _repeats(runs[i], lv))),
                ]
        rows.append(row)
    return headers, rows


def plot(runs: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        xs = [lv["concurrency"] for lv in run["levels"]]
        ax.plot(xs, [lv["output_throughput_tok_s"] for lv in run["levels"]], marker="o", label=run["label"])
    ax.set_xscale("log", base=2)
    levels = sorted({lv["concurrency"] for run in runs for lv in run["levels"]})
    ax.set_xticks(levels, [str(c) for c in levels])
    paths.append(
        _finish(
            plt,
            fig,
            ax,
            ("concurrent requests", "output tokens/s", "Throughput vs concurrency"),
            out / "throughput.png",
        )
    )

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        ax.plot(
            [lv["output_throughput_tok_s"] for lv in run["levels"]],
            [lv["tpot_ms"]["mean"] for lv in run["levels"]],
            marker="o",
            label=run["label"],
        )
        for lv in run["levels"]:
            ax.annotate(
                f"c={lv['concurrency']}", (lv["output_throughput_tok_s"], lv["tpot_ms"]["mean"]), fontsize=7, alpha=0.7
            )
    paths.append(
        _finish(plt, fig, ax, ("output tokens/s", "mean TPOT (ms)", "Latency vs throughput"), out / "latency.png")
    )
    return paths


def _finish(plt: Any, fig: Any, ax: Any, labels: tuple[str, str, str], path: Path) -> Path:
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(labels[2])
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def write_report(runs: list[dict[str, Any]], out: Path, differences: list[str]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    headers, rows = comparison_rows(runs)
    plots = plot(runs, out)
    w = runs[0]["workload"]
    lines = [
        "# nemolaunch bench report",
        "",
        f"Workload: model `{w['model']}`, {w['endpoint']}, {w['input_len']} prompt / {w['output_len']} output tokens, "
        f"seed {w['seed']}, {w['repeats']} repeat(s) per level.",
        "",
        "| run | folder | server | date | status |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        p = run["provenance"]
        served = p.get("launched_by_nemolaunch") or {}
        server = f"vLLM {p['server'].get('version')}" + (f", profile {served.get('profile')}" if served else "")
        lines.append(f"| {run['label']} | {run['_folder']} | {server} | {p['date']} | {run['status']} |")
    lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |" for row in rows]
    warnings = differences + [f"{run['label']}: {w}" for run in runs for w in run.get("warnings", [])]
    if warnings:
        lines += ["", "Warnings:", *[f"- {w}" for w in warnings]]
    lines += ["", *[f"![{p.stem}]({p.name})" for p in plots], ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def compare(folders: list[Path], out: Path, force: bool) -> tuple[str, Path]:
    runs = [load_run(f) for f in folders]
    differences = check_comparable(runs, force)
    headers, rows = comparison_rows(runs)
    return table(headers, rows), write_report(runs, out, differences)
