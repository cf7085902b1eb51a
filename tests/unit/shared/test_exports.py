"""Pin the public surface of the shared library (add deliberately, remove never silently)."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "bus",
    "clients",
    "config",
    "cost",
    "endpoints",
    "envelope",
    "errors",
    "events",
    "lease",
    "ledger",
    "log_limits",
    "policy",
    "prd_stream",
    "registry",
    "runner",
    "service",
    "subjects",
    "tools",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_exists_without_duplicates(name: str) -> None:
    module = importlib.import_module(f"jidocode.shared.{name}")
    exported = module.__all__
    assert len(set(exported)) == len(exported)  # order is ruff's job (RUF022)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol}"


SURFACES = {
    "bus": {
        "Bus",
        "EnvelopeHandler",
        "connect_nats",
        "describe_error",
        "error_payload",
        "foreign_listener",
        "gather",
        "subject_of",
        "unreachable_message",
    },
    "clients": {
        "AssetsClient",
        "ConversationsClient",
        "EngineClient",
        "PrdClient",
        "ProjectClient",
        "ToolsClient",
    },
    "cost": {"MAX_DECIMALS", "cost_text", "total_cost", "usd"},
    "endpoints": {"ENDPOINTS", "Endpoint", "Scope", "endpoint", "endpoints_of"},
    "events": {
        "ALL_EVENTS",
        "COMMANDS",
        "ERROR_TYPE",
        "EVENT_TYPES",
        "AnyEvent",
        "Command",
        "EventModel",
        "R",
        "event_class",
        "parse_event",
    },
    "ledger": {
        "BUCKET_LEDGER",
        "LedgerReader",
        "combine",
        "ledger_key",
        "subagent_key",
        "with_subagents_usage",
    },
    "log_limits": {"BURST", "MAX_KINDS", "WINDOW_S", "RepeatLimiter", "install_repeat_limiter"},
    "prd_stream": {"RESUME_MARGIN", "start_sequence"},
    "registry": {"ROOT_PREFIX", "ProjectDirectory", "WatchedDirectory", "root_key"},
    "lease": {
        "BUS_ERRORS",
        "Busy",
        "Held",
        "KeptLease",
        "LeaseBucket",
        "Lost",
        "Seen",
        "Sightings",
        "Take",
        "after_write",
        "decide_take",
        "encode_holder",
        "holder_of",
        "is_stale",
    },
    "runner": {
        "HOST_CWD",
        "SPARE_ENV",
        "Serve",
        "configure_logging",
        "die_with_parent",
        "python_module_argv",
        "run_service",
        "tune_gc",
        "wait_to_serve",
    },
    "service": {
        "Handler",
        "ProjectHandler",
        "ServiceHost",
        "ServiceLifecycle",
        "expect",
        "scoped_project_id",
        "to_jsonable",
    },
    "tools": {
        "BUILTIN_SPECS",
        "BashInput",
        "BuiltinSpec",
        "EditFileInput",
        "GlobInput",
        "GrepInput",
        "ListDirInput",
        "ReadFileInput",
        "ToolInput",
        "WriteFileInput",
        "builtin_specs",
    },
}


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_surface(name: str) -> None:
    module = importlib.import_module(f"jidocode.shared.{name}")
    assert set(module.__all__) == SURFACES[name]


def test_the_generic_reply_is_gone() -> None:
    from jidocode.shared import bus, events, service

    assert not hasattr(events, "Reply") and not hasattr(service, "REPLY_TYPE")
    assert not hasattr(bus.Bus, "request") and not hasattr(service.ServiceHost, "add_endpoint")
