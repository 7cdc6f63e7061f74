#!/usr/bin/env bash
# Runs integration tests of the vsched crate N times in a row and counts,
# per test, the runs it passed and failed: how the fault tests are shown
# to pass every time, not once (docs/sched.md, "Faults").
#
#   bash bench/repeat-tests.sh RUNS TEST_FILE[:FILTER] [TEST_FILE[:FILTER] ...] > result.json
#   bash bench/repeat-tests.sh 20 sched_faults sched:sigkill_of_the_loader
#
# Each run runs every TEST_FILE (crates/cli/tests/TEST_FILE.rs), only the
# tests matching FILTER where given. Every run goes on whatever failed
# before. Prints JSON (schema vsched.repeat-tests/v1) on stdout; the
# test output of failed runs is kept in $VSCHED_REPEAT_LOGS (default:
# target/repeat-tests/). Exit status 0 if every test passed every run.
# VSCHED_TEST_KERNEL_VERSION is passed on (the kernel matrix).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
runs=$1
shift
case "$runs" in ''|*[!0-9]*) echo "repeat-tests.sh: RUNS must be a number, not $runs" >&2; exit 2 ;; esac
logs="${VSCHED_REPEAT_LOGS:-$PWD/target/repeat-tests}"
mkdir -p "$logs"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# Built once, so that no run measures a build.
for spec in "$@"; do
  cargo test --release -p vsched --test "${spec%%:*}" --no-run >&2
done

started=$(date -u +%FT%TZ)
for run in $(seq "$runs"); do
  for spec in "$@"; do
    file=${spec%%:*}
    filter=()
    [ "$spec" = "$file" ] || filter=("${spec#*:}")
    log="$logs/run$run-$file.log"
    begun=$(date +%s)
    set +e
    cargo test --release -p vsched --test "$file" -- "${filter[@]}" > "$log" 2>&1
    status=$?
    set -e
    took=$(( $(date +%s) - begun ))
    # "test NAME ... ok" / "... FAILED" per test.
    sed -n 's/^test \([^ ]*\) \.\.\. \(ok\|FAILED\)$/\1 \2/p' "$log" \
      | while read -r name verdict; do echo "$run $file $name $verdict"; done >> "$results"
    echo "run $run/$runs $file: exit $status in ${took}s" >&2
    [ "$status" -ne 0 ] || rm -f "$log"
  done
done

python3 - "$results" "$runs" "$started" "$(git rev-parse --short HEAD)" "${VSCHED_TEST_KERNEL_VERSION:-}" <<'EOF'
import json, sys
path, runs, started, commit, kernel = sys.argv[1:]
tests = {}
for line in open(path):
    run, file, name, verdict = line.split()
    t = tests.setdefault(f"{file}::{name}", {"passed": 0, "failed": 0, "failed_runs": []})
    if verdict == "ok":
        t["passed"] += 1
    else:
        t["failed"] += 1
        t["failed_runs"].append(int(run))
print(json.dumps({
    "schema": "vsched.repeat-tests/v1",
    "runs": int(runs),
    "started": started,
    "commit": commit,
    "kernel_version": kernel or "the layouts' own",
    "tests": tests,
    "all_passed_every_run": all(t["failed"] == 0 and t["passed"] == int(runs) for t in tests.values()),
}, indent=2))
sys.exit(0 if tests and all(t["failed"] == 0 and t["passed"] == int(runs) for t in tests.values()) else 1)
EOF
