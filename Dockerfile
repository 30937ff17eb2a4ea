# syntax=docker/dockerfile:1
# The agentpool operator image. The example agents ship in it as well, so the example pools can
# run them from this image with a command such as
#   python -m agentpool.agent /opt/agentpool/examples/agents/echo.py:agent
#
# Build: docker build -t agentpool:0.1.0 .
# Without a registry, hack/image/build.sh builds it with podman on a base made from Debian's
# packages, passed as BASE_IMAGE.

# Any Debian bookworm with Python 3.11 and its venv module: the official image by default.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

# The builder turns the sources into a wheel; nothing from this stage but the wheel is kept.
# pip reaches the package index as pip.conf says; hack/image/build.sh passes the machine's pip
# settings (and its CA bundle) as build secrets, which are mounted for one step and never stored.
FROM ${BASE_IMAGE} AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=pip-cert \
    --mount=type=secret,id=pip-client-cert \
    python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE_IMAGE}
# The operator lives in a virtual environment of its own, the same on either base: the official
# image's Python in /usr/local and Debian's in /usr, whose pip installs nothing system-wide.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
# A fixed numeric user, so the chart's runAsUser and runAsNonRoot hold without looking up names.
RUN groupadd --system --gid 10001 agentpool \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin agentpool
# The wheel is mounted rather than copied, so it never becomes a layer of the final image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=pip-cert \
    --mount=type=secret,id=pip-client-cert \
    python3 -m venv /opt/venv \
    && pip install --no-cache-dir /wheels/*.whl
COPY examples/ /opt/agentpool/examples/
WORKDIR /opt/agentpool
USER 10001:10001
# kopf's liveness endpoint and the Prometheus metrics, as the chart configures them.
EXPOSE 8080 9090
ENTRYPOINT ["agentpool"]
CMD ["run"]
