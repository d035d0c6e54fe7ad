#!/bin/sh
# A merge into the folder of a sweep that is running (issue 31): the merge is refused at once with
# exit 2, naming the sweep's pid, and the sweep then finishes with every line of its own profile
# and its table, as if no merge had been tried.
# The sweep is made to stay running without timing tricks: util-linux flock holds this host's
# device lock (in a private lock folder), so the sweep holds its folder and waits for the device.
#   usage: merge_into_running_sweep.sh ATTN_TUNE FLOCK DEVICE_LOCK_FILE PROFILE WORKDIR
set -eu
tool=$1
flock=$2
device_lock=$3
profile=$4
work=$5
. "$(dirname "$0")/waiting_sweep.sh"
fail() {
  echo "merge_into_running_sweep: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work" "$(dirname "$device_lock")"
cd "$work"

# A real shard to merge: the whole profile as shard 0 of 1.
"$tool" sweep --device cpu --profile "$profile" --threads 2 --quiet --no-report --shard 0/1 \
  --out shard > shard.log 2>&1 || fail "the shard sweep failed: $(cat shard.log)"

start_waiting_sweep 8 running

set +e
"$tool" merge running shard > merge.out 2> merge.err
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "merge into the running sweep's folder exited $rc, not 2: $(cat merge.err)"
[ "$(wc -l < merge.err)" -eq 1 ] || fail "merge's error is not one line: $(cat merge.err)"
grep -q "is in use by another attn-tune process (pid $sweep)" merge.err ||
  fail "merge's error does not name the sweep's pid $sweep: $(cat merge.err)"
[ ! -s merge.out ] || fail "the refused merge printed to stdout: $(cat merge.out)"

set +e
wait "$sweep"
rc=$?
set -e
wait "$holder" || true
[ "$rc" -eq 0 ] || fail "the sweep exited $rc after the refused merge: $(cat sweep.log)"
# Its folder holds its own results, whole: the same lines as the shard's (one header, then one
# line per measurement), and a table, and nothing left half-written.
want=$(wc -l < shard/results.jsonl)
got=$(wc -l < running/results.jsonl)
[ "$got" -eq "$want" ] || fail "the sweep's results.jsonl has $got lines, the profile makes $want"
[ -s running/threshold_table.json ] || fail "the sweep wrote no table"
leftovers=$(find running -name '*.tmp.*' | head -n 1)
[ -z "$leftovers" ] || fail "temporary files are left in the sweep's folder: $leftovers"
"$tool" table show running/threshold_table.json > /dev/null ||
  fail "table show refuses the sweep's table"

# Once the sweep is done, a merge into its folder draws the folder's report again from the merged
# table: the page a sweep left there showed its own table.
"$tool" report running > /dev/null || fail "report refuses the sweep's folder"
echo "<!-- the sweep's own page -->" >> running/report.html
"$tool" merge running shard > merge2.out 2> merge2.err ||
  fail "the merge into the finished sweep's folder failed: $(cat merge2.err)"
grep -q "^merge: report .*running/report.html (drawn again)$" merge2.out ||
  fail "the merge did not say it drew the report again: $(cat merge2.out)"
# ... and says that it replaced the sweep's own measurements (8 decode ones here).
grep -q "^merge: replaced the $((want - 1)) measurements of the sweep whose folder this was" merge2.out ||
  fail "the merge did not say it replaced the sweep's own results: $(cat merge2.out)"
grep -q "the sweep's own page" running/report.html && fail "the merge left the sweep's page"
echo "merge_into_running_sweep: refused with exit 2 naming pid $sweep; the sweep finished whole"
