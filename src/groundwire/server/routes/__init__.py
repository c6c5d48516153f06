"""The HTTP routes, one module per concern: knowledge (read), ask (SSE), ops (operate)."""
