"""Upstream engines: models served by another OpenAI-compatible server (vLLM, llama-server, Ollama,
another localrun) behind this daemon.

    backends.py  backends.toml: what the user declared (parsed, checked, written atomically)
    wire.py      the native request as an OpenAI chat/completions body, and its stream back as events
    replicas.py  which replica gets a request: least busy, prefix affinity, circuit breakers (plain data)
    pool.py      the daemon's side: HTTP to the replicas, failover, health checks, model discovery

The model manager hands a request for an upstream model to `pool.Upstreams`, whose lease looks like a
loaded local model (a `runner` with `stream("generate", ...)`), so dialects and generation do not
change when a model lives elsewhere. The CLI may import `backends` (it edits the file) but nothing else.
"""
