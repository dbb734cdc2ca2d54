"""What a bench run is asked to do: the workload, the load shape and the levels, validated before anything is
sent (absurd values are refused with the limit, not discovered after building millions of prompts)."""

from __future__ import annotations

import math
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from launcher import defaults
from launcher.errors import BadInput

MAX_CONCURRENCY = 16384  # far above any one server's max_num_seqs; beyond it the client itself is the test
MAX_PROMPTS = 1_000_000
MAX_CLIENT_PROCESSES = 256
MAX_LEVEL_S = 86_400.0  # a rate level whose arrivals would take longer than a day is a typo, not a benchmark
BURSTINESS = (0.01, 1000.0)  # gamma shapes outside these give offsets of 0 or inf (1e-300 gave NaN)
STREAMS_PER_PROCESS = 128  # one Python process keeps up with about this many fast streams (README)
SLO_METRICS = ("ttft", "tpot", "e2el")  # vLLM bench serve's --goodput names, in milliseconds
ARRIVALS = ("poisson", "constant", "gamma")


@dataclass(frozen=True)
class BenchConfig:
    url: str
    concurrency: tuple[int, ...] = defaults.SWEEP_LEVELS
    input_len: int = defaults.INPUT_LEN
    output_len: int = defaults.OUTPUT_LEN
    num_prompts: int | None = None  # per level; default 4 x concurrency (rate mode: 4 x rate x 10 s), at least 8
    duration_s: float | None = None
    warmup: int = 2
    repeats: int = 1
    label: str = "run"
    model: str | None = None
    endpoint: str = "completions"  # or "chat"
    seed: int = 0
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    # load shape: with request_rates, one level per rate (requests/s), arrivals as vLLM bench serve draws them;
    # concurrency then holds at most one value, the cap on requests in flight (none: unbounded)
    request_rates: tuple[float, ...] = ()
    arrival: str = "poisson"
    burstiness: float = 1.0  # gamma's shape (vLLM's --burstiness); poisson is 1, constant is infinite
    # workload
    slo_ms: tuple[tuple[str, float], ...] = ()  # e.g. (("ttft", 200.0), ("tpot", 50.0))
    slo_share: float = 0.9  # a level meets the SLOs when this share of its requests meets every one
    dataset: Path | None = None  # JSONL: {"prompt": str, "output_tokens": int} per line
    shared_prefix_len: int = 0  # every prompt starts with the same prefix of this many tokens
    context_lens: tuple[int, ...] = ()  # a context-length sweep: one level per prompt length, at one concurrency
    api_key: str | None = field(default=None, repr=False)  # sent as a bearer token, never written
    # the client: fixed-concurrency levels spread their streams over this many processes (procs.py); None: one
    # process per STREAMS_PER_PROCESS streams, at most one per 4 CPUs (the rest are the server's, when it is local)
    client_processes: int | None = None

    @classmethod
    def from_options(
        cls,
        *,
        url: str | None,
        profile: str | None,
        model: str | None,
        concurrency: tuple[int, ...] | None,
        request_rates: tuple[float, ...] | None,
        arrival: str,
        burstiness: float,
        slo: str | None,
        slo_share: float,
        dataset: Path | None,
        shared_prefix_len: int,
        context_lens: tuple[int, ...] | None,
        input_len: int,
        output_len: int,
        num_prompts: int | None,
        duration_s: float | None,
        warmup: int,
        repeats: int,
        label: str | None,
        endpoint: str,
        seed: int,
        request_timeout_s: float,
        client_processes: int | None,
        api_key_file: Path | None,
    ) -> BenchConfig:
        """bench's options as one validated config, the rules between them applied once. With --profile the url
        and the served model's name are not known yet: they are "" and None until the server is up (`replace`)."""
        from checks.secrets import api_key

        if bool(url) == bool(profile):
            raise BadInput("give either --url (a running server) or --profile with --model (nemolaunch starts one)")
        if profile and not model:
            raise BadInput("--profile needs --model (the model folder to serve)")
        if num_prompts and duration_s:
            raise BadInput("give --num-prompts or --duration, not both")
        try:
            key = api_key(api_key_file)
        except (OSError, ValueError) as e:
            raise BadInput(f"cannot read --api-key-file {api_key_file}: {e}") from None
        # --concurrency is the levels of a sweep, or the one cap in flight of a rate or context-length sweep
        if request_rates or context_lens:
            levels = concurrency or ((1,) if context_lens else ())
        else:
            levels = concurrency or defaults.SWEEP_LEVELS
        cfg = cls(
            url=url.rstrip("/") if url else "",
            model=model if url else None,
            concurrency=levels,
            request_rates=request_rates or (),
            arrival=arrival,
            burstiness=burstiness,
            slo_ms=parse_slo(slo) if slo else (),
            slo_share=slo_share,
            dataset=dataset,
            shared_prefix_len=shared_prefix_len,
            context_lens=context_lens or (),
            input_len=input_len,
            output_len=output_len,
            num_prompts=num_prompts,
            duration_s=duration_s,
            warmup=warmup,
            repeats=repeats,
            label=label or (Path(profile).stem if profile else "run"),
            endpoint=endpoint,
            seed=seed,
            request_timeout_s=request_timeout_s,
            api_key=key,
            client_processes=client_processes,
        )
        validate(cfg)
        return cfg

    def prompts_for(self, concurrency: int | None, rate: float | None = None) -> int:
        if self.num_prompts:
            return self.num_prompts
        if rate is not None:
            return max(8, math.ceil(rate * (self.duration_s or 10)))
        return max(8, 4 * (concurrency or 1))

    def processes_for(self, concurrency: int) -> int:
        if self.client_processes is not None:
            return self.client_processes
        return max(1, min((os.cpu_count() or 1) // 4, concurrency // STREAMS_PER_PROCESS))

    def burstiness_value(self) -> float:
        return {"poisson": 1.0, "constant": math.inf}.get(self.arrival, self.burstiness)


@dataclass(frozen=True)
class LevelSpec:
    """One level of a sweep: how many requests may be in flight (None: no cap), the arrival rate (None: all at
    once, as fast as the cap allows) and the prompt length (0: a dataset's prompts, whatever their lengths)."""

    concurrency: int | None
    request_rate: float | None
    input_len: int

    @property
    def tag(self) -> str:
        """A file-name-safe name of the level."""
        parts = []
        if self.request_rate is not None:
            parts.append(f"rate{self.request_rate:g}")
        if self.concurrency is not None:
            parts.append(f"c{self.concurrency}")
        if self.input_len:
            parts.append(f"in{self.input_len}")
        return "-".join(parts)


def levels(cfg: BenchConfig) -> list[LevelSpec]:
    length = prompt_len(cfg)
    if cfg.request_rates:
        cap = cfg.concurrency[0] if cfg.concurrency else None
        return [LevelSpec(cap, rate, length) for rate in cfg.request_rates]
    if cfg.context_lens:
        return [LevelSpec(cfg.concurrency[0], None, n) for n in cfg.context_lens]
    return [LevelSpec(c, None, length) for c in cfg.concurrency]


def prompt_len(cfg: BenchConfig) -> int:
    """The prompt length every level asks for: --input-len, or 0 with a dataset (its prompts have their own)."""
    return 0 if cfg.dataset is not None else cfg.input_len


def parse_slo(text: str) -> tuple[tuple[str, float], ...]:
    """`ttft=200,tpot=50` (milliseconds; `:` works too, as in vLLM's --goodput)."""
    pairs = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.replace(":", "=").partition("=")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or name.strip() not in SLO_METRICS or not math.isfinite(ms) or ms <= 0:
            raise BadInput(
                f"--slo {text!r}: {item!r} is not NAME=MILLISECONDS",
                f"give e.g. --slo ttft=200,tpot=50 (names: {', '.join(SLO_METRICS)}; positive numbers)",
            )
        pairs.append((name.strip(), ms))
    return tuple(pairs)


def validate(cfg: BenchConfig) -> None:
    """Every bad value is refused here, before a prompt is built or a request sent."""
    url = urllib.parse.urlsplit(cfg.url)
    if (url.username or url.password) and cfg.api_key:
        raise BadInput(
            "--url carries a user and password and an API key is given too: a request can send only one",
            "drop the password from --url, or the key (--api-key-file, $NEMOLAUNCH_API_KEY, $VLLM_API_KEY)",
        )
    if cfg.request_rates and cfg.context_lens:
        raise BadInput("give --request-rate or --context-lens, not both")
    values = {
        "concurrency": cfg.concurrency,
        "request-rate": cfg.request_rates,
        "context-lens": cfg.context_lens,
    }
    for name, vals in values.items():
        if len(set(vals)) != len(vals):
            dup = sorted({v for v in vals if list(vals).count(v) > 1})
            raise BadInput(f"--{name} repeats {dup}", "give each level once (use --repeats to measure it again)")
    if not cfg.concurrency and not cfg.request_rates:
        raise BadInput("give at least one --concurrency level")
    if any(c < 1 for c in cfg.concurrency) or max(cfg.concurrency, default=1) > MAX_CONCURRENCY:
        raise BadInput(
            f"--concurrency {max(cfg.concurrency)} is beyond the limit of {MAX_CONCURRENCY}",
            f"give levels between 1 and {MAX_CONCURRENCY}",
        )
    if cfg.request_rates and len(cfg.concurrency) > 1:
        raise BadInput("with --request-rate, --concurrency is one cap on requests in flight", "give one value")
    if cfg.context_lens and len(cfg.concurrency) > 1:
        raise BadInput("a --context-lens sweep runs at one concurrency", "give one --concurrency value")
    if any(not (math.isfinite(r) and r > 0) for r in cfg.request_rates):
        raise BadInput("--request-rate takes positive numbers of requests per second")
    for rate in cfg.request_rates:  # each rate level sends rate x duration (10 s by default) prompts
        count = cfg.prompts_for(None, rate)
        if count > MAX_PROMPTS:
            raise BadInput(
                f"--request-rate {rate:g} would send {count:,} prompts per level, beyond the limit of {MAX_PROMPTS:,}",
                "give a lower rate, a shorter --duration or --num-prompts",
            )
        if count / rate > MAX_LEVEL_S:
            raise BadInput(
                f"--request-rate {rate:g} would take {count / rate:,.0f} s to send {count} prompts",
                f"give a rate of at least {count / MAX_LEVEL_S:.2g} requests/s, or fewer --num-prompts",
            )
    if cfg.arrival not in ARRIVALS:
        raise BadInput(f"--arrival {cfg.arrival!r} is not one of {', '.join(ARRIVALS)}")
    if not (math.isfinite(cfg.burstiness) and BURSTINESS[0] <= cfg.burstiness <= BURSTINESS[1]):
        raise BadInput(
            f"--burstiness {cfg.burstiness:g} is outside {BURSTINESS[0]:g}..{BURSTINESS[1]:g}",
            "below 1 is burstier than Poisson, above 1 steadier; give e.g. 0.5 or 4",
        )
    for name, seconds in (("request-timeout", cfg.request_timeout_s), ("stall-timeout", cfg.stall_timeout_s)):
        if not (math.isfinite(seconds) and seconds > 0):
            raise BadInput(f"--{name} {seconds} is not a positive number of seconds", "give e.g. 600")
    if cfg.duration_s is not None and not (math.isfinite(cfg.duration_s) and cfg.duration_s > 0):
        raise BadInput("--duration must be a positive number of seconds")
    if not 0 < cfg.slo_share <= 1:
        raise BadInput("--slo-share must be in (0, 1], e.g. 0.9: the share of requests that must meet the SLOs")
    if cfg.num_prompts is not None and not 1 <= cfg.num_prompts <= MAX_PROMPTS:
        raise BadInput(f"--num-prompts must be between 1 and {MAX_PROMPTS}")
    if "/" in cfg.label or "\\" in cfg.label or cfg.label in ("", ".", "..") or "\x00" in cfg.label:
        raise BadInput(
            f"--label {cfg.label!r} cannot be a file name",
            "labels name result files: use letters, digits, '-', '_', '.' (no path separators)",
        )
    if not 0 <= cfg.shared_prefix_len < (min(cfg.context_lens) if cfg.context_lens else cfg.input_len):
        raise BadInput(
            f"--shared-prefix {cfg.shared_prefix_len} must be shorter than the prompt",
            "give a prefix length below --input-len",
        )
    if cfg.client_processes is not None and not 1 <= cfg.client_processes <= MAX_CLIENT_PROCESSES:
        raise BadInput(f"--client-processes must be between 1 and {MAX_CLIENT_PROCESSES}")
    if any(n < 1 for n in cfg.context_lens):
        raise BadInput("--context-lens takes positive prompt lengths in tokens")
    if cfg.dataset is not None and (cfg.shared_prefix_len or cfg.context_lens):
        raise BadInput("a --dataset brings its own prompts", "drop --shared-prefix / --context-lens")
