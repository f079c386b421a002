#!/bin/sh
# Starts graft serve on a free port, runs a client script from oracle/ (where npm installed the
# official openai client, the AI SDK and LangChain) against it, stops it. The key (GRAFT_API_KEY)
# is the one the clients send.
#   npm_client.sh GRAFT_BINARY FIXTURES_DIR ORACLE_DIR SCRIPT   (SCRIPT: openai-client.mjs, ...)
set -eu
log=$(mktemp)
GRAFT_API_KEY=unused "$1" serve --model "$2/qwen3_5-wrapper" --adapter "gdn=$2/adapters/qwen3_5-wrapper-lora-gdn" --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 100); do
  url=$(sed -n 's/.* on \(http:[^ ]*\/v1\).*/\1/p' "$log" | head -n 1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { echo "graft serve did not start:"; cat "$log"; exit 1; }
node "$3/$4" "$url"
