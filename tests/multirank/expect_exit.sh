#!/usr/bin/env bash
# expect_exit.sh CODE REGEX CMD...: runs CMD, passes if it exits with CODE and its combined
# output matches the extended REGEX; prints the output and the elapsed time either way.
set -uo pipefail
want=$1 regex=$2
shift 2
start=$(date +%s.%N)
out=$("$@" 2>&1)
rc=$?
end=$(date +%s.%N)
printf '%s\n' "$out"
printf 'exit code %d (want %d) after %.2f s\n' "$rc" "$want" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')"
if [[ $rc -ne $want ]]; then echo "FAIL: exit code"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: output does not match: $regex"; exit 1; fi
echo "PASS"
