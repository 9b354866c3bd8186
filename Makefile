# Every target does its own set-up, so `make test` and `make demo` work on a fresh machine.
# The stack (real Kafka 3.9 + PostgreSQL + Jaeger + Prometheus) keeps running after `test`/`demo`;
# `make down` stops it.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
STACK := infra/stack.sh
# Exports KAFKA_BOOTSTRAP_SERVERS and DATABASE_URL (stack.sh is their one source) so tests and the
# demo reach the local stack.
STACK_ENV := eval "$$(bash $(STACK) env)"

.PHONY: help setup up down status reset test demo demo-sim lint k8s-render

help:
	@echo "make setup   venv + Kafka jars + PostgreSQL + Jaeger build + Prometheus + Chromium (idempotent)"
	@echo "make up      start Kafka, Postgres, Jaeger, Prometheus; create topics, apply migrations"
	@echo "make test    setup + up + the whole test suite"
	@echo "make demo    setup + up + the live system replaying demo/sample (scripts/demo.sh)"
	@echo "make demo-sim setup + up + the simulator replay (scripts/demo-sim.sh)"
	@echo "make down    stop the stack              make reset   stop and wipe its data"
	@echo "make status  is the stack up?            make lint    ruff check + format + imports"
	@echo "make k8s-render  the Kubernetes manifests of infra/k8s/overlays/production (docs/kubernetes.md)"

setup:
	bash scripts/bootstrap.sh
	bash infra/kafka/fetch.sh
	bash infra/postgres/install.sh
	bash infra/jaeger/build.sh
	bash infra/k8s/kustomize-tool/build.sh
	bash infra/prometheus/install.sh
	bash infra/chromium/install.sh

up: setup
	bash $(STACK) up

down:
	bash $(STACK) down

status:
	bash $(STACK) status

reset:
	bash $(STACK) reset

# scripts/test.sh: the pure tiers on both cores, then the integration tier alone, then the 25
# slowest tests. PYTEST_ARGS narrows a run (make test PYTEST_ARGS='-k quota'). pytest's own exit
# code is kept in .stack/pytest.rc because make turns every failure into 2 (.ci/run exits with the
# real one).
test: up
	$(STACK_ENV); mkdir -p .stack; rc=0; bash scripts/test.sh $(PYTEST_ARGS) || rc=$$?; \
	  echo $$rc > .stack/pytest.rc; exit $$rc

# The demo is traced: every process it starts exports its spans to the stack's Jaeger.
demo: up
	eval "$$(bash $(STACK) env --traces)"; bash scripts/demo.sh

demo-sim: up
	$(STACK_ENV); bash scripts/demo-sim.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The final YAML the cluster would get (needs the overlay's secrets/*.env, docs/kubernetes.md).
k8s-render:
	bash infra/k8s/kustomize-tool/build.sh
	.stack/bin/kustomize build infra/k8s/overlays/production
