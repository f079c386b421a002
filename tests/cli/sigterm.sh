#!/bin/sh
# graft serve on SIGTERM: it says it is shutting down and exits 0.
#   sigterm.sh GRAFT_BINARY MODEL_DIR
set -eu
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$1" serve --model "$2" --port 0 --shutdown-timeout 5 >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  grep -q "serving" "$log" && break
  sleep 0.1
done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
cat "$log"
echo "exit $rc"
