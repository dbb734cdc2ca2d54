"""What the installed vLLM accepts: its version, the env vars in its envs.py registry and (with --options)
every option of its OpenAI server's argument parser. Prints one JSON object.

The env registry is read from envs.py's syntax tree, without importing vLLM (which takes seconds and may
crash on a broken stack); the parser needs the import.
"""

import ast
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

from dists import API_SERVERS, VLLM_DISTRIBUTIONS


def vllm_distribution() -> tuple[str | None, str | None]:
    for dist in VLLM_DISTRIBUTIONS:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def env_registry(package_dir: Path) -> list[str]:
    tree = ast.parse((package_dir / "envs.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        )
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(value, ast.Dict):
            return sorted(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    raise RuntimeError("no environment_variables dict in vllm/envs.py")


def api_server(package_dir: Path) -> str:
    """The newest of API_SERVERS this install has (found by file, without importing vLLM)."""
    for module, _ in API_SERVERS:
        parts = module.split(".")[1:]
        if package_dir.joinpath(*parts[:-1], parts[-1] + ".py").is_file():
            return module
    return API_SERVERS[-1][0]


def parser_options() -> list[str]:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # older releases
    for module in ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args"):
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
            break
        except (ImportError, AttributeError):
            continue
    else:
        raise RuntimeError("cannot find vLLM's make_arg_parser")
    parser = make_arg_parser(FlexibleArgumentParser())
    return sorted({o for action in parser._actions for o in action.option_strings})


def main() -> None:
    dist, version = vllm_distribution()
    spec = importlib.util.find_spec("vllm")
    out: dict[str, object] = {"distribution": dist, "version": version, "python": sys.executable}
    if spec is None or not spec.submodule_search_locations:
        out["error"] = "vllm is not installed in this interpreter"
    else:
        package_dir = Path(next(iter(spec.submodule_search_locations)))
        out["package_dir"] = str(package_dir)
        out["env_vars"] = env_registry(package_dir)
        out["entry"] = api_server(package_dir)
        if "--options" in sys.argv:
            out["options"] = parser_options()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
