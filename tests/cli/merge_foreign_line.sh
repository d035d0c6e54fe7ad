#!/bin/sh
# A shard folder with a line pasted in from another sweep (its workload not in the profile: batch
# 97, fields and key edited together, so the line itself is well formed) or drawn from another
# seed's data: merge refuses it, naming the line, and writes nothing.
#   usage: merge_foreign_line.sh ATTN_TUNE WORKDIR
set -eu
tool=$1
work=$2
fail() {
  echo "merge_foreign_line: $*" >&2
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$tool" sweep --device cpu --profile quick --threads 2 --quiet --no-report --shard 0/8 \
  --out shard > sweep.log 2>&1 || fail "the shard sweep failed: $(cat sweep.log)"
cp -r shard other_workload
sed -n 2p shard/results.jsonl | sed -E 's/"batch":[0-9]+/"batch":97/; s/ b=[0-9]+ / b=97 /' \
  >> other_workload/results.jsonl
cp -r shard other_seed
sed -n 2p shard/results.jsonl | sed -E 's/"seed":[0-9]+/"seed":12345/' >> other_seed/results.jsonl
for case in other_workload:"is no workload of profile quick" \
  other_seed:"was measured on data of seed 12345"; do
  folder=${case%%:*}
  said=${case#*:}
  set +e
  "$tool" merge --partial "out_$folder" "$folder" > merge.out 2> merge.err
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "merge of $folder exited $rc, not 2: $(cat merge.out merge.err)"
  grep -q "$said" merge.err || fail "merge of $folder does not say '$said': $(cat merge.err)"
  [ ! -e "out_$folder" ] || fail "the refused merge of $folder made its folder"
done
echo "merge_foreign_line: ok"
