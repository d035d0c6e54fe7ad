# Sourced by the CLI scripts that need a sweep surely running: util-linux flock holds this host's
# device lock (in a private lock folder) for SECONDS, so a sweep started into OUT holds its folder
# and waits for the device. Uses $tool, $flock, $device_lock, $profile and fail(); sets $holder
# (the flock process: killing it lets the lock go) and $sweep (the sweep's pid; its output in
# sweep.log). Arguments after OUT are passed to the sweep.
#   start_waiting_sweep SECONDS OUT [SWEEP ARGUMENTS...]
start_waiting_sweep() {
  seconds=$1
  out=$2
  shift 2
  "$flock" -o "$device_lock" sleep "$seconds" > /dev/null 2>&1 &
  holder=$!
  tries=0
  while "$flock" -n "$device_lock" true 2> /dev/null; do
    tries=$((tries + 1))
    [ "$tries" -lt 100 ] || fail "flock never took $device_lock"
    sleep 0.05
  done
  # The log of an earlier sweep goes first: the new one's redirection truncates it only once that
  # process runs, and the wait below could read "waiting for" from the old one (CI stopped a
  # --resume sweep 0.2 s in, before it had a handler, that way).
  rm -f sweep.log
  "$tool" sweep --device cpu --profile "$profile" --threads 2 --no-report --out "$out" "$@" \
    > sweep.log 2>&1 &
  sweep=$!
  # The sweep has its folder once it waits for the device.
  tries=0
  until grep -q "waiting for" sweep.log 2> /dev/null; do
    tries=$((tries + 1))
    [ "$tries" -lt 200 ] || fail "the sweep never waited for the device: $(cat sweep.log)"
    sleep 0.05
  done
}
