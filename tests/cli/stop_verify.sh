#!/bin/sh
# verify told to stop (SIGTERM: a CI job's timeout) still writes its JUnit report, with the cases
# that finished and an "interrupted" error testcase, prints its summary and one stop line, and
# ends by the signal (exit status 143), also when the signal comes twice at once. A configuration that hangs (the CPU backend's test hook)
# keeps verify surely running when the signal comes.
#   usage: stop_verify.sh ATTN_TUNE WORKDIR
set -eu
tool=$1
work=$2
fail() {
  echo "stop_verify: $*" >&2
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
cd "$work"
ATTN_TUNE_TEST_FAULTS='hang:decode_v1[split=1]' "$tool" verify --device cpu --intensity quick \
  --families decode_v1 --dtypes fp32 --threads 2 --junit report.xml > out.txt 2> err.txt &
verify=$!
tries=0
until grep -q "^verify: cpu" err.txt 2> /dev/null; do
  tries=$((tries + 1))
  [ "$tries" -lt 200 ] || fail "verify never started: $(cat out.txt err.txt)"
  sleep 0.05
done
sleep 1
# Twice at once, as coreutils' timeout signals the command and then its process group: one stop.
kill -TERM "$verify"
kill -TERM "$verify"
set +e
wait "$verify"
rc=$?
set -e
[ "$rc" -eq 143 ] || fail "the stopped verify exited $rc, not 143: $(cat out.txt err.txt)"
[ "$(grep -c 'stopped by' err.txt)" -eq 1 ] || fail "not one stop line: $(cat err.txt)"
grep -q "^attn-tune: stopped by SIGTERM; the cases that finished are in report.xml$" err.txt ||
  fail "the stop line does not name the report: $(cat err.txt)"
grep -q "passed, .* failed, .* skipped$" out.txt || fail "no summary: $(cat out.txt)"
# The interruption is no kernel's failure: not listed among them, not counted.
grep -q "interrupted" out.txt && fail "the interruption is listed as a failure: $(cat out.txt)"
grep -q "^[0-9]* passed, 0 failed" out.txt || fail "the interruption counts as failed: $(cat out.txt)"
grep -q '<testcase classname="cpu.verify" name="interrupted (stopped by SIGTERM)"' report.xml ||
  fail "the JUnit report has no interrupted testcase: $(cat report.xml)"
grep -q '<error ' report.xml || fail "the interruption is not an error in the JUnit report"
grep -q 'running then, not judged: cpu | decode_v1\[split=1\] | ' report.xml ||
  fail "the interruption does not name the case that was running: $(cat report.xml)"
ls ./*.tmp.* > /dev/null 2>&1 && fail "temporary files left: $(ls)"
echo "stop_verify: ok"
