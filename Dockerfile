# syntax=docker/dockerfile:1
# The agentpool operator image. The example agents ship in it as well, so the example pools can
# run them from this image with a command such as
#   python -m agentpool.agent /opt/agentpool/examples/agents/echo.py:agent
#
# Build: docker build -t agentpool:0.1.0 .

# The builder turns the sources into a wheel; nothing from this stage but the wheel is kept.
FROM python:3.11.14-slim-bookworm AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11.14-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A fixed numeric user, so the chart's runAsUser and runAsNonRoot hold without looking up names.
RUN groupadd --system --gid 10001 agentpool \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin agentpool
# The wheel is mounted rather than copied, so it never becomes a layer of the final image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/*.whl
COPY examples/ /opt/agentpool/examples/
WORKDIR /opt/agentpool
USER 10001:10001
# kopf's liveness endpoint and the Prometheus metrics, as the chart configures them.
EXPOSE 8080 9090
ENTRYPOINT ["agentpool"]
CMD ["run"]
