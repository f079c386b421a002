#!/bin/sh
# graft serve reads every flag from --config FILE (TOML) and GRAFT_<FLAG>; the command line wins,
# then the file, then the environment; unknown keys and bad values are errors naming them.
#   config_env.sh GRAFT_BINARY MODEL_DIR
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
# The name the server starts under (its "serving NAME" line), then it is stopped.
served() {
  "$@" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    grep -q "serving" "$dir/log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  sed -n 's/.*serving \([^ ]*\) .*/\1/p' "$dir/log"
}
expect() {  # expect WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: got '$2', want '$3'"; fail=1; fi
}
printf 'port = 0\nserved-model-name = "from-file"\nmax-queue = 12\n' >"$dir/a.toml"
printf '[serve]\nport = 0\nserved-model-name = "from-section"\n' >"$dir/b.toml"
expect "the file's keys" "$(served "$1" serve --model "$2" --config "$dir/a.toml")" from-file
expect "a [serve] section" "$(served "$1" serve --model "$2" --config "$dir/b.toml")" from-section
expect "GRAFT_SERVED_MODEL_NAME" "$(GRAFT_SERVED_MODEL_NAME=from-env served "$1" serve --model "$2" --port 0)" from-env
expect "the file over the environment" \
  "$(GRAFT_SERVED_MODEL_NAME=from-env served "$1" serve --model "$2" --config "$dir/a.toml")" from-file
expect "the command line over the file" \
  "$(served "$1" serve --model "$2" --config "$dir/a.toml" --served-model-name from-cli)" from-cli
printf 'port = 0\nmax-qeue = 12\n' >"$dir/bad.toml"
out=$("$1" serve --model "$2" --config "$dir/bad.toml" 2>&1)
expect "an unknown key is an error naming it" "$(echo "$out" | grep -c 'serve.max-qeue')" 1
printf 'port = 0\nmax-queue = "lots"\n' >"$dir/bad2.toml"
out=$("$1" serve --model "$2" --config "$dir/bad2.toml" 2>&1)
expect "a bad value in the file names the flag" "$(echo "$out" | grep -c -- '--max-queue: Value lots')" 1
out=$(GRAFT_MAX_QUEUE=lots "$1" serve --model "$2" 2>&1)
expect "a bad value in the environment names the flag" "$(echo "$out" | grep -c -- '--max-queue: Value lots')" 1
out=$("$1" serve --model "$2" --config "$dir/missing.toml" 2>&1)
expect "a missing file is an error" "$(echo "$out" | grep -c 'missing.toml was not readable')" 1
exit $fail
