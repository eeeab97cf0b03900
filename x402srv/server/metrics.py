"""Counters and a latency histogram, exported as Prometheus text at ``[metrics] path``.

Off by default. The pipeline, the token guards and the error handler call the
process's ``Metrics`` object; the default one does nothing, so a seller who
does not turn metrics on pays a method call per event and needs no
``prometheus-client``.

Several workers: the ``x402srv`` command points ``PROMETHEUS_MULTIPROC_DIR`` at
a fresh directory before it starts them, each worker writes its samples there,
and whichever worker answers ``/metrics`` adds them all up.

    x402srv_challenges_created_total
    x402srv_settlements_total{strategy, outcome}      outcome: settled | rejected | unknown
    x402srv_settlement_seconds{strategy}              histogram, settler call only
    x402srv_grants_issued_total
    x402srv_token_rejections_total{code}              INVALID_TOKEN, TOKEN_EXPIRED, ...
    x402srv_store_errors_total
    x402srv_settler_state{network, settler}           0 closed, 1 half-open, 2 open: the
                                                      breaker of each failover settler (the
                                                      worst worker's, with several workers)
    x402srv_settler_failovers_total{network, settler} payments it could not settle, passed
                                                      on to the next settler
    x402srv_credits_added_total{plan}                 calls credited by purchases and top-ups
    x402srv_credits_spent_total{plan}                 credits metered calls spent (refunds aside)
    x402srv_credits_refunded_total{plan}              credits given back (the upstream's 5xx)
    x402srv_metered_refusals_total{plan, reason}      reason: no-credits | throttled
    x402srv_mcp_tool_calls_total{tool, outcome}       tools/call through an [[mcp]] path;
                                                      outcome: ok | tool_error | upstream_error |
                                                      abandoned (the buyer left before the
                                                      answer) | payment_required |
                                                      payment_refused | credits_exhausted |
                                                      refused
    x402srv_refunds_total{reason, outcome}            refunds that ended (docs/refunds.md);
                                                      reason: operator | auto:<rule>;
                                                      outcome: refunded | failed
"""

from __future__ import annotations

import os
from typing import Any

from x402srv.errors import ConfigError

__all__ = ["Metrics", "PrometheusMetrics", "current", "install"]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: ``x402srv_settler_state`` values.
BREAKER_STATES = {"closed": 0, "half-open": 1, "open": 2}


class Metrics:
    """Does nothing: what runs when metrics are off (and outside x402srv's own server)."""

    def challenge_created(self) -> None:
        return None

    def settlement(self, strategy: str, outcome: str, seconds: float) -> None:
        return None

    def grant_issued(self) -> None:
        return None

    def token_rejected(self, code: str) -> None:
        return None

    def store_error(self) -> None:
        return None

    def settler_state(self, network: str, settler: str, state: str) -> None:
        return None

    def failover(self, network: str, settler: str) -> None:
        return None

    def credits_added(self, plan: str, amount: int) -> None:
        return None

    def credits_spent(self, plan: str, amount: int) -> None:
        return None

    def credits_refunded(self, plan: str, amount: int) -> None:
        return None

    def metered_refusal(self, plan: str, reason: str) -> None:
        return None

    def tool_call(self, tool: str, outcome: str) -> None:
        return None

    def refund(self, reason: str, outcome: str) -> None:
        return None

    def exposition(self) -> tuple[bytes, str]:
        raise RuntimeError("metrics are off")


class PrometheusMetrics(Metrics):
    def __init__(self) -> None:
        try:
            import prometheus_client
        except ImportError:
            raise ConfigError(
                "needs prometheus-client: pip install 'x402srv[metrics]'", path="metrics.enabled"
            ) from None
        self._prometheus = prometheus_client
        self._registry = prometheus_client.CollectorRegistry()
        registry = self._registry
        self._challenges = prometheus_client.Counter(
            "x402srv_challenges_created", "Challenges created (PENDING)", registry=registry
        )
        self._settlements = prometheus_client.Counter(
            "x402srv_settlements",
            "Settlement attempts by strategy and outcome",
            ["strategy", "outcome"],
            registry=registry,
        )
        self._latency = prometheus_client.Histogram(
            "x402srv_settlement_seconds",
            "Time spent in the settler per attempt",
            ["strategy"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._grants = prometheus_client.Counter(
            "x402srv_grants_issued", "Access grants issued (PAID -> DELIVERED)", registry=registry
        )
        self._rejections = prometheus_client.Counter(
            "x402srv_token_rejections",
            "Bearer tokens refused by a guard, by problem code",
            ["code"],
            registry=registry,
        )
        self._store_errors = prometheus_client.Counter(
            "x402srv_store_errors",
            "Requests answered 503 because the store failed",
            registry=registry,
        )
        self._settler_state = prometheus_client.Gauge(
            "x402srv_settler_state",
            "Circuit breaker of a failover settler: 0 closed, 1 half-open, 2 open",
            ["network", "settler"],
            registry=registry,
            multiprocess_mode="livemax",  # per worker: show the worst live one
        )
        self._failovers = prometheus_client.Counter(
            "x402srv_settler_failovers",
            "Payments a settler could not settle, passed on to the next settler",
            ["network", "settler"],
            registry=registry,
        )
        self._credits = {
            kind: prometheus_client.Counter(
                f"x402srv_credits_{kind}", text, ["plan"], registry=registry
            )
            for kind, text in (
                ("added", "Calls credited to grants by purchases and top-ups"),
                ("spent", "Credits spent by metered calls"),
                ("refunded", "Credits given back after the upstream failed"),
            )
        }
        self._refusals = prometheus_client.Counter(
            "x402srv_metered_refusals",
            "Metered calls refused, by plan and reason (no-credits, throttled)",
            ["plan", "reason"],
            registry=registry,
        )
        self._tool_calls = prometheus_client.Counter(
            "x402srv_mcp_tool_calls",
            "tools/call through an [[mcp]] path, by tool and outcome",
            ["tool", "outcome"],
            registry=registry,
        )
        self._refunds = prometheus_client.Counter(
            "x402srv_refunds",
            "Refunds that ended, by who asked (operator, auto:<rule>) and outcome",
            ["reason", "outcome"],
            registry=registry,
        )

    def challenge_created(self) -> None:
        self._challenges.inc()

    def settlement(self, strategy: str, outcome: str, seconds: float) -> None:
        self._settlements.labels(strategy, outcome).inc()
        self._latency.labels(strategy).observe(seconds)

    def grant_issued(self) -> None:
        self._grants.inc()

    def token_rejected(self, code: str) -> None:
        self._rejections.labels(code).inc()

    def store_error(self) -> None:
        self._store_errors.inc()

    def settler_state(self, network: str, settler: str, state: str) -> None:
        self._settler_state.labels(network, settler).set(BREAKER_STATES.get(state, 2))

    def failover(self, network: str, settler: str) -> None:
        self._failovers.labels(network, settler).inc()

    def credits_added(self, plan: str, amount: int) -> None:
        self._credits["added"].labels(plan).inc(amount)

    def credits_spent(self, plan: str, amount: int) -> None:
        self._credits["spent"].labels(plan).inc(amount)

    def credits_refunded(self, plan: str, amount: int) -> None:
        self._credits["refunded"].labels(plan).inc(amount)

    def metered_refusal(self, plan: str, reason: str) -> None:
        self._refusals.labels(plan, reason).inc()

    def tool_call(self, tool: str, outcome: str) -> None:
        self._tool_calls.labels(tool, outcome).inc()

    def refund(self, reason: str, outcome: str) -> None:
        self._refunds.labels(reason, outcome).inc()

    def exposition(self) -> tuple[bytes, str]:
        prometheus = self._prometheus
        registry: Any = self._registry
        if os.environ.get(MULTIPROCESS_ENV):
            from prometheus_client import multiprocess

            registry = prometheus.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return prometheus.generate_latest(registry), prometheus.CONTENT_TYPE_LATEST


_current: Metrics = Metrics()


def current() -> Metrics:
    return _current


def install(metrics: Metrics) -> None:
    """Make ``metrics`` the process's sink (the guards find it here)."""
    global _current
    _current = metrics
