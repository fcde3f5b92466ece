"""Stand-in of vllm.plugins.load_general_plugins, as both generations of the
vllm stand-in have it: every entry point of group "vllm.general_plugins" is
loaded and called once per process; a failing plugin is logged, not raised
(as vLLM does). Written from reading vLLM's vllm/plugins/__init__.py (same
behaviour in both generations refit serves)."""
import logging
from importlib.metadata import entry_points

_loaded = False
errors = []


def load_general_plugins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group="vllm.general_plugins"):
        try:
            ep.load()()
        except Exception as e:  # vLLM logs a failing plugin and goes on
            errors.append(f"{ep.name}: {e!r}")
            logging.getLogger(__name__).exception("plugin %s failed", ep.name)
