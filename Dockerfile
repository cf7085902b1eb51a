# syntax=docker/dockerfile:1
# One image for every JidoCode service; the command picks the service:
#   docker run IMAGE serve engine | serve project | serve conversation | serve tool_runner | serve asset_loader
# See docs/deploy.md.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- build: a wheel of the project and of its dependencies ---------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md* ./
COPY shared/ shared/
COPY services/ services/
COPY client/ client/
COPY cli/ cli/
RUN pip wheel --wheel-dir /wheels .

# --- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# tini is PID 1: it forwards SIGTERM to jidocode and reaps the processes tools leave behind.
# git and ripgrep are what the built-in tools shell out to; bubblewrap is the OS sandbox of every
# command a tool starts (where the pod forbids user namespaces, Landlock is used: docs/deploy.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini git ripgrep ca-certificates bubblewrap \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels jidocode

RUN groupadd --system --gid 10001 jido \
 && useradd --system --uid 10001 --gid jido --create-home --home-dir /home/jido jido \
 && mkdir -p /projects /home/jido/.jido_code \
 && chown -R jido:jido /projects /home/jido
USER 10001:10001
WORKDIR /home/jido

ENV PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    JIDO_CODE_HOME=/home/jido/.jido_code \
    JIDO_SERVICE=engine \
    NATS_URL=nats://nats-1:4222

# SIGTERM (docker stop, Kubernetes) makes `jidocode serve` stop taking work and drain its
# NATS connection before exiting 0; give it the grace period in compose/k8s (30 s).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["sh", "-c", "exec jidocode probe \"$JIDO_SERVICE\""]

ENTRYPOINT ["tini", "--", "jidocode"]
CMD ["serve", "engine"]
