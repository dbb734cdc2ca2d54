"""Build the FlashInfer JIT modules the probe's kernels need, outside the probe's set-up pool, into FlashInfer's
own cache (where vLLM and the probe's children find them).

    python flashinfer_build.py OUTDIR HEAD_DIM MODULE...     MODULE: attention (vLLM's FLASHINFER backend's two
                                                             bf16 paged modules) or gemm (bmm_fp8's module)

probe/builds.py starts this first, in a session of its own, so it outlives a probe that is stopped (the next run then
finds the modules built, or waits on FlashInfer's lock). Per module it holds FlashInfer's own per-module file lock
(JitSpec.lock_path, the one JitSpec.build_and_load takes) while it writes the module's build.ninja and runs ninja
exactly as JitSpec.build does (`ninja -C <module dir> -f build.ninja`, so the module's own .ninja_log records the
commands and a later build_and_load finds everything up to date); a vLLM or a probe child loading the module
meanwhile waits on that lock, then loads. The modules build side by side, each ninja with as many jobs as the
module has compile units (MAX_JOBS, FlashInfer's own setting, caps it), the whole build at nice 10, so the probe's
set-ups (at normal priority) get the cores they need and the compile gets the rest. On a fresh H200 that made the
attention module the long pole (93-110 s, the longer when the set-ups overlapped more of it);
NEMOLAUNCH_FLASHINFER_NICE="attention=0" (module=niceness, comma-separated) runs a module's compile at another
niceness, to measure the other trade (a niceness below the driver's 10 needs root; without it nice says so in the
module's log and the compile runs at 10). Measured on a fresh H200 (2026-12-02): at nice 0 the attention build took
99-100 s, at nice 10 94.5-106 s in the same lease: no difference, so 10 stays the default.

Writes OUTDIR/MODULE.log (ninja's output) and, when the module ends, OUTDIR/MODULE.json: {"ok", "error" (the last
error line), "started", "ended" (monotonic), "units": [[compile unit, seconds], ...] (from ninja's log)}; where
the module's spec cannot be made (FlashInfer missing, its JIT API moved) "ok" with "not_prebuilt" saying why: the
kernels then go ahead and their own first call compiles the module (or fails with its own error).
"""

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def attention_specs(head_dim: int) -> list:
    """The two modules vLLM's FLASHINFER backend loads for bf16 paged attention: the batch-prefill module of the
    tensor-core decode wrapper (fa2) and the prefill wrapper's (fa3 where the GPU has it, as its "auto" backend
    picks). Flags as plan() passes them for vLLM's bf16 paged attention: no RoPE in the kernel, no sliding
    window, no soft cap, no fp16 QK reduction."""
    import torch
    from flashinfer.jit.attention.modules import gen_batch_prefill_module
    from flashinfer.utils import determine_attention_backend

    bf16 = torch.bfloat16
    prefill = determine_attention_backend(torch.device("cuda"), 0, False, False, bf16, bf16)
    flags = (0, False, False, False)
    return [
        gen_batch_prefill_module(backend, bf16, bf16, bf16, torch.int32, head_dim, head_dim, *flags)
        for backend in dict.fromkeys(("fa2", prefill))
    ]


def gemm_specs() -> list:
    from flashinfer.jit.gemm import gen_gemm_module

    return [gen_gemm_module()]


def ninja_units(build_dir: Path) -> list[list]:
    """Each compile unit's seconds, from ninja's log (start and end in ms, output path)."""
    units = []
    with contextlib.suppress(OSError):
        for line in (build_dir / ".ninja_log").read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 4 and parts[0].isdigit():
                units.append([Path(parts[3]).name, round((int(parts[1]) - int(parts[0])) / 1000, 1)])
    return units


@contextlib.contextmanager
def module_lock(path: Path):
    """FlashInfer's lock on a module: filelock's UnixFileLock is an exclusive flock() on this file, so the same
    flock excludes (and is excluded by) JitSpec.build_and_load in vLLM and in the probe's children."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


DEFAULT_NICE = 10


def nice_for(module: str) -> int:
    """The niceness of a module's compile: NEMOLAUNCH_FLASHINFER_NICE's entry for it, else DEFAULT_NICE."""
    for item in os.environ.get("NEMOLAUNCH_FLASHINFER_NICE", "").split(","):
        name, _, value = item.partition("=")
        if name.strip() == module and value.strip().lstrip("-").isdigit():
            return int(value)
    return DEFAULT_NICE


def jobs_for(spec) -> int:
    cap = os.environ.get("MAX_JOBS")
    jobs = len(spec.sources)
    if cap and cap.isdigit():
        jobs = min(jobs, int(cap))
    return max(1, min(jobs, os.cpu_count() or 1))


def build(out: Path, module: str, specs: list, started: float) -> None:
    """Every spec of one module under its lock, their ninjas side by side; then the module's status file."""
    status: dict = {"ok": False, "error": None, "started": started, "own_session": os.getsid(0) == os.getpid()}
    log_path = out / f"{module}.log"
    try:
        with contextlib.ExitStack() as stack, log_path.open("a") as log:
            runs = []
            for spec in specs:
                stack.enter_context(module_lock(Path(spec.lock_path)))
                if spec.is_aot:
                    continue
                spec.write_ninja()
                command = ["ninja", "-v", "-C", str(spec.build_dir.resolve()), "-f", str(spec.ninja_path.resolve()),
                           "-j", str(jobs_for(spec))]  # fmt: skip
                shift = nice_for(module) - os.nice(0)  # from this process's own niceness
                if shift:
                    command = ["nice", "-n", str(shift), *command]
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                runs.append((spec, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)))
            failed = [spec.name for spec, run in runs if run.wait() != 0]
            status["units"] = [u for spec, _ in runs for u in ninja_units(spec.build_dir)]
        if failed:
            lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
            last = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "no output")
            status["error"] = f"ninja failed for {', '.join(failed)}: {last[:300]}"
        else:
            status["ok"] = True
    except Exception as e:  # the module's jobs report this line
        status["error"] = f"{type(e).__name__}: {e}"[:300]
    status["ended"] = time.monotonic()
    tmp = out / f".{module}.json"
    tmp.write_text(json.dumps(status))
    tmp.replace(out / f"{module}.json")


def main(out: Path, head_dim: int, modules: list[str]) -> None:
    started = time.monotonic()
    with contextlib.suppress(OSError):
        os.nice(DEFAULT_NICE)
    specs: dict = {}
    for module in modules:
        try:
            specs[module] = attention_specs(head_dim) if module == "attention" else gemm_specs()
        except Exception as e:  # FlashInfer missing or its JIT API moved: nothing prebuilt, the kernels go ahead
            # (their own first call compiles the module as before, or fails with its own error)
            status = {
                "ok": True, "error": None, "not_prebuilt": f"{type(e).__name__}: {e}"[:300], "started": started,
                "ended": time.monotonic(), "own_session": os.getsid(0) == os.getpid(),
            }  # fmt: skip
            (out / f"{module}.json").write_text(json.dumps(status))
    threads = [threading.Thread(target=build, args=(out, m, s, started)) for m, s in specs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
