# syntax=docker/dockerfile:1
# ortserve on CPU: the server, ONNX Runtime 1.29.0 and a health probe on a distroless base,
# run as a non-root user. Dockerfile.cuda is the same build on a CUDA base.
#
#   docker build -t ortserve:cpu .                                # models from a volume at /models
#   docker build --build-arg MODELS=built -t ortserve:cpu-models . # `make models` baked into /models
#   docker run -p 8080:8080 -v "$HOME/.cache/ortserve/models/current/:/models:ro" ortserve:cpu
#     (the Makefile's cache, ~/.cache/ortserve; `current` is the model set `make models` built.
#      Arguments after the image name replace the default `--models /models`; docs/deploy.md.)
#
# Built by the very targets a workstation runs, `make ort build` (and `make models`), so the
# pins and checks in scripts/ hold here too. /cache is the Makefile's cache as a BuildKit cache
# mount: like ~/.cache/ortserve, its stamps make a rebuild skip ONNX Runtime and the tokenizer
# library, so a source edit only recompiles Go. The build needs the npm registry (curl), crates.io
# and the Go module proxy; MODELS=built also PyPI and Debian's archive. The tests build no image
# (they need no Docker engine): deploy/docker_test.go checks that every file it copies and script
# it runs exists and is not in .dockerignore, and docs/deploy.md says what was run.

# Debian 12 (glibc 2.36) for the build, and a Debian 12 runtime.
ARG RUST_IMAGE=rust:1.95-bookworm
ARG GO_IMAGE=golang:1.26.8-bookworm
# distroless/cc: glibc, libgcc_s and libstdc++, which the server and libonnxruntime need; no
# shell. :nonroot runs as uid 65532.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# none: /models is empty, mount a model repository there; built: run `make models` (a 550 MB
# Python venv without torch in the build stage, about 4 min) and bake its repository into /models.
ARG MODELS=none
# The Makefile's ORT_VERSION: where `make ort` puts the library in the cache (a test checks).
ARG ORT_VERSION=1.29.0

FROM ${GO_IMAGE} AS go

FROM ${RUST_IMAGE} AS build
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:/root/go/bin:$PATH \
    GOTOOLCHAIN=local \
    CGO_ENABLED=1
WORKDIR /src
COPY . .
ARG VERSION=dev
ARG ORT_VERSION
RUN --mount=type=cache,id=ortserve-cache,target=/cache \
    --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=cache,target=/usr/local/cargo/registry \
    make ort build CACHE=/cache VERSION="${VERSION}" \
 && mkdir -p /out/ort \
 && cp -L "/cache/ort/${ORT_VERSION}/libonnxruntime.so.1" /out/ort/ \
 && cp bin/server /out/server \
 && CGO_ENABLED=0 go -C deploy build -trimpath -ldflags="-s -w" -o /out/healthcheck ./docker/healthcheck

FROM build AS models-none
RUN mkdir -p /out/models

FROM build AS models-built
RUN --mount=type=cache,id=ortserve-cache,target=/cache \
    apt-get update \
 && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 python3-venv=3.11.2-1+b1 \
 && make models CACHE=/cache \
 && cp -a "$(readlink -f /cache/models/current)" /out/models \
 && rm -rf /var/lib/apt/lists/*

# A stage, not an image: nothing to tag.
# hadolint ignore=DL3006
FROM models-${MODELS} AS models

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/ort/ /opt/ort/
COPY --from=build /out/server /out/healthcheck /usr/local/bin/
COPY --from=models /out/models/ /models/
# Flags (and the arguments given to `docker run`) override these; the variables override a
# --config file's listen and ort_lib (docs/config.md).
ENV ORTSERVE_ORT_LIB=/opt/ort/libonnxruntime.so.1 \
    ORTSERVE_ADDR=0.0.0.0:8080
USER 65532:65532
EXPOSE 8080
# On SIGTERM serve drains within --grace (30 s by default): give `docker stop -t` at least that.
STOPSIGNAL SIGTERM
# /health is 503 while models load and while draining; the probe reads ORTSERVE_ADDR's port.
HEALTHCHECK --interval=10s --timeout=4s --start-period=120s --retries=3 CMD ["healthcheck"]
ENTRYPOINT ["server", "serve"]
CMD ["--models", "/models"]
