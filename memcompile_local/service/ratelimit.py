"""Request throttles of the memory service: failed API keys per source address, requests per tenant.

Both are token buckets held in a bounded, least-recently-used table behind a lock, so a flood
of distinct addresses (or a server with many tenants) cannot grow the process without limit:
past ``max_keys`` entries the least recently seen one is dropped, which at worst forgets a
bucket that was refilling anyway.

* :class:`FailedKeyThrottle`: every refused key (401 missing or unknown, 403 revoked) from an
  address takes a token of that address's bucket; once it is empty the address gets 429 with
  ``Retry-After`` instead of 401/403 for every further bad key. A valid key still passes:
  keys are 32 random bytes, so the key space, not this throttle, is what stops guessing; the
  throttle bounds the work and the log lines an address can cause with bad keys, and it must
  not lock out a good client that shares the address (a NAT, a host with a broken agent).
* :class:`TenantRateLimit`: every authenticated request of a tenant takes a token; off unless
  ``serve --rate-limit`` sets a rate.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Callable

from .errors import ServiceError


class TokenBuckets:
    """Token buckets keyed by a string: ``rate`` tokens per second up to ``burst``; bounded."""

    def __init__(self, rate: float, burst: float, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1 or max_keys < 1:
            raise ValueError(f"token buckets need rate > 0, burst >= 1, max_keys >= 1; got {rate}, {burst}, {max_keys}")
        self.rate = float(rate)
        self.burst = float(burst)
        self.max_keys = int(max_keys)
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def _level(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - at) * self.rate)

    def wait_s(self, key: str) -> float:
        """Seconds until ``key`` has a whole token (0 when it has one now); takes nothing."""
        with self._lock:
            level = self._level(key, self._clock())
        return 0.0 if level >= 1 else (1 - level) / self.rate

    def take(self, key: str) -> float:
        """Take a token of ``key``; returns 0 when it had one, else the seconds until it will."""
        with self._lock:
            now = self._clock()
            level = self._level(key, now)
            if level >= 1:
                level -= 1
                wait = 0.0
            else:
                wait = (1 - level) / self.rate
            self._buckets[key] = (level, now)
            self._buckets.move_to_end(key)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return wait

    def __len__(self) -> int:
        with self._lock:
            return len(self._buckets)


def _retry_after(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


class FailedKeyThrottle:
    """Refused keys per source address: ``burst`` at once, then ``per_minute`` (see the module doc)."""

    def __init__(self, *, per_minute: float = 10.0, burst: int = 20, max_addresses: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.buckets = TokenBuckets(per_minute / 60.0, burst, max_keys=max_addresses, clock=clock)

    def check(self, address: str) -> None:
        """429 when ``address`` has used up its failures; call before looking at its key."""
        wait = self.buckets.wait_s(address)
        if wait > 0:
            raise ServiceError(429, "too_many_failed_keys",
                               "too many refused API keys from this address; retry later",
                               headers=_retry_after(wait))

    def failed(self, address: str) -> None:
        self.buckets.take(address)


class TenantRateLimit:
    """At most ``per_second`` requests per tenant on average, ``burst`` at once (429 past it)."""

    def __init__(self, per_second: float, *, burst: int | None = None, max_tenants: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        burst = burst if burst is not None else max(1, math.ceil(per_second * 2))
        self.buckets = TokenBuckets(per_second, burst, max_keys=max_tenants, clock=clock)

    def check(self, tenant: str) -> None:
        wait = self.buckets.take(tenant)
        if wait > 0:
            headers = _retry_after(wait)
            raise ServiceError(429, "rate_limited",
                               f"this tenant's request rate is limited to {self.buckets.rate:g} per second; "
                               f"retry after {headers['Retry-After']} s", headers=headers)
