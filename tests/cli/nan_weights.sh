#!/bin/sh
# graft serve refuses a checkpoint whose weights hold a NaN (checked at start-up for small
# checkpoints), naming the tensor: a copy of a fixture with its first bf16 weight set to NaN.
#   nan_weights.sh GRAFT_BINARY FIXTURE_DIR
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$2"/* "$dir"/
# The data starts after the 8-byte header length and the JSON header; write bf16 NaN (0x7fc0).
hlen=$(od -An -t u8 -N 8 "$dir/model.safetensors" | tr -d ' ')
printf '\300\177' | dd of="$dir/model.safetensors" bs=1 seek=$((8 + hlen)) conv=notrunc 2>/dev/null
if "$1" serve --model "$dir" --port 0 > "$dir/log" 2>&1; then
  echo "graft serve started on NaN weights"; exit 1
fi
cat "$dir/log"
