"""Message templates from Python source, for message_index.py (run under the engine's interpreter beside it;
imports neither launcher nor the packages it reads).

Every `raise X(msg)`, `assert cond, msg`, `logger.error|exception|critical|warning(msg)` and `warnings.warn(msg)`
becomes a template: literal parts and None for each formatted part (f-strings, %, .format, +, a variable assigned a
message earlier), with package, file, line, function, exception class, level, the guarding `if` test and the knobs
the function reads (VLLM_*/SGLANG_*/NCCL_* names, envs.X, --flags, config fields).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

# logger methods by the level of what they log ("_once" variants included)
LOG_LEVELS = {m: "error" for m in ("error", "exception", "critical", "fatal", "error_once")}
LOG_LEVELS |= {m: "warning" for m in ("warning", "warn", "warning_once", "warn_once")}
MIN_LITERAL = 12  # a template needs this many literal characters to say something
MAX_KNOBS = 12
ENV_NAME = re.compile(
    r"\b(?:VLLM|SGLANG|SGL|NCCL|CUDA|TORCH|PYTORCH|TRITON|FLASHINFER|HF|TRANSFORMERS|RAY|OMP|NVIDIA)_[A-Z0-9_]{2,}\b"
)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]+(?:-[a-z0-9]+)+\b|(?<![\w-])--[a-z]{4,}\b")
CONFIG_OWNER = re.compile(r"(?:^|_)(?:config|args|envs)$")

Part = str | None  # a literal, or None for a formatted part


def percent_parts(text: str) -> list[Part]:
    """'a %s b %(x)d' -> ['a ', None, ' b ', None]"""
    out: list[Part] = []
    for i, piece in enumerate(re.split(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdifrxXeEgGcoa%]", text)):
        if i:
            out.append(None)
        out.append(piece)
    return out


def _format_parts(text: str) -> list[Part]:
    """'a {} b {x!r:>3}' -> ['a ', None, ' b ', None] ({{ and }} stay literal)."""
    out: list[Part] = []
    for i, piece in enumerate(re.split(r"(?<!\{)\{[^{}]*\}(?!\})", text)):
        if i:
            out.append(None)
        out.append(piece.replace("{{", "{").replace("}}", "}"))
    return out


class Templates:
    """Turns message expressions into parts, following names assigned a message earlier in the function."""

    def __init__(self) -> None:
        self.names: dict[str, list[Part]] = {}

    def parts(self, node: ast.AST | None, logging: bool = False) -> list[Part]:
        if node is None:
            return []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return percent_parts(node.value) if logging else [node.value]
        if isinstance(node, ast.JoinedStr):
            out: list[Part] = []
            for value in node.values:
                out += self.parts(value) if isinstance(value, ast.Constant) else [None]
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            left = node.left
            if isinstance(left, ast.Constant) and isinstance(left.value, str):
                return percent_parts(left.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.parts(node.left) + self.parts(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            base = node.func.value
            if isinstance(base, ast.Constant) and isinstance(base.value, str):
                return _format_parts(base.value)
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.names[node.id]
        if (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and isinstance(node.args[0], (ast.List, ast.Tuple))
        ):
            sep = node.func.value
            glue = sep.value if isinstance(sep, ast.Constant) and isinstance(sep.value, str) else None
            out = []
            for i, elt in enumerate(node.args[0].elts):
                out += ([glue] if i else []) + self.parts(elt)
            return out
        return [None]

    def assign(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> None:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        if not isinstance(target, ast.Name) or node.value is None:
            return
        parts = self.parts(node.value)
        if isinstance(node, ast.AugAssign):
            if isinstance(node.op, ast.Add) and target.id in self.names:
                self.names[target.id] = self.names[target.id] + parts
            return
        if any(isinstance(p, str) and len(p.strip()) >= 8 for p in parts):
            self.names[target.id] = parts


def simplify(parts: list[Part]) -> list[Part]:
    """Adjacent literals joined, adjacent wildcards merged, empty literals dropped."""
    out: list[Part] = []
    for part in parts:
        if part == "":
            continue
        if out and part is not None and isinstance(out[-1], str):
            out[-1] += part
        elif not (out and part is None and out[-1] is None):
            out.append(part)
    return out


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _knobs(function: ast.AST | None) -> list[str]:
    """The environment variables, flags and config fields a function reads."""
    found: dict[str, None] = {}
    if function is None:
        return []
    # a method called on a config object is not a field of it
    called = {id(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)}
    for node in ast.walk(function):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in ENV_NAME.finditer(node.value):
                found.setdefault(m.group(), None)
            for m in FLAG.finditer(node.value):
                found.setdefault(m.group(), None)
        elif isinstance(node, ast.Attribute) and id(node) not in called:
            owner = _name(node.value)
            if owner == "envs" and ENV_NAME.fullmatch(node.attr):
                found.setdefault(node.attr, None)
            elif CONFIG_OWNER.search(owner) and not node.attr.startswith("_") and owner != "self":
                found.setdefault(f"{owner}.{node.attr}", None)
        if len(found) >= 4 * MAX_KNOBS:
            break
    # env vars and flags first: they are what an operator can set
    return sorted(found, key=lambda k: (not (k.isupper() or k.startswith("--")), k))[:MAX_KNOBS]


class Visitor(ast.NodeVisitor):
    def __init__(self, package: str, file: str) -> None:
        self.package, self.file = package, file
        self.out: list[dict[str, Any]] = []
        self.functions: list[ast.AST] = []
        self.qualname: list[str] = []
        self.guards: list[str] = []
        self.templates = [Templates()]
        self.knob_cache: dict[int, list[str]] = {}

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.qualname.append(node.name)
        is_function = not isinstance(node, ast.ClassDef)
        if is_function:
            self.functions.append(node)
            self.templates.append(Templates())
        saved, self.guards = self.guards, []
        self.generic_visit(node)
        self.guards = saved
        if is_function:
            self.functions.pop()
            self.templates.pop()
        self.qualname.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _function

    def visit_If(self, node: ast.If) -> None:
        test = _unparse(node.test)
        self.visit(node.test)
        self.guards.append(test)
        for child in node.body:
            self.visit(child)
        self.guards[-1] = f"not ({test})"
        for child in node.orelse:
            self.visit(child)
        self.guards.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        self.templates[-1].assign(node)
        self.generic_visit(node)

    visit_AugAssign = visit_AnnAssign = visit_Assign  # type: ignore[assignment]

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args:
            self._add(exc.args[0], "error", _name(exc.func), node.lineno, self.guards[-1] if self.guards else None)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add(node.msg, "error", "AssertionError", node.lineno, _unparse(node.test))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and node.args:
            owner = _name(func.value).lower()
            if func.attr in LOG_LEVELS and ("log" in owner or owner == "warnings"):
                level = LOG_LEVELS[func.attr]
                exc = "warnings.warn" if owner == "warnings" else f"logger.{func.attr}"
                self._add(node.args[0], level, exc, node.lineno, self.guards[-1] if self.guards else None, True)
        self.generic_visit(node)

    def _add(self, message: ast.AST, level: str, exc: str, line: int, guard: str | None, logging: bool = False) -> None:
        parts = simplify(self.templates[-1].parts(message, logging))
        literal = "".join(p for p in parts if p)
        if len(literal.strip()) < MIN_LITERAL or len(re.findall(r"[A-Za-z]{2,}", literal)) < 2:
            return
        function = self.functions[-1] if self.functions else None
        key = id(function)
        if key not in self.knob_cache:
            self.knob_cache[key] = _knobs(function)
        self.out.append(
            {
                "parts": parts,
                "package": self.package,
                "file": self.file,
                "line": line,
                "function": ".".join(self.qualname) or "<module>",
                "exception": exc,
                "level": level,
                "guard": guard[:300] if guard else None,
                "knobs": self.knob_cache[key],
            }
        )


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:300]
    except Exception:  # an odd node must not cost the file's other templates
        return "?"


def index_file(job: tuple[str, str, str]) -> list[dict[str, Any]]:
    package, path, rel = job
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (SyntaxError, ValueError, OSError):
        return []
    visitor = Visitor(package, rel)
    visitor.visit(tree)
    return visitor.out
