"""The plan cache every engine shares: plans (compiled kernels and device buffers for one
shape and parameter set) kept per runtime between calls, least recently used dropped first.

Keys are tuples whose first item names the engine ("search", "nlmeans", ...); each engine
says how many of its plans to keep (plans hold device memory, so the bound is per engine).
A plan whose construction fails is not kept. A key that cannot be hashed (an argument of
the wrong kind) is not looked up: the plan is made directly, so its constructor's checks
raise the error that names the argument.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class PlanCache(OrderedDict):
    """An ordered mapping key -> plan, most recently used last (read it like a dict)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()

    def plan(self, key: tuple[Hashable, ...], make: Callable[[], Any], keep: int) -> Any:
        """The plan under `key`, made with `make()` when missing, marked most recently used;
        then at most `keep` plans of the same engine (`key[0]`) stay."""
        try:
            hash(key)
        except TypeError:
            return make()
        with self.lock:
            plan = self.pop(key, None)
            if plan is None:
                plan = make()
            self[key] = plan
            same = [k for k in self if isinstance(k, tuple) and k and k[0] == key[0]]
            for old in same[:-keep]:
                del self[old]
            return plan
