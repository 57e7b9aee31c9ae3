"""uvicorn serving make_app: in the foreground for `kuiper serve`, or in a thread of its own for tests and
benchmarks (`start()` returns once the socket listens, `stop()` ends the scheduler, then the server)."""

from __future__ import annotations

import socket
import threading
import time

from kuiper.app.serve.app import make_app
from kuiper.core.errors import KuiperError
from kuiper.llm.scheduler import Scheduler


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: a free one), made before anything slow runs: an address in use, or a
    host that is not one of this machine's, is a KuiperError naming it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port left in TIME_WAIT is free
        sock.bind(address)
    except OSError as e:
        raise KuiperError(f"cannot listen on {host} port {port}: {e.strerror or e}") from None
    return sock


class Server:
    """`lm` behind the OpenAI API on host:port (port 0: a free one, `port` tells which), or on `sock`, a socket
    listening_socket made; `template_variables`, names for the chat template in every chat request."""

    def __init__(self, lm, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                 max_batch: int = 16, max_queue: int = 64, sock: socket.socket | None = None,
                 template_variables: dict | None = None):
        import uvicorn

        self.socket = sock or listening_socket(host, port)
        self.lm, self.host = lm, host
        self.scheduler = Scheduler(lm, max_batch=max_batch, max_queue=max_queue)
        app = make_app(lm, self.scheduler, api_key, template_variables)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = None

    @property
    def port(self) -> int:
        return self.socket.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C), then end every generation."""
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.scheduler.close()

    def start(self, timeout: float = 30.0) -> "Server":
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, name="kuiper-http",
                                       daemon=True)
        self.thread.start()
        waited = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > waited:
                self.stop()
                raise KuiperError(f"the server did not start on {self.host} within {timeout} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.scheduler.close()  # open streams end ("cancelled"), so the server need not wait for them
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
