#!/usr/bin/env bash
# The README's test command (`make test`, with the stack up and its env exported): the whole suite
# in three runs, then the 25 slowest tests of all.
# - The pure tiers (unit, static, contract, property, sim, ml: everything not marked integration)
#   run on both cores (pytest-xdist, GFS_TEST_WORKERS, default 2; --dist loadfile keeps a file's
#   tests, and so its module fixtures, on one worker). They share nothing but the read-only data.
# - The integration tier (real Kafka, Postgres, Jaeger, Prometheus) runs on two workers too
#   (--dist loadgroup: a module's tests, or a group of modules that must not run side by side,
#   on one worker; tests/integration/conftest.py), every test on its own pool, schema, groups and
#   ports. Its disruptive tests (the broker or Postgres stopped, the shared topics flooded, the
#   demo's twelve processes on an accelerated clock, which starve the tests beside them and miss
#   their own sample's preemptions when starved) then run alone, in one process, after the rest.
# Arguments narrow every run (make test PYTEST_ARGS='-k quota'). Exits with pytest's status: the
# first failing run's, 5 only when no run collected a test.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=.venv/bin/python
junit=.stack/junit
mkdir -p "$junit"
rm -f "$junit"/*.xml

workers="${GFS_TEST_WORKERS:-2}"
rc_pure=0
"$py" -m pytest -q -n "$workers" --dist loadfile -m "not integration" \
  --junitxml="$junit/pure.xml" "$@" || rc_pure=$?
rc_live=0
"$py" -m pytest -q -n "$workers" --dist loadgroup -m "integration and not disruptive" \
  --junitxml="$junit/integration.xml" "$@" || rc_live=$?
rc_disruptive=0
"$py" -m pytest -q -m "integration and disruptive" --junitxml="$junit/disruptive.xml" "$@" || rc_disruptive=$?

"$py" scripts/slowest_tests.py 25 "$junit"/*.xml || true

# 5 = no test collected: fine for one run when a -k narrows to another.
for rc in "$rc_pure" "$rc_live" "$rc_disruptive"; do
  if [[ "$rc" != 0 && "$rc" != 5 ]]; then
    exit "$rc"
  fi
done
if [[ "$rc_pure" == 5 && "$rc_live" == 5 && "$rc_disruptive" == 5 ]]; then
  exit 5
fi
exit 0
