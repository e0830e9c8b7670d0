"""Typed HTTP client for the daemon (httpx): the only way the CLI reaches it."""
