"""ADK's OpenTelemetry work on a model call, skipped when nothing would record it.

ADK 2.13 builds its inference telemetry on every model call whether or not anything records it:
the `generate_content` span's attributes, the semconv "operation details" (every message of the
request and the tool declarations converted to OTel values: `_experimental_semconv._to_any_value`,
~270 calls a turn), the log records, and the client metrics. With no TracerProvider,
MeterProvider or LoggerProvider set, the span is a NonRecordingSpan and the records and metrics go
to OTel's no-op proxies: with the offline model, ~3,900 Python calls and 7 M of a turn's 39 M
instructions (callgrind, 0-event turns on a Daemon) that produce nothing. ADK has no switch for it
(its `TelemetryConfig` and ADK_* variables choose what is recorded, never whether; OTEL_SDK_DISABLED
is read only by the SDK's providers, which are not set here).

ADK has a path of its own where it records no inference span: when the google-genai instrumentor
records the call instead, `tracing.use_inference_span` yields None, and everything downstream
(`trace_inference_result`, the completion log, the client metrics in
`_instrumentation.record_inference_telemetry`) returns at its `span is None` check. `apply()` takes
that path when nothing records: it replaces `use_inference_span`, which ADK calls through its
module (`tracing.use_inference_span(...)`), with a version that yields None at once. The agent,
tool, workflow and invocation spans stay as they are (non-recording, and cheap).

The decision is made when the engine is built (`apply()`, from runner.Engine), not per call:
OpenTelemetry is configured at start-up, before the engine (`opentelemetry-instrument`, the OTEL_*
variables, a provider set in code, ADK's own `maybe_set_otel_providers`), so a check per model
call would only cost time. A provider set after that is seen by the next engine built. Any OTEL_*
variable, or any provider that is not OTel's default proxy or a no-op one, leaves ADK stock.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

from google.adk.telemetry import tracing
from opentelemetry import _logs, metrics, trace
from opentelemetry._logs import NoOpLoggerProvider
from opentelemetry._logs._internal import ProxyLoggerProvider
from opentelemetry.metrics._internal import _ProxyMeterProvider

# ADK's function, kept to put back when something records.
STOCK_USE_INFERENCE_SPAN: Final = tracing.use_inference_span

# Its parameters in ADK 2.13; a version whose function differs is left stock (and the pin test,
# tests/unit/engine/test_telemetry.py, fails, so an upgrade cannot silently change what we replace).
USE_INFERENCE_SPAN_PARAMS: Final = ("llm_request", "invocation_context", "model_response_event")

# Providers that record nothing: OTel's defaults before anything is set, and its no-op ones.
_SILENT_PROVIDERS: Final = (
    trace.ProxyTracerProvider, trace.NoOpTracerProvider,
    _ProxyMeterProvider, metrics.NoOpMeterProvider,
    ProxyLoggerProvider, NoOpLoggerProvider,
)


def otel_configured() -> bool:
    """Whether anything may record ADK's telemetry: an OTEL_* variable, or a tracer, meter or
    logger provider other than OTel's silent defaults."""
    if any(name.startswith("OTEL_") for name in os.environ):
        return True
    providers = (trace.get_tracer_provider(), metrics.get_meter_provider(), _logs.get_logger_provider())
    return not all(isinstance(p, _SILENT_PROVIDERS) for p in providers)


def _params(fn: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


ADK_MATCHES: Final = _params(STOCK_USE_INFERENCE_SPAN) == USE_INFERENCE_SPAN_PARAMS


@asynccontextmanager
async def _no_inference_span(
    llm_request: Any, invocation_context: Any, model_response_event: Any
) -> AsyncIterator[None]:
    """`tracing.use_inference_span` when nothing records: no span, as when the google-genai
    instrumentor records the call (the stock function's `else` branch, minus the OTel context
    values that only that instrumentor reads)."""
    if invocation_context.agent is None:  # the stock function's one check, kept
        raise ValueError("The invocation context must have an agent.")
    yield None


def quiet() -> bool:
    """Whether ADK's inference telemetry is skipped now (see the module's docstring)."""
    return tracing.use_inference_span is not STOCK_USE_INFERENCE_SPAN


def apply() -> bool:
    """Skip ADK's inference telemetry if nothing records it, else put ADK's back; say which."""
    skip = ADK_MATCHES and not otel_configured()
    tracing.use_inference_span = _no_inference_span if skip else STOCK_USE_INFERENCE_SPAN
    return skip
