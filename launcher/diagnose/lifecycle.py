"""Where in its life a vLLM server is, read from the lines it prints: starting, in which stage, failed,
stopped on request. The markers are vLLM's and uvicorn's own words (0.26 and 0.32 print them alike).
"""

from __future__ import annotations

import enum
import re

TRACEBACK = b"Traceback (most recent call last)"
# A line saying the server or its engine died, whatever the reason.
FATAL = (
    b"EngineCore failed to start",
    b"EngineCore encountered a fatal error",
    b"Engine core initialization failed",
    b"EngineDeadError",
    b"died unexpectedly",
    b"engine core exited unexpectedly",
    b"Engine loop has died",
    b"terminating server process",
    b"Segmentation fault",
    b"core dumped",
    b"what():",  # a C++ exception no one caught: "terminate called after throwing ... what(): <message>"
    # a process killed by SIGKILL (the host's OOM killer, a pod's memory limit): mpirun's, torchrun's, docker's words
    b"on signal 9",
    b"Signal 9 (SIGKILL)",
    b"Signals.SIGKILL",
    b"exited with code 137",
)
# Exceptions that only say something below them failed: the root error is the one before them, or the one
# they quote.
WRAPPERS = ("EngineDeadError", "Engine core initialization failed", "EngineCore failed to start", "WorkerProc hit")
# Words of a line that only reports that something under it failed (an engine, a worker process, a Ray task, a
# torchrun child, a subprocess): when a more specific error stands before it, that error is the root.
UMBRELLAS = (
    *WRAPPERS,
    "See root cause above",
    "Worker failed with error",
    "RayTaskError",
    "ChildFailedError",
    "returned non-zero exit status",
    "Error executing method",
)
# wrappers that quote the error they wrap: the quoted error is read as the root
QUOTING = ("Worker failed with error",)
# A stop someone asked for: the engine core was sent SIGTERM/SIGINT (by nemolaunch, the operator, Kubernetes),
# the API server's own shutdown began, or Ctrl-C. What vLLM logs after it (EngineDeadError, force-killed
# processes) is the stop, not a crash.
STOP = (
    b"trigger received signal=SIGTERM",
    b"trigger received signal=SIGINT",
    b"API server: shutdown triggered",
    b"KeyboardInterrupt",
)
# vLLM starting, and vLLM serving: a log with the first and neither the second nor an error ended early.
STARTED = (b"Initializing a V1 LLM engine", b"non-default args", b"vLLM API server version")
SERVING = b"Application startup complete"
# Python's report of an exception it could not raise (in a __del__, a callback, at exit): the program goes on, so
# the traceback after it is no failure; nor an error that only says the interpreter is shutting down
UNRAISABLE = b"Exception ignored in"
SHUTTING_DOWN = ("Python is likely shutting down", "during interpreter shutdown", "sys.meta_path is None")


class Stage(enum.StrEnum):
    LOADING = "loading weights"
    PROFILING = "memory profiling"
    CAPTURE = "CUDA graph capture"
    SERVING = "serving requests"


# markers vLLM prints as it enters a stage, and functions a traceback passes through in it (lower case)
STAGE_MARKERS = (
    (
        Stage.LOADING,
        (b"Starting to load model", b"Loading safetensors checkpoint", b"load_weights", b"in load_model"),
    ),
    (
        Stage.PROFILING,
        (
            b"Loading weights took",
            b"Model loading took",
            b"determine_available_memory",
            b"in profile_run",
            # KV cache sizing before the V1 engine: the blocks it found, the function that sizes them
            b"# GPU blocks",
            b"determine_num_available_blocks",
        ),
    ),
    (
        Stage.CAPTURE,
        (b"Capturing CUDA graph", b"Capturing cudagraphs", b"in capture_model", b"Capturing the model for CUDA graphs"),
    ),
    (Stage.SERVING, (SERVING, b"in execute_model", b"in step_with_batch_queue")),
)
STAGE_FIX: dict[str | None, str] = {
    None: "read the root error; run nemolaunch doctor to check the stack, and the arguments vLLM printed at start",
    Stage.LOADING: "check the model folder (config.json, every safetensors shard complete and readable), "
    "free disk and host memory; run nemolaunch doctor",
    Stage.PROFILING: "lower --max-model-len or --max-num-seqs, or raise --gpu-memory-utilization; "
    "--enforce-eager tells whether torch.compile is involved",
    Stage.CAPTURE: "lower --gpu-memory-utilization or --cudagraph-capture-sizes; --enforce-eager confirms "
    "capture is the cause (it costs throughput, do not keep it)",
    Stage.SERVING: "a request crashed the engine: CUDA_LAUNCH_BLOCKING=1 names the failing kernel; "
    "keep the request that triggered it, and check nemolaunch probe for the kernels in use",
}
# A root line that only says the engine process is gone: it died without a Python error of its own.
SILENT_DEATH = ("EngineDeadError", "exited unexpectedly", "died unexpectedly", "ignal 9", "SIGKILL", "code 137")
COLLECT_AFTER_SILENT_DEATH = (
    "the engine core (or the process this log is of) died without printing an error of its own, so the log "
    "cannot say why: collect "
    "dmesg | grep -i -e oom -e killed (the host's OOM killer), the pod's events (kubectl describe pod: OOMKilled), "
    "the exit code or signal, and check host memory; a native crash prints 'Segmentation fault' or a core dump"
)
COLLECT_AFTER_CUT_TRACEBACK = (
    "the log ends inside a traceback, before the exception that names the error: collect the complete log (the "
    "lines after the last frame), and the lines before it for an earlier error"
)
COLLECT_AFTER_EARLY_END = (
    "the log ends while {stage} without an error: if vLLM is gone, something outside it stopped it (dmesg, the "
    "pod's events, the exit code); if it is still there, it hangs: py-spy dump --pid <engine core pid>, and "
    "NCCL_DEBUG=INFO for a multi-GPU start"
)
# A container orchestrator saying the server's container crashed: its own error is in the previous container's log
CRASHED = (b"Crashed container", b"CrashLoopBackOff", b"Back-off restarting failed container")
COLLECT_AFTER_CRASH = (
    "the container crashed and this log does not hold its error: collect the crashed container's own log "
    "(kubectl logs <pod> --previous; docker logs <container>) and its last state (kubectl describe pod <pod>: "
    "Last State, Reason, Exit Code: OOMKilled or 137 is memory, 1 an error its log names, and the events: a "
    "failed liveness or startup probe restarts a server still loading: raise its initialDelaySeconds or "
    "failureThreshold)"
)
# A log that ends waiting for something that never came (a shard, a worker, a placement group, a server): the
# same waiting line printed again and again at its end, and nothing after it.
WAITING = re.compile(
    r"(?i)\b(?:still )?waiting for (?!new requests)\S.{0,80}?(?:to (?:be )?(?:ready|start|become|connect|join|finish"
    r"|come up|respond)|placement group|\.\.\.)"
)
WAITING_LINES = 3  # times the same waiting line closes a log before it reads as a hang
COLLECT_WHILE_WAITING = (
    "the log ends waiting ({waiting}) without an error, so it cannot say why: the process it waits for hangs or "
    "died; collect py-spy dump --pid <that process's pid>, its own log, NCCL_DEBUG=INFO for a multi-GPU start, and "
    "dmesg / the pod's events if it is gone"
)
