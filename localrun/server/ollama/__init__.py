"""The Ollama-compatible dialect: /api/* routes with NDJSON streaming and nanosecond timings."""
