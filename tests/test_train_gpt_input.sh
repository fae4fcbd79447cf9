#!/bin/bash
# train_gpt refuses bad input with one clear line on stderr and exit code 2
# (3 when training diverges), and reads both data formats: a missing or
# empty file, a sequence longer than the data, token ids beyond the
# vocabulary (or any), a corrupt token file, nonsense sizes and flags, a
# --dump-params path that cannot be written, divergence.
set -u
. "$(dirname "$0")/train_gpt_lib.sh"

# expect CODE PATTERN ARGS...: exit CODE, exactly one stderr line matching
expect() {
  local code=$1 pat=$2 rc lines
  shift 2
  "$TG" "$@" >"$T/out" 2>"$T/err"
  rc=$?
  [ $rc -eq "$code" ] || { cat "$T/err"; fail "$* exited $rc, not $code"; }
  lines=$(wc -l <"$T/err")
  [ "$lines" -eq 1 ] || { cat "$T/err"; fail "$*: $lines stderr lines, not 1"; }
  grep -q -- "$pat" "$T/err" || { cat "$T/err"; fail "$*: no '$pat'"; }
}

# the data
expect 2 "cannot open the data file $T/none" --data "$T/none"
: >"$T/empty"
expect 2 "is empty" --data "$T/empty"
printf 'short text\n' >"$T/short"
expect 2 "fewer than --seq-len + 1 = 65" --data "$T/short"
/usr/bin/python3 - "$T" <<'PY'
import struct, sys
d = sys.argv[1]
hdr = lambda n, ver=1: struct.pack('<256i', 20240520, ver, n, *([0] * 253))
ids = [(i * 7) % 300 for i in range(4000)]
open(d + '/tok300', 'wb').write(hdr(len(ids)) + struct.pack('<%dH' % len(ids), *ids))
open(d + '/truncated', 'wb').write(hdr(4000) + struct.pack('<10H', *range(10)))
open(d + '/v9', 'wb').write(hdr(2, ver=9) + b'\0' * 4)
big = [i % 256 for i in range(4000)] + [0xFFFFFFFF]
open(d + '/tokmax', 'wb').write(hdr(len(big), ver=2) + struct.pack('<%dI' % len(big), *big))
PY
expect 2 "holds token id 299 but the vocabulary has 256 entries: pass --vocab 300" \
  --data "$T/tok300" --vocab 256
expect 2 "truncated or corrupt" --data "$T/truncated"
# an id no --vocab can hold (the hint was "pass --vocab 0 or more")
expect 2 "holds token id 4294967295, beyond any vocabulary (--vocab is at most 1073741824): the token file is corrupt" \
  --data "$T/tokmax"
expect 2 "version 9" --data "$T/v9"
# a token file with a vocabulary that holds its ids trains
"$TG" --data "$T/tok300" --vocab 300 --steps 2 --seq-len 16 --batch 2 >"$T/out" 2>&1 \
  || { cat "$T/out"; fail "token file"; }
grep -q "llm.c token file" "$T/out" || { cat "$T/out"; fail "token file not read as one"; }
grep -q "vocabulary 300 (padded 384)" "$T/out" || { cat "$T/out"; fail "padded vocabulary"; }

# nonsense sizes and flags
expect 2 "does not divide --channels 64" --heads 5
expect 2 "--layers 0: expected an integer >= 1" --layers 0
expect 2 "--batch -1: expected an integer >= 1" --batch -1
expect 2 "--zero 2: use 0 (no sharding) or 1 (the AdamW state)" --zero 2
# more than the CPU pool runs (it said "cannot hold this model: Invalid argument")
expect 2 "--threads 5000: the CPU backend runs at most 4096 threads a rank" --threads 5000
# shapes whose parameter count overflowed a size_t
expect 2 "is too big (.* parameters" --layers 1000000000 --channels 1000000000 --heads 1
expect 2 "is too big" --batch 1000000000
expect 2 "--zero x: expected an integer >= 0" --zero x
expect 2 "--steps abc" --steps abc
expect 2 "--lr -1: expected a number >= 0" --lr -1
expect 2 "--seq-len 0" --seq-len 0
expect 2 "unknown flag --bogus" --bogus 1
expect 2 "needs a value" --steps
expect 2 "not a preset" --preset huge
expect 2 "use cpu, cuda or auto" --device gpu
expect 2 "fp32 only" --dtype bf16 --device cpu
"$TG" --device cuda --steps 1 >"$T/out" 2>"$T/err"
rc=$?
# without CUDA in the build: a usage error; with it but no GPU: the runtime says so
if [ $rc -eq 2 ]; then grep -q "built without CUDA" "$T/err" || fail "cuda: $(cat "$T/err")"
elif [ $rc -ne 0 ]; then grep -q "a GPU was asked for" "$T/err" || fail "cuda: $(cat "$T/err")"
fi

# --dump-params is opened at the start: a path that cannot be written is
# exit 2 before training (it trained, then failed); an existing file is
# replaced by the parameters only at the end
expect 2 "--dump-params $T/none/x.bin: No such file or directory" --steps 3 \
  --dump-params "$T/none/x.bin"
grep -q "^step" "$T/out" && { cat "$T/out"; fail "--dump-params: trained before failing"; }
head -c 3000000 /dev/zero >"$T/dump.bin"
"$TG" --steps 1 --val-every 0 --val-batches 1 --dump-params "$T/dump.bin" >"$T/out" 2>&1 ||
  { cat "$T/out"; fail "--dump-params over an existing file"; }
n=$(sed -n 's/.*: \([0-9]*\) parameters$/\1/p' "$T/out")
[ "$(stat -c %s "$T/dump.bin")" = $((n * 4)) ] || fail "--dump-params: not $n floats"

# divergence stops the job: exit 3 and a message
expect 3 "the gradient norm .* exceeds --stop-grad-norm 0.5 at step 1" --stop-grad-norm 0.5
expect 3 "the loss is -*\(nan\|inf\) at step [0-9]*: training diverged" --lr 1e30 --warmup 0 \
  --stop-grad-norm 0 --steps 4

# --help lists the flags and exits 0
"$TG" --help >"$T/help" || fail "--help exit code"
for f in --preset --layers --heads --channels --seq-len --vocab --data --steps --batch \
         --accum --lr --seed --val-every --dtype --device --dump-params --stop-grad-norm \
         --zero; do
  grep -q -- "$f" "$T/help" || fail "--help lacks $f"
done
echo "test_train_gpt_input: ok"
