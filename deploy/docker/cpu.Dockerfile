# syntax=docker/dockerfile:1
# Chorus on the CPU: Node LTS slim, the native engine built without CUDA, running as a non-root user.
# Build from the repository root: docker build -f deploy/docker/cpu.Dockerfile -t chorus:cpu .
ARG NODE_VERSION=22

FROM node:${NODE_VERSION}-bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates cmake g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY bin ./bin
COPY src ./src
COPY scripts/build-native.ts ./scripts/build-native.ts
COPY models ./models
COPY tokenizers ./tokenizers
COPY ensembles ./ensembles
COPY pipelines ./pipelines
RUN npm run build:native -- --no-cuda \
 && rm -rf build/native/cmake build/native/download build/native/ort-include

FROM node:${NODE_VERSION}-bookworm-slim
ENV NODE_ENV=production \
    CHORUS_HOST=0.0.0.0 \
    CHORUS_PORT=8000 \
    CHORUS_SHUTDOWN_TIMEOUT=30 \
    CHORUS_CACHE=/var/cache/chorus
WORKDIR /app
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin chorus \
 && mkdir -p /var/cache/chorus \
 && chown chorus:chorus /var/cache/chorus
COPY --from=build --chown=10001:10001 /app /app
VOLUME ["/var/cache/chorus"]
USER 10001
EXPOSE 8000
# Ready once the port is open: serve opens it after --load (CHORUS_LOAD) has loaded its models.
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.CHORUS_PORT}/v2/health/ready`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "bin/chorus.js"]
CMD ["serve"]
