"""`nemolaunch bench`: the throughput sweep against an OpenAI-compatible server, measured the way the README
defines it, written level by level so an interrupted sweep keeps what it measured.

One module per job: stream (SSE framing, shared with serve's smoke completion), client (one request, timed),
workload (prompts, datasets, arrival times), stats (a level's numbers), results (the files), provenance (who
measured what), config (what was asked, validated), sweep (the levels in order).
"""

from launcher.bench.client import RequestRecord, ServerInfo, Target
from launcher.bench.config import BenchConfig, LevelSpec, parse_slo, validate
from launcher.bench.stats import LevelResult, Stats, summarize
from launcher.bench.sweep import SweepOutcome, measure_level, run, run_served

__all__ = [
    "BenchConfig",
    "LevelResult",
    "LevelSpec",
    "RequestRecord",
    "ServerInfo",
    "Stats",
    "SweepOutcome",
    "Target",
    "measure_level",
    "parse_slo",
    "run",
    "run_served",
    "summarize",
    "validate",
]
