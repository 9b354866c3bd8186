# The GFS preemption service image. Build from the repository root:
#   docker build -f infra/docker/preemption.Dockerfile -t gfs-preemption .
# No torch here: the scheduler runs the pure core policies.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OTEL_SERVICE_NAME=gfs-preemption

WORKDIR /app

# Dependencies first, from pyproject alone, so editing code does not rebuild this layer. The
# throw-away package skeleton lets pip resolve the project's pins without the sources.
COPY pyproject.toml README.md ./
RUN mkdir -p schemas services ml \
 && touch schemas/__init__.py services/__init__.py ml/__init__.py \
 && pip install ".[services]" \
 && pip uninstall -y gfs \
 && rm -rf schemas services ml build *.egg-info

# Editable install: the code stays in /app, so paths the code derives from its own location
# (the repo root) resolve inside the image as they do in a checkout; migrations ship as package data.
COPY gfs ./gfs
COPY schemas ./schemas
COPY services ./services
COPY ml ./ml
RUN pip install --no-deps -e . \
 && useradd --system --uid 10001 --home-dir /app gfs
USER gfs

ENTRYPOINT ["gfs"]
CMD ["serve", "preemption"]
