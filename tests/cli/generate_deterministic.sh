#!/bin/sh
# graft generate with a seed prints the same non-empty text every time; another seed differs
# (a high temperature: the random fixture model is very sure of itself).
#   generate_deterministic.sh GRAFT_BINARY MODEL_DIR
set -eu
run() { "$1" generate --model "$2" --prompt "Hello there" --max-tokens 24 --temperature 20 --top-p 0.99 --seed "$3" 2>/dev/null | od -An -tx1; }
a=$(run "$1" "$2" 11)
b=$(run "$1" "$2" 11)
c=$(run "$1" "$2" 12)
[ -n "$(echo "$a" | tr -d ' \n0a')" ] || { echo "empty output"; exit 1; }
[ "$a" = "$b" ] || { echo "same seed, different text"; exit 1; }
[ "$a" != "$c" ] || { echo "different seeds, same text"; exit 1; }
echo "deterministic"
