"""Tracing on/off from the OTEL_* variables, metrics ports, the trace subjects, log lines."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from jidocode.shared import subjects
from jidocode.shared.telemetry import JsonFormatter, config_from_env, log_format, log_scope
from jidocode.shared.telemetry.metrics import metrics_port


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, None),
        ({"OTEL_TRACES_EXPORTER": "jido", "OTEL_SDK_DISABLED": "TRUE"}, None),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        ({"OTEL_TRACES_EXPORTER": "jido"}, ("jido",)),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "otlp,otlp", "OTEL_SDK_DISABLED": "false"}, ("otlp",)),
    ],
)
def test_tracing_is_on_only_when_the_variables_say_so(env: dict[str, str], expected: object) -> None:
    assert config_from_env(env) == expected


def test_an_unknown_exporter_is_named() -> None:
    with pytest.raises(ValueError, match=r"'zipkin'.*otlp, console, jido"):
        config_from_env({"OTEL_TRACES_EXPORTER": "otlp,zipkin"})


@pytest.mark.parametrize(
    ("env", "service", "port"),
    [
        ({}, "engine", None),
        ({"JIDO_METRICS_PORT": "9464"}, "engine", 9464),
        ({"JIDO_METRICS_PORT": "9464"}, "conversation", 9466),
        ({"JIDO_METRICS_PORT": "9464"}, "asset_loader", 9468),
        ({"JIDO_METRICS_PORT": "9464"}, "gateway", 9469),
        ({"JIDO_METRICS_PORT": "9464", "JIDO_METRICS_PORT_TOOL_RUNNER": "9999"}, "tool_runner", 9999),
        ({"JIDO_METRICS_PORT_PROJECT": "0"}, "project", 0),
        ({"JIDO_METRICS_PORT": " "}, "project", None),
    ],
)
def test_metrics_ports_never_collide_between_services(
    env: dict[str, str], service: str, port: int | None
) -> None:
    assert metrics_port(service, env) == port


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JIDO_METRICS_PORT": "http"}, "JIDO_METRICS_PORT='http' is not a port number"),
        ({"JIDO_METRICS_PORT": "65535"}, "adds 2 to it"),
        ({"JIDO_METRICS_PORT": "0"}, "adds 2 to it"),
        (
            {"JIDO_METRICS_PORT_CONVERSATION": "70000"},
            "JIDO_METRICS_PORT_CONVERSATION='70000' is out of range",
        ),
    ],
)
def test_a_bad_metrics_port_is_refused_by_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        metrics_port("conversation", env)


def test_an_unknown_service_has_no_metrics_port() -> None:
    with pytest.raises(ValueError, match="unknown service 'gatewayy'"):
        metrics_port("gatewayy", {"JIDO_METRICS_PORT": "9464"})


T = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        (subjects.trace("P1", "c1", T), f"jido.trace.P1.c1.{T}"),
        (subjects.trace(None, None, T), f"jido.trace._._.{T}"),
        (subjects.trace("P1", None, T), f"jido.trace.P1._.{T}"),
        (subjects.trace_filter("P1", "c1"), "jido.trace.P1.c1.*"),
        (subjects.trace_filter(trace_id=T), f"jido.trace.*.*.{T}"),
        (subjects.trace_filter(), "jido.trace.*.*.*"),
    ],
)
def test_trace_subjects(built: str, expected: str) -> None:
    assert built == expected


@pytest.mark.parametrize("bad", ["", "0" * 32, T.upper(), T[:-1], T + "0", "x" * 32, "a.b"])
def test_bad_trace_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="trace id"):
        subjects.trace("P1", "c1", bad)


def test_json_log_lines_carry_the_scope() -> None:
    record = logging.LogRecord("jidocode.x", logging.WARNING, __file__, 1, "hello %s", ("there",), None)
    with log_scope("P1", "c1"):
        line = JsonFormatter().format(record)
    out = json.loads(line)
    assert out["message"] == "hello there" and out["level"] == "WARNING" and out["logger"] == "jidocode.x"
    assert (out["project_id"], out["conversation_id"]) == ("P1", "c1")
    assert "trace_id" not in out  # tracing is off here
    outside = json.loads(JsonFormatter().format(record))
    assert "project_id" not in outside


def test_log_format_follows_the_terminal_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JIDO_LOG_FORMAT", raising=False)
    assert log_format(io.StringIO()) == "json"
    monkeypatch.setenv("JIDO_LOG_FORMAT", "text")
    assert log_format(io.StringIO()) == "text"
    monkeypatch.setenv("JIDO_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="JIDO_LOG_FORMAT='yaml': expected json or text"):
        log_format(io.StringIO())


def test_setup_reads_the_environment_once() -> None:
    from jidocode.shared import telemetry

    telemetry.reset()
    try:
        assert telemetry.setup_from_env({"OTEL_TRACES_EXPORTER": "jido"}) is True
        assert telemetry.enabled() and telemetry.tracer("engine") is not None
        # decided: a later call with other variables changes nothing
        assert telemetry.setup_from_env({"OTEL_SDK_DISABLED": "true"}) is True
    finally:
        telemetry.reset()
    assert telemetry.setup_from_env({}) is False and telemetry.tracer("engine") is None
    telemetry.reset()
