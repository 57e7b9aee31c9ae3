"""`kuiper serve`: a language model behind an OpenAI-compatible HTTP API, with continuous batching.

    api.py     the API's request fields, checked, and its response objects
    app.py     the Starlette application: routes, errors, streaming, disconnects
    server.py  uvicorn running it, in the foreground or in a thread

The batching itself is kuiper/llm/scheduler.py and the paged KV cache kuiper/llm/paged.py; starlette and
uvicorn (the `serve` extra) are imported only when a server is made.
"""

from kuiper.app.serve.server import Server

__all__ = ["Server"]
