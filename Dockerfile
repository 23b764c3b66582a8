# The ParallelJob image: one entry point, `paralleljob`, that runs the operator by default (CMD) and the GPU
# health agent when given `agent ...` as arguments (the agent DaemonSet does that), so both share one image.
#
#   docker build -t paralleljob:dev .
#
# Stage 1 builds the project's wheel and the wheels of everything it needs; stage 2 installs them with no
# compiler, no build tools and no network, and runs as a fixed non-root UID on a read-only root filesystem.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# Only what the wheel is made of: the package and its metadata (see .dockerignore).
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels "$(ls /wheels/paralleljob-*.whl)[k8s,agent]"

FROM ${PYTHON_IMAGE}
# A fixed UID/GID (not 0, not a name) so `runAsNonRoot` can be verified by the kubelet and file ownership
# on volumes is predictable; 65532 is the conventional "nonroot" id of distroless images.
RUN groupadd --system --gid 65532 paralleljob \
 && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin paralleljob
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --disable-pip-version-check --no-index --find-links /wheels "paralleljob[k8s,agent]" \
 && rm -rf /wheels
# Read-only root filesystem: Python must not try to write bytecode next to the sources (pip compiled it at
# install time), and every library that wants a home or a cache gets /tmp (an emptyDir in the chart).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    XDG_CONFIG_HOME=/tmp/.config \
    TMPDIR=/tmp
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["paralleljob"]
CMD ["operator"]
