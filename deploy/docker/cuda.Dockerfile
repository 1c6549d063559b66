# syntax=docker/dockerfile:1
# Chorus on NVIDIA GPUs: CUDA 13 with cuDNN 9, ONNX Runtime's CUDA provider installed by
# `chorus setup cuda`, the native engine built with its CUDA kernels (sm_80, sm_90), non-root.
# Build from the repository root: docker build -f deploy/docker/cuda.Dockerfile -t chorus:cuda .
# Run with the NVIDIA Container Toolkit: docker run --gpus all ...
ARG NODE_VERSION=22
ARG CUDA_VERSION=13.0.1
ARG UBUNTU=ubuntu24.04

# Node itself (binary, headers, npm) comes from the official image.
FROM node:${NODE_VERSION}-bookworm-slim AS node

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-${UBUNTU} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates cmake g++ make \
 && rm -rf /var/lib/apt/lists/*
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/include/node /usr/local/include/node
COPY --from=node /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY bin ./bin
COPY src ./src
COPY models ./models
COPY tokenizers ./tokenizers
COPY ensembles ./ensembles
COPY pipelines ./pipelines
# No GPU is visible while an image builds: install the provider, check the CUDA libraries, build the
# engine; `chorus setup cuda` on a GPU node (or `chorus doctor`) checks that a session runs there.
RUN node bin/chorus.js setup cuda --install-only --build-engine \
 && rm -rf build/native/cmake build/native/download build/native/ort-include

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-${UBUNTU}
COPY --from=node /usr/local/bin/node /usr/local/bin/node
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin chorus \
 && mkdir -p /var/cache/chorus \
 && chown chorus:chorus /var/cache/chorus
ENV NODE_ENV=production \
    CHORUS_HOST=0.0.0.0 \
    CHORUS_PORT=8000 \
    CHORUS_SHUTDOWN_TIMEOUT=30 \
    CHORUS_CACHE=/var/cache/chorus
WORKDIR /app
COPY --from=build --chown=10001:10001 /app /app
VOLUME ["/var/cache/chorus"]
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.CHORUS_PORT}/v2/health/ready`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "bin/chorus.js"]
CMD ["serve"]
