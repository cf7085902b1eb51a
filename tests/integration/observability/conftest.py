"""One traced system per test module: every service in this process, one turn with two tool calls.

Tracing is installed before any bus connects, with an in-memory exporter and an
OTLP/HTTP exporter pointed at a receiver in this process (:class:`OtlpReceiver`,
a stdlib HTTP server that decodes the protobuf export requests). The metrics
registry is served on a free port and scraped before and after the turn.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import JidoClient
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared import telemetry
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.telemetry import metrics
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

#: Generous: both cores may be busy with other tests.
DEADLINE = 90.0


class OtlpReceiver:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest``."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.received = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.received:
                    receiver.requests.append(request)
                    receiver.received.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self) -> list[tuple[str, Any]]:
        """``(service.name, span)`` of every span received so far."""
        out: list[tuple[str, Any]] = []
        with self.received:
            for request in self.requests:
                for resource_spans in request.resource_spans:
                    attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope in resource_spans.scope_spans:
                        out.extend((attrs.get("service.name", ""), s) for s in scope.spans)
        return out


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The metrics served on ``port``: ``(sample name, sorted labels) -> value``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@dataclass
class Traced:
    config: Config
    bus: Bus
    client: JidoClient
    project: Path
    memory: InMemorySpanExporter
    otlp: OtlpReceiver
    metrics_port: int
    answer: str
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    spans: list[ReadableSpan] = field(default_factory=list)


@pytest.fixture(scope="module")
def _home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("obs")
    home = root / "jido_home"
    home.mkdir()
    project = root / "proj"
    (project / ".jido").mkdir(parents=True)
    (project / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read"]}}))
    (project / "README.md").write_text("hello from the readme\n")
    (project / "NOTES.md").write_text("a note\n")
    trust_project(project, home=home)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JIDO_CODE_HOME", str(home))
        mp.delenv("OTEL_TRACES_EXPORTER", raising=False)
        mp.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        yield home, project


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def traced(_home: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Traced]:
    home, project = _home
    server = await asyncio.to_thread(
        NatsServer(store_dir=tmp_path_factory.mktemp("js"), sync="default").start
    )
    receiver = OtlpReceiver()
    receiver.thread.start()
    memory = InMemorySpanExporter()
    telemetry.install(
        [SimpleSpanProcessor(memory), BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint))]
    )
    port = metrics.serve(0, "127.0.0.1")
    config = Config(nats_url=server.url, jido_home=home, instance="obs")
    stop = asyncio.Event()
    llm_bus = await Bus.connect(config, "conversation-llm")
    from jidocode.services.conversation.service import serve as serve_conversation

    others = tuple(n for n in SERVICES if n != "conversation")
    tasks = [
        asyncio.create_task(serve_many(config, stop, others)),
        asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
    ]
    bus = await Bus.connect(config, "client")
    try:
        async with ScriptedLlm() as llm:
            await wait_for_services(config, SERVICES, timeout=DEADLINE)
            client = await JidoClient.connect(
                project_dir=project,
                bus=bus,
                model="openai/scripted",
                api_base=llm.api_base,
                settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05},
            )
            await client.start_conversation()
            before = await asyncio.to_thread(scrape, port)
            llm.script(
                Reply.tools(call("read_file", path="README.md"), call("read_file", path="NOTES.md")),
                Reply.answer("Both files read.", prompt_tokens=30, completion_tokens=4),
            )
            answer = await client.send_message("read both files", timeout=DEADLINE)
            after = await asyncio.to_thread(scrape, port)
            yield Traced(
                config=config,
                bus=bus,
                client=client,
                project=project,
                memory=memory,
                otlp=receiver,
                metrics_port=port,
                answer=answer,
                before=before,
                after=after,
            )
            await client.close()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLINE)
        await bus.close()
        await llm_bus.close()
        await asyncio.to_thread(telemetry.reset)
        receiver.server.shutdown()
        await asyncio.to_thread(server.stop)
