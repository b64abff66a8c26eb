"""Serve the demo application on a real HTTP server (waitress) in a thread.

Used by ``openprocurement-feed run``, the race experiment and end-to-end
tests. Needs the ``embedded`` extra (``waitress``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..store.state import feed_state
from . import main


class ThreadedServer:
    """A WSGI app on a waitress server in a background thread, with a
    clean stop: the one place that knows how to stop waitress from another
    thread.

    ``options`` go to :func:`waitress.server.create_server` (one listening
    socket on ``host:port``; port 0 picks a free one).
    """

    def __init__(
        self, app: Callable[..., Any], host: str = "127.0.0.1", port: int = 0, threads: int = 8, **options: Any
    ) -> None:
        from waitress.server import create_server

        # One listening socket: a TcpWSGIServer (the stubs' return type is
        # the union with the multi-socket server, which has no port).
        server: Any = create_server(app, host=host, port=port, threads=threads, **options)
        self.server = server
        self.host = host
        self.port = int(server.effective_port)
        self.thread = threading.Thread(target=server.run, name=f"http-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        """The server's root URL."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> ThreadedServer:
        """Start serving in the background thread."""
        self.thread.start()
        return self

    def close(self) -> None:
        """Stop serving.

        Waitress serves while its socket map holds a dispatcher, and an idle
        keep-alive connection would hold it for ``channel_timeout``: the map
        is emptied so the loop ends after its current poll, then the worker
        threads stop and the sockets are closed, in that order (closing them
        under a running loop makes it fail on a closed descriptor).
        """
        socket_map = self.server._map
        dispatchers = list(socket_map.values())
        socket_map.clear()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        self.server.task_dispatcher.shutdown()
        for dispatcher in dispatchers:
            with contextlib.suppress(OSError):
                dispatcher.close()

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class DemoServer:
    """The demo API on ``http://{host}:{port}``, served by waitress.

    ``settings`` are the app's ini settings (``mongodb.uri`` and so on). The
    embedded database, when the URI asks for it, belongs to the app and is
    stopped by :meth:`close`.
    """

    def __init__(
        self,
        settings: Mapping[str, Any],
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = 8,
    ) -> None:
        self.app = main({}, **dict(settings))
        self.registry = self.app.registry
        # the default cap on long-poll waiters is half the server's threads
        feed_state(self.registry).server_threads = threads
        try:
            self.http = ThreadedServer(
                self.app,
                host=host,
                port=port,
                threads=threads,
                clear_untrusted_proxy_headers=True,
                connection_limit=200,
                channel_timeout=30,
                # reads on while a request runs, so that a long-poll waiter
                # learns when its client went away (waitress.client_disconnected)
                channel_request_lookahead=1,
            )
        except BaseException:
            self._close_app()
            raise

    @property
    def port(self) -> int:
        """The port served (the one picked when ``port`` was 0)."""
        return self.http.port

    @property
    def thread(self) -> threading.Thread:
        """The thread that serves."""
        return self.http.thread

    @property
    def url(self) -> str:
        """The server's root URL."""
        return self.http.url

    @property
    def writer_key(self) -> str | None:
        """The key of the first broker of ``demo.auth_file`` (else of its
        first user): what the writers of ``run`` and the race send; None
        when writes are open."""
        users = self.registry.demo_users
        if users is None:
            return None
        key: str = users.key_of() or next(iter(users))[0]
        return key

    @property
    def api_url(self) -> str:
        """The URL of the API root (``url`` + ``feed.route_prefix``)."""
        prefix: str = self.registry.feed_settings.route_prefix
        return self.url + prefix

    def start(self) -> DemoServer:
        """Start serving in a background thread."""
        self.http.start()
        return self

    def close(self) -> None:
        """Answer the long-poll waiters, stop serving
        (:meth:`ThreadedServer.close`), then close the store and stop an
        embedded database."""
        notifier = feed_state(self.registry).longpoll
        if notifier is not None:
            notifier.stop()  # waiting requests hold worker threads: answer them first
        self.http.close()
        self._close_app()

    def _close_app(self) -> None:
        from .. import shutdown

        shutdown(self.registry)

    def __enter__(self) -> DemoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
