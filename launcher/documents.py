"""The JSON documents that pass between stages, as typed shapes shared by their writers and readers, and
validated on read: a reader gets either a document of this shape or one line naming the file and the field.

    doctor --json  -> DoctorDocument  (read by profile write)
    probe --json   -> ProbeDocument   (read by profile write and probe --recheck)
    bench          -> BenchSummary    (summary.json, read by compare)

Each shape lists only what a reader relies on; writers may add keys (readers ignore them), never drop or retype
one without a new schema version. tests/test_documents.py pins each against real output.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from launcher.errors import BadInput


class DoctorGpu(TypedDict):
    name: str
    memory_total_mib: int | None


class DoctorDocument(TypedDict):
    schema: str  # nemolaunch.doctor/1
    host: dict[str, Any]
    python: dict[str, str]
    checks: list[dict[str, Any]]
    summary: dict[str, Any]
    facts: dict[str, Any]  # facts.nvml.gpus: list[DoctorGpu] when NVML answered


class ProbeShape(TypedDict):
    m: int
    n: int
    k: int
    us: float | None  # median time on the GPU, microseconds; None when not timed
    relative: float | None  # us / the fastest kernel's us at this shape (1.0 = fastest)


class ProbeKernel(TypedDict):
    chain: str
    kernel: str
    position: int | None  # in vLLM's own order; None when vLLM does not list it
    declared: bool | None  # vLLM's is_supported verdict here (None: unknown)
    status: str  # ok, failed, wrong, timeout, crashed, unsupported, not-probed, ...
    shapes: list[ProbeShape]


class ProbeDocument(TypedDict):
    schema: str  # nemolaunch.probe/1
    gpu: dict[str, Any] | None
    vllm_version: str | None
    recommended: dict[str, str | None]
    kernels: list[ProbeKernel]


class Stat(TypedDict):
    mean: float | None


BENCH_SCHEMA = "nemolaunch.bench/1"  # summary.json's schema: written by bench/results.py, read here


class BenchLevel(TypedDict):
    concurrency: int | None  # None: a request-rate level without a cap on requests in flight
    request_rate: NotRequired[float | None]
    input_len: NotRequired[int | None]  # None: a dataset's level (its prompts have their own lengths)
    output_throughput_tok_s: float
    output_throughput_stdev: NotRequired[float | None]
    ttft_ms: Stat
    tpot_ms: Stat


class BenchSummary(TypedDict):
    schema: str  # BENCH_SCHEMA
    status: str
    label: str
    workload: dict[str, Any]
    provenance: dict[str, Any]
    warnings: list[str]
    levels: list[BenchLevel]


class Reader:
    """Walks a parsed document; the first field that does not fit becomes one line naming file and field."""

    def __init__(self, path: Path, fix: str) -> None:
        self.path, self.fix = path, fix

    def fail(self, field: str, expected: str, value: object) -> BadInput:
        shown = json.dumps(value)[:60] if not isinstance(value, float) else repr(value)
        return BadInput(f"{self.path}: {field} must be {expected}, not {shown}", self.fix)

    def get(self, doc: dict[str, Any], key: str, where: str) -> Any:
        if key not in doc:
            raise BadInput(f"{self.path}: {where}{key} is missing", self.fix)
        return doc[key]

    def table(self, doc: Any, field: str) -> dict[str, Any]:
        if not isinstance(doc, dict):
            raise self.fail(field, "an object", doc)
        return doc

    def array(self, doc: Any, field: str) -> list[Any]:
        if not isinstance(doc, list):
            raise self.fail(field, "a list", doc)
        return doc

    def text(self, value: Any, field: str, optional: bool = False) -> None:
        if not (isinstance(value, str) or (optional and value is None)):
            raise self.fail(field, "a string" + (" or null" if optional else ""), value)

    def integer(self, value: Any, field: str, least: int | None = None, optional: bool = False) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
            raise self.fail(field, "an integer" + (f" >= {least}" if least is not None else ""), value)

    def number(self, value: Any, field: str, positive: bool = False, optional: bool = True) -> None:
        if optional and value is None:
            return
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (positive and value == 0):
            raise self.fail(field, f"a finite number {'> 0' if positive else '>= 0'}", value)


def read_json(path: Path, fix: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path} does not exist", fix) from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read {path}: {e}", fix) from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})", fix) from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: not a nemolaunch report (a JSON {type(doc).__name__}, not an object)", fix)
    return doc


def validate_probe(doc: dict[str, Any], path: Path) -> ProbeDocument:
    r = Reader(path, "give the --json output of nemolaunch probe, unedited")
    if r.get(doc, "gpu", "") is not None:
        r.table(doc["gpu"], "gpu")
    r.text(r.get(doc, "vllm_version", ""), "vllm_version", optional=True)
    for chain, pick in r.table(r.get(doc, "recommended", ""), "recommended").items():
        r.text(pick, f"recommended.{chain}", optional=True)
    for i, kernel in enumerate(r.array(r.get(doc, "kernels", ""), "kernels")):
        at = f"kernels[{i}]"
        r.table(kernel, at)
        for key in ("chain", "kernel", "status"):
            r.text(r.get(kernel, key, f"{at}."), f"{at}.{key}")
        r.integer(r.get(kernel, "position", f"{at}."), f"{at}.position", least=0, optional=True)
        if kernel.get("declared") not in (True, False, None):
            raise r.fail(f"{at}.declared", "true, false or null", kernel["declared"])
        for j, shape in enumerate(r.array(r.get(kernel, "shapes", f"{at}."), f"{at}.shapes")):
            sat = f"{at}.shapes[{j}]"
            r.table(shape, sat)
            for key in ("m", "n", "k"):
                r.integer(r.get(shape, key, f"{sat}."), f"{sat}.{key}", least=1)
            r.number(shape.get("us"), f"{sat}.us")
            r.number(shape.get("relative"), f"{sat}.relative", positive=True)
    return doc  # type: ignore[return-value]


def validate_doctor(doc: dict[str, Any], path: Path) -> DoctorDocument:
    r = Reader(path, "give the --json output of nemolaunch doctor, unedited")
    facts = r.table(r.get(doc, "facts", ""), "facts")
    nvml = r.table(facts.get("nvml") or {}, "facts.nvml")
    for i, gpu in enumerate(r.array(nvml.get("gpus") or [], "facts.nvml.gpus")):
        at = f"facts.nvml.gpus[{i}]"
        r.table(gpu, at)
        r.text(r.get(gpu, "name", f"{at}."), f"{at}.name")
        r.integer(r.get(gpu, "memory_total_mib", f"{at}."), f"{at}.memory_total_mib", least=1, optional=True)
    return doc  # type: ignore[return-value]


def validate_bench(doc: dict[str, Any], path: Path) -> BenchSummary:
    r = Reader(path, "give a folder written by nemolaunch bench (its summary.json unedited)")
    r.text(r.get(doc, "label", ""), "label")
    r.text(r.get(doc, "status", ""), "status")
    workload = r.table(r.get(doc, "workload", ""), "workload")
    provenance = r.table(r.get(doc, "provenance", ""), "provenance")
    r.table(r.get(provenance, "server", "provenance."), "provenance.server")
    for i, warning in enumerate(r.array(doc.get("warnings", []), "warnings")):
        r.text(warning, f"warnings[{i}]")
    r.integer(r.get(workload, "input_len", "workload."), "workload.input_len", least=1, optional=True)
    r.integer(r.get(workload, "output_len", "workload."), "workload.output_len", least=1)
    for i, level in enumerate(r.array(r.get(doc, "levels", ""), "levels")):
        at = f"levels[{i}]"
        r.table(level, at)
        r.integer(r.get(level, "concurrency", f"{at}."), f"{at}.concurrency", least=1, optional=True)
        r.number(level.get("request_rate"), f"{at}.request_rate", positive=True)
        r.integer(level.get("input_len"), f"{at}.input_len", least=1, optional=True)
        if level["concurrency"] is None and level.get("request_rate") is None:
            raise r.fail(f"{at}.concurrency", "an integer >= 1 where request_rate is null", None)
        r.number(r.get(level, "output_throughput_tok_s", f"{at}."), f"{at}.output_throughput_tok_s", optional=False)
        r.number(level.get("output_throughput_stdev"), f"{at}.output_throughput_stdev")
        for key in ("ttft_ms", "tpot_ms"):
            stat = r.table(r.get(level, key, f"{at}."), f"{at}.{key}")
            r.number(stat.get("mean"), f"{at}.{key}.mean")
    return doc  # type: ignore[return-value]


def read_bench(folder: Path) -> BenchSummary:
    """A bench run's summary.json, validated: a missing, corrupt or foreign one is one line naming file and field."""
    fix = "give folders written by nemolaunch bench"
    path = folder / "summary.json"
    if not path.is_file():
        raise BadInput(f"{folder} holds no bench run (no summary.json)", fix)
    doc = read_json(path, fix)
    if doc.get("schema") != BENCH_SCHEMA:
        raise BadInput(f"{path} is not a nemolaunch bench summary (schema {doc.get('schema')!r})", fix)
    return validate_bench(doc, path)
