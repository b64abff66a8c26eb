"""The demo's HTTP server: no busy loop while idle, and a close that ends
the serving thread even with keep-alive connections open."""

from __future__ import annotations

import time

import requests

from openprocurement_feed.demo.server import DemoServer


def test_idle_server_does_not_spin_and_closes_with_keep_alive_open(settings: dict[str, str]) -> None:
    server = DemoServer(settings, threads=2).start()
    http = requests.Session()
    try:
        assert http.get(server.api_url + "/tenders").status_code == 200
        started = time.process_time()
        time.sleep(1.0)
        idle_cpu = time.process_time() - started
        assert idle_cpu < 0.5, f"the idle server burnt {idle_cpu:.2f} s of CPU in 1 s"
    finally:
        server.close()
    assert not server.thread.is_alive()
    http.close()
