#!/bin/sh
# verify --dump-failures where the dumps cannot be written (a file size limit: a full disk does the
# same): one warning line says the dumping stopped, and every failure is still judged and
# diagnosed, the exit code 1 for the failures.
#   usage: dumps_stop_when_full.sh ATTN_TUNE PLUGIN WORKDIR
set -eu
tool=$1
plugin=$2
work=$3
fail() {
  echo "dumps_stop_when_full: $*" >&2
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
cd "$work"
set +e
# The limit on attn-tune alone: its output goes through a pipe to a writer without one.
(
  (
    ulimit -f 4
    exec "$tool" verify --kernels "$plugin" --device cpu --threads 2 --intensity quick \
      --families decode_v2 --dtypes fp32 --kv-dtypes auto --dump-failures dumps
  ) 2>&1
  echo "exit=$?"
) | cat > out.txt
rc=$(sed -n 's/^exit=//p' out.txt)
set -e
[ "$rc" -eq 1 ] || fail "verify exited $rc, not 1: $(tail -5 out.txt)"
[ "$(grep -c 'dump-failures stopped' out.txt)" -eq 1 ] ||
  fail "not one line saying the dumps stopped: $(grep 'dump' out.txt | head -5)"
grep -q "^verify: warning: --dump-failures stopped: cannot write dumps/.*: File too large; the failures after it are judged but not dumped$" out.txt ||
  fail "the warning does not say why: $(grep 'dump-failures stopped' out.txt)"
grep -q "No space left\|File too large" out.txt && grep "^FAIL" out.txt | grep -q "File too large" &&
  fail "a failure line carries the I/O error instead of its judgement"
grep -q "the last key of each partition" out.txt || fail "the failures lost their diagnosis"
ls dumps/*.tmp.* > /dev/null 2>&1 && fail "temporary dump files left: $(ls dumps)"
echo "dumps_stop_when_full: ok"
