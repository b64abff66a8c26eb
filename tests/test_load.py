"""A short sustained load: crawlers and writers at once on a real HTTP server.

No timing assertions (``python -m benchmarks load`` prints the figures): every
request succeeds and every crawler ends holding every public tender at its
latest version.
"""

from __future__ import annotations

import pytest

from benchmarks.load import format_result, run_load

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_short_load_no_errors_and_complete_crawlers() -> None:
    result = run_load(
        duration=5,
        crawlers=2,
        writers=2,
        tenders=30,
        watermark=0.3,
        write_delay="0-5",
        progress=False,
        report=lambda message: None,
    )
    summary = format_result(result)
    assert result.errors == 0, summary
    assert all(result.complete), summary
    assert all(crawler.pages > 1 for crawler in result.crawlers), summary
    assert sum(tally.requests for tally in result.writers) > 20, summary
    assert result.tenders > 30, summary  # writers created tenders too
