"""The Anthropic-compatible dialect: /v1/messages (JSON and SSE) and /v1/messages/count_tokens."""
