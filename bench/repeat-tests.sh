#!/usr/bin/env bash
# Runs integration tests of the vsched crate N times in a row and counts,
# per test, the runs it passed, failed and skipped: how the fault tests
# are shown to pass every time, not once (docs/sched.md, "Faults").
#
#   bash bench/repeat-tests.sh RUNS TEST_FILE[:FILTER] [TEST_FILE[:FILTER] ...] > result.json
#   bash bench/repeat-tests.sh 20 sched_faults sched:sigkill_of_the_loader
#
# Each run runs every TEST_FILE (crates/cli/tests/TEST_FILE.rs), only the
# tests whose names contain FILTER where given; name each file once. A run
# goes on whatever failed before. Prints JSON on stdout (schema
# vsched.repeat-tests/v1, described in docs/sched.md "Faults"); the test
# output of failed runs is kept in $VSCHED_REPEAT_LOGS (default:
# target/repeat-tests/). A test that skipped itself (common::skip) counts
# as skipped, not passed; what a test worked around (common::note, e.g. a
# guest booted again after a panic at boot) is listed per run. Exit
# status 0 if every test passed every run.
# VSCHED_TEST_KERNEL_VERSION is passed on (the kernel matrix).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 2 ] || usage
runs=$1
shift
case "$runs" in ''|*[!0-9]*|0) echo "repeat-tests.sh: RUNS must be a whole number from 1, not $runs" >&2; exit 2 ;; esac
files=$(for spec in "$@"; do echo "${spec%%:*}"; done)
if [ "$(sort <<<"$files" | uniq -d)" != "" ]; then
  echo "repeat-tests.sh: name each test file once (a test would be counted twice per run)" >&2
  exit 2
fi
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
    skips="$logs/run$run-$file.skips"
    notes="$logs/run$run-$file.notes"
    rm -f "$skips" "$notes"
    begun=$(date +%s)
    set +e
    VSCHED_SKIP_LOG="$skips" VSCHED_NOTE_LOG="$notes" cargo test --release -p vsched --test "$file" -- "${filter[@]}" > "$log" 2>&1
    status=$?
    set -e
    took=$(( $(date +%s) - begun ))
    # "test NAME ... ok" / "... FAILED" per test; a skip is "NAME: why".
    sed -n 's/^test \([^ ]*\) \.\.\. \(ok\|FAILED\)$/\1 \2/p' "$log" \
      | while read -r name verdict; do
          if [ "$verdict" = ok ] && [ -f "$skips" ] && grep -q "^$name: " "$skips"; then
            verdict=skipped
          fi
          echo "test $run $file $name $verdict"
        done >> "$results"
    echo "exit $run $file $status" >> "$results"
    if [ -s "$notes" ]; then
      sed "s/^/note $run $file /" "$notes" >> "$results"
    fi
    echo "run $run/$runs $file: exit $status in ${took}s" >&2
    [ "$status" -ne 0 ] || rm -f "$log" "$skips" "$notes"
  done
done

python3 - "$results" "$runs" "$started" "$(git rev-parse --short HEAD)" "${VSCHED_TEST_KERNEL_VERSION:-}" <<'EOF'
import json, sys
path, runs, started, commit, kernel = sys.argv[1:]
runs = int(runs)
tests, failed_exits, notes = {}, [], []
for line in open(path):
    kind, run, file, *rest = line.split()
    if kind == "note":
        notes.append({"run": int(run), "file": file, "note": " ".join(rest)})
        continue
    if kind == "exit":
        if rest[0] != "0":
            failed_exits.append({"run": int(run), "file": file, "exit": int(rest[0])})
        continue
    name, verdict = rest
    t = tests.setdefault(f"{file}::{name}", {"passed": 0, "failed": 0, "skipped": 0, "failed_runs": []})
    t[{"ok": "passed", "FAILED": "failed", "skipped": "skipped"}[verdict]] += 1
    if verdict == "FAILED":
        t["failed_runs"].append(int(run))
# A run whose test binary died prints no verdict: its exit status says so.
every_run = bool(tests) and not failed_exits and all(t["passed"] == runs for t in tests.values())
print(json.dumps({
    "schema": "vsched.repeat-tests/v1",
    "runs": runs,
    "started": started,
    "commit": commit,
    "kernel_version": kernel or None,
    "tests": tests,
    "failed_exits": failed_exits,
    "notes": notes,
    "all_passed_every_run": every_run,
}, indent=2))
sys.exit(0 if every_run else 1)
EOF
