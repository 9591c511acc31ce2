"""memcompile-local: query-conditioned memory compilation for long-term conversational memory.

Importing the package loads no model library (torch, vllm, openai, llama_cpp, outlines);
backends load them when they are first used.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "Memory", "PipelineConfig"]


def __getattr__(name):  # lazy: keep `import memcompile_local` light
    if name == "Memory":
        from .memory import Memory

        return Memory
    if name == "PipelineConfig":
        from .config import PipelineConfig

        return PipelineConfig
    raise AttributeError(name)
