"""localrun: run open LLMs locally, the way Ollama and llama.cpp's server do, in Python."""

__version__ = "0.1.0"

__all__ = ["__version__"]
