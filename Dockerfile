# localgate's container image: `docker build -t localgate .` (docs/deploy.md).
# BuildKit (Docker's default builder since 23.0) with its built-in Dockerfile frontend: no
# `# syntax=` line, so no frontend image is pulled and it builds where Docker Hub is not
# reachable (with PYTHON_IMAGE from a registry that is).
#
# Two stages: the first builds wheels of localgate (its detection core compiled) and of its
# runtime dependencies only (no extras: neither the dev tools nor the
# semantic embedder's torch); the second installs them offline into a slim Python and runs
# as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# A C compiler for the compiled detection core (setup.py: mypyc), in this stage only: the
# runtime stage installs the built wheel.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml setup.py README.md ./
COPY src ./src
# Behind a TLS-inspecting proxy or with a private index, pip's configuration and the CA
# bundle come in as build secrets, never stored in a layer (docs/deploy.md, "The image"):
#   --secret id=pip.conf,src=pip.conf --secret id=ca-bundle,src=/path/to/ca-bundle.crt
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="localgate" \
      org.opencontainers.image.description="Self-hosted Gemini gateway that keeps personal data inside the company" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LOCALGATE_CONFIG=/etc/localgate/localgate.yaml \
    LOCALGATE_DATA_DIR=/var/lib/localgate
# A fixed uid/gid, so that volumes and Kubernetes' runAsUser/fsGroup can name it.
RUN groupadd --system --gid 10001 localgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /var/lib/localgate --shell /usr/sbin/nologin localgate
# Mounted on /mnt, which exists: a new mount point would stay behind as an empty folder.
RUN --mount=type=bind,from=build,source=/wheels,target=/mnt \
    pip install --no-index --find-links=/mnt /mnt/localgate-*.whl
# /etc/localgate/keys: where key files are mounted (or written by `localgate audit keygen`);
# owner-only, as the gateway refuses key files others can read.
RUN mkdir -p /etc/localgate/keys /var/lib/localgate \
    && chown localgate:localgate /etc/localgate/keys /var/lib/localgate \
    && chmod 0700 /etc/localgate/keys /var/lib/localgate
COPY --chown=root:root --chmod=0644 deploy/docker/localgate.yaml /etc/localgate/localgate.yaml
VOLUME ["/etc/localgate", "/var/lib/localgate"]
USER 10001:10001
WORKDIR /var/lib/localgate
EXPOSE 8080
# /healthz: the process answers (readiness, /readyz, is for load balancers and Kubernetes).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["localgate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
