"""Continuous batching on llama.cpp's low-level API. Imports no HTTP, no pydantic, no store."""
