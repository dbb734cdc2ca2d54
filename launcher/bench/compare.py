"""`nemolaunch compare`: bench runs side by side along their sweep's axis (concurrency, request rate or prompt
length), with ratios to the first run, a noise verdict when runs have repeats, report.md and two PNG plots. Levels
are matched by everything that makes them (rate, cap, concurrency, prompt length), never by concurrency alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher import noise
from launcher.bench.stats import level_label
from launcher.documents import read_bench
from launcher.errors import BadInput
from launcher.output import table, write_text

# what must match for two runs to measure the same thing (prompts_sha too, when both ran the same levels: the pool
# of prompts grows with the levels, seeded, so runs over other levels draw the same prompts at the shared ones)
WORKLOAD_KEYS = ("model", "endpoint", "input_len", "output_len", "seed", "dataset", "shared_prefix_len")
# the sweep's axis: the level's field on the x axis, its name, and whether the axis doubles (log2 ticks)
AXES = {
    "concurrency": ("concurrency", "concurrent requests", True),
    "request-rate": ("request_rate", "requests/s offered", False),
    "context-length": ("input_len", "prompt tokens", True),
}


def load_run(folder: Path) -> dict[str, Any]:
    """A bench run's summary.json, validated (launcher.documents.read_bench), with the folder it came from."""
    return {**read_bench(folder), "_folder": str(folder)}


def axis_of(run: dict[str, Any]) -> str:
    """The run's sweep axis (older summaries without `axis`: from the load mode and the context lengths)."""
    w = run["workload"]
    if w.get("axis") in AXES:
        return str(w["axis"])
    if (w.get("load") or {}).get("mode") == "request-rate":
        return "request-rate"
    return "context-length" if w.get("context_lens") else "concurrency"


def level_key(level: dict[str, Any]) -> tuple[Any, ...]:
    return (level.get("request_rate"), level.get("concurrency"), level.get("input_len"))


def check_comparable(runs: list[dict[str, Any]], force: bool) -> list[str]:
    """Differences in workload between the runs; an error unless forced (then they are returned as warnings)."""
    base = runs[0]
    differences = [
        f"{key}: {base['workload'].get(key)!r} in {_name(base)} vs {run['workload'].get(key)!r} in {_name(run)}"
        for run in runs[1:]
        for key in WORKLOAD_KEYS
        if run["workload"].get(key) != base["workload"].get(key)
    ]
    differences += [
        f"prompts: another prompt set in {_name(run)} than in {_name(base)} (prompts_sha)"
        for run in runs[1:]
        if {level_key(lv) for lv in run["levels"]} == {level_key(lv) for lv in base["levels"]}
        and run["workload"].get("prompts_sha") != base["workload"].get("prompts_sha")
    ]
    differences += [
        f"axis: {axis_of(base)} in {_name(base)} vs {axis_of(run)} in {_name(run)}"
        for run in runs[1:]
        if axis_of(run) != axis_of(base)
    ]
    if differences and not force:
        raise BadInput(
            "the runs measured different workloads (" + "; ".join(differences) + ")",
            "compare runs of the same workload, or pass --force to compare anyway",
        )
    return differences


def _name(run: dict[str, Any]) -> str:
    """A run as messages name it: its label, and its folder (two runs may share a label such as `run`)."""
    return f"{run['label']} ({run['_folder']})"


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
    """One row per level every run measured, in the first run's order."""
    levels = [{level_key(lv): lv for lv in run["levels"]} for run in runs]
    shared = [key for key in levels[0] if all(key in lv for lv in levels[1:])]
    with_input = axis_of(runs[0]) == "context-length"
    headers = ["level"]
    for i, run in enumerate(runs):
        headers += [f"{run['label']} tok/s", "TTFT ms", "TPOT ms"] + (["vs first", "noise"] if i else [])
    rows = []
    for key in shared:
        first = levels[0][key]
        row: list[object] = [level_label(first, with_input=with_input)]
        for i, lv in enumerate(level[key] for level in levels):
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
    """Throughput along the sweep's axis, and latency against throughput (each point named by its level)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    field, name, doubling = AXES[axis_of(runs[0])]
    with_input = field == "input_len"
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        points = [(lv[field], lv["output_throughput_tok_s"]) for lv in run["levels"] if lv.get(field) is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=run["label"])
    xs = sorted({lv[field] for run in runs for lv in run["levels"] if lv.get(field) is not None})
    if doubling and xs:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    paths.append(_finish(plt, fig, ax, (name, "output tokens/s", f"Throughput vs {name}"), out / "throughput.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        ax.plot(
            [lv["output_throughput_tok_s"] for lv in run["levels"]],
            [lv["tpot_ms"]["mean"] for lv in run["levels"]],
            marker="o",
            label=run["label"],
        )
        for lv in run["levels"]:
            where = (lv["output_throughput_tok_s"], lv["tpot_ms"]["mean"])
            ax.annotate(level_label(lv, with_input=with_input), where, fontsize=7, alpha=0.7)
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


def workload_line(run: dict[str, Any]) -> str:
    """The workload as it was sent: the prompts' real lengths (a dataset's, as the server counted them; a context
    sweep's range), and the load's shape."""
    w = run["workload"]
    counted = w.get("mean_prompt_tokens")
    if w.get("dataset"):
        prompts = f"dataset `{w['dataset']}`" + (f" (prompts of {counted:g} tokens on average)" if counted else "")
    elif w.get("context_lens"):
        prompts = f"prompts of {min(w['context_lens'])}-{max(w['context_lens'])} tokens"
    else:
        prompts = f"{w['input_len']}-token prompts"
    load = w.get("load") or {}
    shape = f", arrivals {load.get('arrival')}" if load.get("mode") == "request-rate" else ""
    return (
        f"Workload: model `{w['model']}`, {w['endpoint']}, {prompts}, {w['output_len']} output tokens, "
        f"seed {w['seed']}, {w['repeats']} repeat(s) per level; levels by {axis_of(run)}{shape}."
    )


def write_report(runs: list[dict[str, Any]], out: Path, differences: list[str]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    headers, rows = comparison_rows(runs)
    plots = plot(runs, out)
    lines = [
        "# nemolaunch bench report",
        "",
        workload_line(runs[0]),
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
    write_text(path, "\n".join(lines))
    return path


def compare(folders: list[Path], out: Path, force: bool) -> tuple[str, Path]:
    runs = [load_run(f) for f in folders]
    differences = check_comparable(runs, force)
    headers, rows = comparison_rows(runs)
    return table(headers, rows), write_report(runs, out, differences)
