"""Faults on demand: ``--faults "throttle=2,partial=3,fraction=0.5,rate=0.05,invoke_errors=0.1"``.

Two kinds, because moto produces neither:

* **write faults** on the DynamoDB ``BatchWriteItem`` calls of the in-process
  handlers: throttling errors and ``UnprocessedItems``, through
  :class:`adapters.faults.FaultPlan` (keys ``throttle``, ``rate``, ``code``,
  ``partial``, ``partial_rate``, ``fraction``, ``latency``, ``seed``; see its
  docstring);
* **invocation errors** (``invoke_errors=<fraction>``): that fraction of
  invocations fails after the handler ran, so the event source mapping retries
  and bisects, and redelivery has to be harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.faults import FaultPlan

_INVOKE_KEYS = ("invoke_errors", "errors")


@dataclass(frozen=True, slots=True)
class LocalFaults:
    writes: FaultPlan | None = None
    invocation_error_fraction: float = 0.0
    seed: int | None = None

    @classmethod
    def parse(cls, spec: str) -> LocalFaults:
        """Parse a ``key=value,...`` spec; raise ValueError naming the part that is wrong."""
        fraction = 0.0
        rest: list[str] = []
        seed: int | None = None
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if key in _INVOKE_KEYS and sep:
                try:
                    fraction = float(raw)
                except ValueError:
                    raise ValueError(f"fault spec {part!r}: {raw!r} is not a number") from None
                if not 0.0 <= fraction <= 1.0:
                    raise ValueError(f"fault spec {part!r}: the fraction of invocations must lie in 0..1")
                continue
            if key == "seed" and sep:
                try:
                    seed = int(raw)
                except ValueError:
                    raise ValueError(f"fault spec {part!r}: {raw!r} is not a whole number") from None
            rest.append(part)
        plan = FaultPlan.parse(",".join(rest)) if rest else None
        if plan is not None and plan == FaultPlan(seed=plan.seed):
            plan = None  # only a seed: no write faults
        return cls(writes=plan, invocation_error_fraction=fraction, seed=seed)

    @property
    def active(self) -> bool:
        return self.writes is not None or self.invocation_error_fraction > 0

    def describe(self) -> str:
        parts = []
        if self.writes is not None:
            w = self.writes
            if w.throttle_first or w.throttle_rate:
                parts.append(f"BatchWriteItem throttled: first {w.throttle_first} call(s), then {w.throttle_rate:.0%}")
            if w.partial_first or w.partial_rate:
                parts.append(
                    f"UnprocessedItems ({w.partial_fraction:.0%} of a call): first {w.partial_first} call(s), "
                    f"then {w.partial_rate:.0%}"
                )
            if w.latency_ms:
                parts.append(f"{w.latency_ms:g} ms added to every BatchWriteItem")
        if self.invocation_error_fraction:
            parts.append(f"{self.invocation_error_fraction:.0%} of invocations fail")
        return "; ".join(parts) or "none"
