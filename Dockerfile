# One image for every role: `docker run nexus <role args>`, e.g.
#   docker run nexus --role=runtime-api --host=0.0.0.0
FROM node:20-bookworm-slim AS frontend
# The browser CRM and admin console (served by the gateway from frontend/dist).
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY frontend/index.html frontend/tsconfig.json frontend/vite.config.ts ./
COPY frontend/public ./public
COPY frontend/src ./src
RUN npm run build

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY nexus ./nexus
RUN pip install --no-cache-dir --prefix=/install -c constraints.txt .

FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 nexus \
 && useradd --system --uid 10001 --gid nexus --home-dir /app --shell /usr/sbin/nologin nexus
COPY --from=build /install /usr/local
WORKDIR /app
COPY migrations ./migrations
COPY --from=frontend /src/frontend/dist ./frontend/dist
RUN mkdir -p /app/var && chown nexus:nexus /app/var
ENV NEXUS_ENV=production \
    NEXUS_HOST=0.0.0.0 \
    NEXUS_VAR_DIR=/app/var \
    NEXUS_MIGRATIONS_DIR=/app/migrations \
    NEXUS_GATEWAY_STATIC_ROOT=/app \
    NEXUS_LOG_FORMAT=json \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER nexus:nexus
ENTRYPOINT ["nexus", "serve"]
CMD ["--role=gateway"]
