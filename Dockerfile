# gpufair: one image for the three services (`runtime`, the default target) and
# a `trainer` target that adds torch for the sample training job.
#
#   docker build -t gpufair:0.1.0 .
#   docker build --target trainer -t gpufair-trainer:0.1.0 .
#
# The base image is pinned by tag. Pin it by digest as well in your registry
# (PYTHON_IMAGE=python:3.11.7-slim-bookworm@sha256:...): no digest is written
# here because none could be verified from this repository's build machines.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# ---- builder: every service dependency in a venv, then gpufair itself --------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
# Requirements first: the dependency layer survives source-only changes.
COPY requirements.txt ./
RUN pip install -r requirements.txt
COPY pyproject.toml setup.py README.md ./
COPY gpufair ./gpufair
COPY client ./client
COPY services ./services
RUN pip install --no-deps . && python -c "import gpufair.metrics, gpufair.scheduler, gpufair.cache, gpufair.client"

# ---- builder-train: + torch (trainers only) ----------------------------------
FROM builder AS builder-train
# PyPI's torch for Linux is the CUDA build (right for GPU nodes). For a small
# CPU-only image pass PyTorch's CPU wheel index: --build-arg PIP_EXTRA_INDEX_URL=...
ARG PIP_EXTRA_INDEX_URL=""
COPY requirements-train.txt ./
RUN pip install -r requirements-train.txt

# ---- base: what both final images share --------------------------------------
FROM ${PYTHON_IMAGE} AS base
# uid/gid 10001: a fixed non-root id that Kubernetes' runAsUser and the cache
# directory's ownership can name. /var/cache/gpufair is the only write target
# besides /tmp, so the root filesystem can be mounted read-only.
RUN groupadd --system --gid 10001 gpufair \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin gpufair \
 && install -d -o 10001 -g 10001 -m 0750 /var/cache/gpufair
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
COPY deploy/docker/entrypoint.py deploy/docker/health_probe.py /opt/gpufair/
WORKDIR /tmp
ENTRYPOINT ["python", "/opt/gpufair/entrypoint.py"]

# ---- trainer: the sample DDP job (torchrun) -----------------------------------
FROM base AS trainer
COPY --from=builder-train /opt/venv /opt/venv
COPY examples /opt/gpufair/examples
USER 10001:10001
CMD ["torchrun", "--nproc-per-node", "2", "/opt/gpufair/examples/train_ddp.py", "--job", "sample"]

# ---- runtime (default): the services ------------------------------------------
FROM base AS runtime
COPY --from=builder /opt/venv /opt/venv
USER 10001:10001
# gRPC: metrics 50051, scheduler 50052, cache 50053; Prometheus scrape 9464.
EXPOSE 50051 50052 50053 9464
CMD ["help"]
