#!/usr/bin/env bash
# Runs the pubsub example (Figure 9, then a burst of releases) many times, a few at a time, and
# counts the runs that end by themselves: the end of a run whose clients wait on subscriptions
# is the termination detection's (sat-core/src/quiescence.rs), and a miss hangs the run.
#   scripts/soak-pubsub.sh [RUNS] [AT_ONCE] [PROVIDER] [WRITES]    (defaults: 200 2 shm 10000)
# Uses the debug build (cargo build --bin satrun --example pubsub); a run that has not ended
# after 300 s counts as hung and is stopped. Exits non-zero unless every run ended cleanly.
set -u
runs=${1:-200}
at_once=${2:-2}
provider=${3:-shm}
writes=${4:-10000}
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}/debug
[ -x "$target/satrun" ] && [ -x "$target/examples/pubsub" ] || {
    echo "build first: cargo build --bin satrun --example pubsub" >&2
    exit 2
}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
one() {
    local i=$1
    if timeout -k 5 300 "$target/satrun" -n 5 --topology sat-core/topologies/three-tasks.xml \
        --provider "$provider" -- "$target/examples/pubsub" --writes "$writes" > "$logs/$i" 2>&1; then
        echo ok > "$logs/$i.status"
    else
        echo "failed (exit $?)" > "$logs/$i.status"
    fi
}
started=$(date +%s)
for i in $(seq 1 "$runs"); do
    one "$i" &
    while [ "$(jobs -r | wc -l)" -ge "$at_once" ]; do wait -n; done
done
wait
ok=$(grep -l '^ok$' "$logs"/*.status 2>/dev/null | wc -l)
echo "pubsub --writes $writes over $provider: $ok of $runs runs ended cleanly ($at_once at a time, $(( $(date +%s) - started )) s)"
for f in "$logs"/*.status; do
    if ! grep -q '^ok$' "$f"; then
        n=$(basename "$f" .status)
        echo "run $n: $(cat "$f"); its last lines:"
        tail -5 "$logs/$n"
    fi
done
[ "$ok" -eq "$runs" ]
