# syntax=docker/dockerfile:1
# ptxserve container image.
#
#   docker build -t ptxserve:latest .
#   docker run --rm --gpus all -p 50051:50051 -p 9464:9464 \
#       -v /path/to/hf-model:/models:ro ptxserve:latest
#
# Two stages: a builder on debian:bookworm that installs the toolchain with the project's
# own scripts/setup and builds with the same CMake steps as scripts/serve and CI, and a
# runtime stage on debian:bookworm-slim with only the shared libraries the binary links
# (tests/deploy checks this list against `ldd ptxserve` + `dpkg -S`).
#
# No CUDA toolkit is installed: ptxserve generates its own PTX and needs only the driver's
# libcuda.so.1, which the NVIDIA container runtime mounts into the container on GPU nodes
# (`docker run --gpus all`, or the Kubernetes device plugin). It chooses the GPUs through
# NVIDIA_VISIBLE_DEVICES (`--gpus` sets it; with the runtime but without --gpus pass e.g.
# -e NVIDIA_VISIBLE_DEVICES=0); the image deliberately does not default it to "all".
# Without a driver ptxserve serves from the CPU backend.

ARG DEBIAN_RELEASE=bookworm

FROM debian:${DEBIAN_RELEASE} AS builder
# -march of the CPU backend (x86-64-v3 = AVX2+FMA+F16C): the image then needs such a CPU.
ARG PTXSERVE_MARCH=x86-64-v3
# 1: also build and run the test suite (ctest) inside the build, as CI does.
ARG PTXSERVE_RUN_TESTS=0
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The toolchain layer depends only on scripts/setup, so source edits reuse it.
COPY scripts/setup scripts/setup
RUN bash scripts/setup && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTXSERVE_MARCH="${PTXSERVE_MARCH}" \
 && cmake --build build -j "$(nproc)" --target ptxserve \
 && if [ "${PTXSERVE_RUN_TESTS}" = 1 ]; then \
      cmake --build build -j "$(nproc)" && (cd build && ctest --output-on-failure -j "$(nproc)"); \
    fi \
 && strip --strip-unneeded build/server/ptxserve

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# The shared libraries of build/server/ptxserve (gRPC, protobuf, Abseil, prometheus-cpp
# and civetweb, PCRE2, and what they pull in); nothing else.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 \
      libc-ares2 \
      libcivetweb1 \
      libgcc-s1 \
      libgrpc++1.51 \
      libgrpc29 \
      libpcre2-8-0 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libre2-9 \
      libssl3 \
      libstdc++6 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/*
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 ptxserve \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin ptxserve \
 && mkdir -p /models /cache \
 && chown 10001:10001 /cache
COPY --from=builder /src/build/server/ptxserve /usr/local/bin/ptxserve

# compute: the driver libraries the CUDA Driver API needs (libcuda), nothing for graphics.
ENV NVIDIA_DRIVER_CAPABILITIES=compute \
    XDG_CACHE_HOME=/cache \
    CUDA_CACHE_PATH=/cache/nv \
    CUDA_CACHE_MAXSIZE=1073741824
# /models: the Hugging Face model directory (config.json, *.safetensors, tokenizer.json),
# mounted read-only. /cache: writable; the synthetic default model (when serving without
# --model) and the driver's PTX JIT cache (CUDA_CACHE_PATH) go there.
VOLUME ["/models", "/cache"]

USER 10001:10001
# 50051: gRPC (ptxserve.v1.DecodeService, grpc.health.v1.Health, reflection);
# 8000: the OpenAI-compatible HTTP API; 9464: Prometheus /metrics.
EXPOSE 50051 8000 9464
# Long start period: loading and uploading large weights takes minutes.
HEALTHCHECK --interval=15s --timeout=6s --start-period=300s --retries=3 \
  CMD ["/usr/local/bin/ptxserve", "client", "health", "--target=127.0.0.1:50051", "--timeout=5"]
# `docker run IMAGE serve ...` replaces the arguments below (then give --host=0.0.0.0 again;
# without --model the synthetic default model is served); other subcommands work too
# (`docker run IMAGE client health --target=HOST:50051`, `make-model`, `bench`).
ENTRYPOINT ["/usr/local/bin/ptxserve"]
CMD ["serve", "--host=0.0.0.0", "--port=50051", "--http-port=8000", "--metrics-port=9464", "--model=/models"]
