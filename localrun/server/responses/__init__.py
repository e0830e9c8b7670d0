"""The OpenAI Responses dialect: POST/GET/DELETE /v1/responses, the API Codex speaks."""
