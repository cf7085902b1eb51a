"""The NATS protocol subjects a user may be granted: JetStream streams and KV buckets.

Pure: the JetStream API (``$JS.API.…``, ``$JS.ACK.…``, ``$JS.FC.…``) and KV
(``$KV.<bucket>.>``) subjects that read, create or destroy one stream or bucket,
for :mod:`jidocode.shared.nats_permissions`'s users.
"""

from __future__ import annotations

from jidocode.shared import subjects

# JetStream and protocol subject roots (NATS's own names, not ours).
JS_API = "$JS.API"
JS_ACK = "$JS.ACK"
JS_FC = "$JS.FC"
KV = "$KV"
SRV = "$SRV"


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


def stream_read(stream: str) -> tuple[str, ...]:
    """Inspect a stream, read it through consumers, and ack what was read."""
    return (
        f"{JS_API}.STREAM.INFO.{stream}",
        f"{JS_API}.STREAM.MSG.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}.>",
        f"{JS_API}.CONSUMER.CREATE.{stream}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.>",
        f"{JS_API}.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"{JS_API}.CONSUMER.INFO.{stream}.>",
        f"{JS_API}.CONSUMER.DELETE.{stream}.>",
        f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.>",
        f"{JS_API}.CONSUMER.LIST.{stream}",
        f"{JS_API}.CONSUMER.NAMES.{stream}",
        f"{JS_ACK}.{stream}.>",
        f"{JS_FC}.{stream}.>",
    )


def stream_create(stream: str) -> tuple[str, ...]:
    """Create (idempotent with the same config) or update a stream."""
    return (f"{JS_API}.STREAM.CREATE.{stream}", f"{JS_API}.STREAM.UPDATE.{stream}")


def stream_admin(stream: str) -> tuple[str, ...]:
    """Destructive operations: only a stream's owner gets them."""
    return (
        f"{JS_API}.STREAM.DELETE.{stream}",
        f"{JS_API}.STREAM.PURGE.{stream}",
        f"{JS_API}.STREAM.MSG.DELETE.{stream}",
    )


def kv_read(bucket: str) -> tuple[str, ...]:
    # Binding a bucket may create it (same config, idempotent), so a reader that starts
    # before the owner still works; it never gets UPDATE, DELETE or PURGE.
    stream = kv_stream(bucket)
    return (*stream_read(stream), f"{JS_API}.STREAM.CREATE.{stream}")


def kv_write(bucket: str) -> tuple[str, ...]:
    stream = kv_stream(bucket)
    return (*stream_read(stream), *stream_create(stream), *stream_admin(stream), f"{KV}.{bucket}.>")


# The LLM token ledger's bucket (owned by the conversation service); subjects may not name it yet.
BUCKET_LEDGER: str = getattr(subjects, "BUCKET_LEDGER", "jido_llm_ledger")

JS_COMMON = (f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES")
JS_DESTRUCTIVE_ANY = (
    f"{JS_API}.STREAM.DELETE.>",
    f"{JS_API}.STREAM.PURGE.>",
    f"{JS_API}.STREAM.MSG.DELETE.>",
)


def private_bucket(bucket: str) -> tuple[str, ...]:
    """Every JetStream/KV subject that reads or changes ``bucket``: denied to all but its owner."""
    stream = kv_stream(bucket)
    return (*stream_read(stream), *stream_create(stream), *stream_admin(stream), f"{KV}.{bucket}.>")


#: The tool runner's quota leases (services/tool_runner/quota_leases.py); subjects may not name it yet.
BUCKET_TOOL_QUOTAS: str = subjects.BUCKET_TOOL_QUOTAS

#: Stored tool results (and their claims) are the tool runner's alone; so are its quota leases
#: (anybody else could fill a project's slots, or free them) and the cancel broadcast
#: (it stops a running call: only the runner, after checking the canceller owns the call, sends it).
TOOL_CALLS_PRIVATE = (
    *private_bucket(subjects.BUCKET_TOOL_CALLS),
    *private_bucket(BUCKET_TOOL_QUOTAS),
    subjects.signal("tool.cancel_requested"),
)
