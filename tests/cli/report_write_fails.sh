#!/bin/sh
# A sweep whose report cannot be written (a file size limit the results and the table fit under,
# the page not) keeps its results and table, removes the earlier report.html, which would show
# the earlier table, says so in one line and exits 4.
#   usage: report_write_fails.sh ATTN_TUNE PROFILE WORKDIR
set -eu
tool=$1
profile=$2
work=$3
fail() {
  echo "report_write_fails: $*" >&2
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$tool" sweep --device cpu --profile "$profile" --threads 2 --quiet --out out > first.log 2>&1 ||
  fail "the first sweep failed: $(cat first.log)"
[ -s out/report.html ] || fail "the first sweep wrote no report"
[ "$(wc -c < out/report.html)" -gt 30720 ] || fail "the report fits under the limit: no test"
set +e
(
  ulimit -f 30
  exec "$tool" sweep --device cpu --profile "$profile" --threads 2 --quiet --out out --resume
) > second.out 2> second.err
rc=$?
set -e
[ "$rc" -eq 4 ] || fail "the sweep whose report failed exited $rc, not 4: $(cat second.out second.err)"
grep -q "^sweep: warning: no report: .*; the earlier report.html was removed$" second.err ||
  fail "no one-line warning saying the earlier report was removed: $(cat second.err)"
[ ! -e out/report.html ] || fail "the earlier report.html is still there"
[ -s out/threshold_table.json ] || fail "the table is gone"
"$tool" table show out/threshold_table.json > /dev/null || fail "the table does not read"
echo "report_write_fails: ok"
