#!/usr/bin/env bash
# The README's test command (`make test`, with the stack up and its env exported): the whole suite
# in two runs, then the 25 slowest tests of both.
# - The pure tiers (unit, static, contract, property, sim, ml: everything not marked integration)
#   run on both cores (pytest-xdist, GFS_TEST_WORKERS, default 2; --dist loadfile keeps a file's
#   tests, and so its module fixtures, on one worker). They share nothing but the read-only data.
# - The integration tier (real Kafka, Postgres, Jaeger, Prometheus) runs alone, in one process:
#   its live scenarios time real services, and two at once on two cores would make them measure
#   each other; its disruptive tests (broker or Postgres stopped) run last (tests/integration/
#   conftest.py).
# Arguments narrow both runs (make test PYTEST_ARGS='-k quota'). Exits with pytest's status: the
# first failing run's, 5 only when neither run collected a test.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=.venv/bin/python
junit=.stack/junit
mkdir -p "$junit"
rm -f "$junit"/*.xml

rc_pure=0
"$py" -m pytest -q -n "${GFS_TEST_WORKERS:-2}" --dist loadfile -m "not integration" \
  --junitxml="$junit/pure.xml" "$@" || rc_pure=$?
rc_live=0
"$py" -m pytest -q -m integration --junitxml="$junit/integration.xml" "$@" || rc_live=$?

"$py" scripts/slowest_tests.py 25 "$junit"/*.xml || true

# 5 = no test collected: fine for one run when a -k narrows to the other tier.
for rc in "$rc_pure" "$rc_live"; do
  if [[ "$rc" != 0 && "$rc" != 5 ]]; then
    exit "$rc"
  fi
done
if [[ "$rc_pure" == 5 && "$rc_live" == 5 ]]; then
  exit 5
fi
exit 0
