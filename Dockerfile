# One image for every role; the role is the argument:
#   docker run nexus --role=runtime-api --port=8001
# Builds from a clean checkout: `docker build -t nexus .` (deploy/compose.yaml does it too).
# The base images are arguments so that a machine without a registry can use local ones
# (scripts/image-test.sh builds them with debootstrap).
ARG NODE_IMAGE=node:20-bookworm-slim
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- the browser CRM
FROM ${NODE_IMAGE} AS frontend
WORKDIR /src/frontend
# dependency layer first: rebuilt only when the lock changes
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY frontend/ ./
RUN npm run build

# ---------------------------------------------------------------- the wheel
# It carries the migrations (nexus/migrations) and, copied by setup.py's build_py, the
# browser CRM's build (frontend/dist); a wheel without the build fails here.
FROM ${PYTHON_IMAGE} AS wheel
RUN python3 -m venv /opt/build
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY nexus ./nexus
COPY --from=frontend /src/frontend/dist ./frontend/dist
RUN /opt/build/bin/python -m pip wheel --no-cache-dir --no-deps -w /dist .

# ---------------------------------------------------------------- the runtime image
FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 nexus \
 && useradd --uid 10001 --gid 10001 --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin nexus \
 && python3 -m venv /opt/nexus
ENV PATH=/opt/nexus/bin:$PATH \
    VIRTUAL_ENV=/opt/nexus
# dependency layer first: the hash-locked runtime requirements (rebuilt only when they change)
COPY requirements/runtime.txt /tmp/requirements-runtime.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements-runtime.txt \
 && rm /tmp/requirements-runtime.txt
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install --no-cache-dir --no-deps /tmp/dist/*.whl \
 && rm -rf /tmp/dist \
 && pip check
# /app/var: this container's state (NEXUS_VAR_DIR). Its secrets/ and ingress/ exist, owned by
# the nexus user, so that volumes mounted there start with that owner.
RUN mkdir -p /app/var/secrets /app/var/ingress \
 && chmod 0700 /app/var/secrets \
 && chown -R 10001:10001 /app
WORKDIR /app
ENV NEXUS_ENV=production \
    NEXUS_HOST=0.0.0.0 \
    NEXUS_VAR_DIR=/app/var \
    NEXUS_LOG_FORMAT=json \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
VOLUME ["/app/var"]
# no HEALTHCHECK: the port is the role's; deploy/compose.yaml runs
# `nexus healthcheck --port=PORT --ready` for each role
ENTRYPOINT ["nexus", "serve"]
CMD ["--role=gateway"]
