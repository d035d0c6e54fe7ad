#!/bin/sh
# A sweep told to stop (SIGTERM: a CI job's timeout, `kill`) says so in one line, saying what it
# keeps (before its first measurement: nothing; once a results file was there: where its
# measurements are and how to go on), ends by that signal (exit status 143), takes its worker with
# it, and leaves its folder for `--resume`, which then finishes the profile.
# The sweep is made to stay running without timing tricks: util-linux flock holds this host's
# device lock (in a private lock folder), so the sweep holds its folder and waits for the device.
#   usage: stop_running_sweep.sh ATTN_TUNE FLOCK DEVICE_LOCK_FILE PROFILE WORKDIR
set -eu
tool=$1
flock=$2
device_lock=$3
profile=$4
work=$5
. "$(dirname "$0")/waiting_sweep.sh"
fail() {
  echo "stop_running_sweep: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work" "$(dirname "$device_lock")"
cd "$work"

# Stops the waiting sweep with SIGTERM and lets the device lock go; the sweep's exit status in $rc.
stop_waiting_sweep() {
  kill -TERM "$sweep"
  set +e
  wait "$sweep"
  rc=$?
  set -e
  kill "$holder" 2> /dev/null || true
  wait "$holder" 2> /dev/null || true
}

start_waiting_sweep 30 stopped
stop_waiting_sweep
[ "$rc" -eq 143 ] || fail "the stopped sweep exited $rc, not 143 (SIGTERM): $(cat sweep.log)"
[ "$(grep -c 'stopped by' sweep.log)" -eq 1 ] || fail "not one stop line: $(cat sweep.log)"
grep -q "^attn-tune: stopped by SIGTERM; nothing was measured (stopped holds no results yet)$" sweep.log ||
  fail "the stop line of a sweep that measured nothing does not say so: $(cat sweep.log)"
ls stopped/*.tmp.* > /dev/null 2>&1 && fail "temporary files left: $(ls stopped)"

# A sweep that finds a results file (here --resume of the one above) points at it when stopped.
start_waiting_sweep 30 stopped --resume
stop_waiting_sweep
[ "$rc" -eq 143 ] || fail "the stopped --resume sweep exited $rc, not 143: $(cat sweep.log)"
grep -q "^attn-tune: stopped by SIGTERM; the measurements made so far are in .*stopped/results.jsonl: the same command with --resume carries on$" sweep.log ||
  fail "the stop line does not say where the measurements are: $(cat sweep.log)"

# Its worker went with it (it held the folder's lock open no longer), so the resume starts at once
# and measures the whole profile.
set +e
"$tool" sweep --device cpu --profile "$profile" --threads 2 --no-report --no-wait --resume \
  --out stopped > resume.log 2>&1
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "the resumed sweep exited $rc: $(cat resume.log)"
[ -f stopped/threshold_table.json ] || fail "the resumed sweep wrote no table: $(cat resume.log)"
echo "stop_running_sweep: ok"
