#!/bin/sh
# Merges told to stop (SIGTERM) at random moments, over and over, into a folder an earlier merge
# wrote: wherever the stop lands, the folder's names still show a whole generation (the one
# before or the new one) and no other generation is left behind, neither the new one cut short
# before the switch nor the old one whose removal after it was.
#   usage: stop_merges.sh ATTN_TUNE PROFILE WORKDIR [TRIES]
set -eu
tool=$1
profile=$2
work=$3
tries=${4:-80}
fail() {
  echo "stop_merges: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work" "$ATTN_TUNE_LOCK_DIR"
cd "$work"
for i in 0 1; do
  "$tool" sweep --device cpu --profile "$profile" --threads 2 --no-report --shard "$i/2" \
    --out "s$i" > "s$i.log" 2>&1 || fail "shard $i: $(cat "s$i.log")"
done
"$tool" merge m s0 s1 > merge.log 2>&1 || fail "the first merge: $(cat merge.log)"
# The stops are drawn within the time a whole merge takes on this machine (three timed, the
# longest; GNU date's nanoseconds), so that about half land part way however fast the machine is.
span=1000
for i in 1 2 3; do
  t0=$(date +%s%N)
  "$tool" merge m s0 s1 > merge.log 2>&1 || fail "a timed merge: $(cat merge.log)"
  us=$((($(date +%s%N) - t0) / 1000))
  [ "$us" -gt "$span" ] && span=$us
done

stopped=0
n=0
while [ "$n" -lt "$tries" ]; do
  n=$((n + 1))
  "$tool" merge m s0 s1 > merge.log 2>&1 &
  pid=$!
  us=$(($(od -An -N4 -tu4 /dev/urandom) % span))
  sleep "$(printf '%d.%06d' $((us / 1000000)) $((us % 1000000)))"
  kill -TERM "$pid" 2> /dev/null || true
  set +e
  wait "$pid"
  rc=$?
  set -e
  [ "$rc" -eq 0 ] || [ "$rc" -eq 143 ] || fail "try $n: the merge exited $rc: $(cat merge.log)"
  [ "$rc" -eq 143 ] && stopped=$((stopped + 1))
  for f in results.jsonl threshold_table.json; do
    [ -s "m/$f" ] || fail "try $n (exit $rc): m/$f does not show a file: $(ls -lA m)"
  done
  gens=$(ls -A m | grep -c '^\.attn-tune-gen-' || true)
  [ "$gens" -eq 1 ] || fail "try $n (exit $rc): $gens generations left in m: $(ls -A m)"
done
# Enough tries must have been stopped part way, or the check says little (a stop drawn within a
# merge's own time lands before its end in about half the tries: 39 of 80 on a 2-core VM; a
# fifth is asked).
[ "$stopped" -ge $((tries / 5)) ] || fail "only $stopped of $tries merges were stopped"
echo "stop_merges: ok ($stopped of $tries stopped)"
