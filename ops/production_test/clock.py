"""The production-shaped test's clock: seconds since it began, its overall
time budget, and waiting for a condition within both."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .deployment import Failure


class Clock:
    """Seconds since the test began, and the test's overall deadline."""

    def __init__(self, budget: float) -> None:
        self.started = time.monotonic()
        self.budget = budget

    def now(self) -> float:
        return time.monotonic() - self.started

    def check(self, doing: str) -> None:
        if self.now() > self.budget:
            raise Failure(f"the test ran past its time budget of {self.budget:g} s while {doing}")

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
        """Poll ``condition`` until it returns something true; :class:`Failure`
        after ``timeout`` seconds (or past the budget)."""
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise Failure(f"{what}: not within {timeout:g} s")
            self.check(f"waiting for {what}")
            time.sleep(every)
