"""The Python side of attn-tune's Python bridge (src/python/*.cpp: the library compiles this file
in, and interpreter.cpp runs it as the module `_attn_tune_bridge`).

It turns `python:MODULE[:FACTORY]` into kernels: it imports MODULE, finds what it declares
(docs/python-kernels.md), normalises the declaration for the C side, wraps attn-tune's buffers
(DLPack capsules made by the C side) as torch tensors, calls the module's functions and turns
whatever they raise into one line for a failure record.
"""

import difflib
import hashlib
import importlib
import logging
import os
import sys
import traceback
import types

FAMILIES = ("decode_v1", "decode_v2", "prefill")
LAYOUTS = ("HND", "NHD", "vllm")
DTYPES = ("fp32", "fp16", "bf16")
# The KV cache's storage dtype (plugin ABI 4's attn_kv_dtype, in its order): "auto" is the query's.
KV_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2")
# What a family may list in "kv_dtypes" (vLLM's and torch's names; the names every other reader
# of a cache dtype takes, src/model/dtype.h), and the cache each means.
KV_DTYPE_NAMES = {"fp8_e4m3": "fp8_e4m3", "fp8": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
                  "fp8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3",
                  "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2"}
# torch's dtype for each fp8 cache, where the module's torch has it (2.1 and later).
TORCH_FP8 = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
# The seed engine's config class takes these keywords (its AttnDispatchConfig).
SEED_CONFIG_FIELDS = ("num_heads", "num_kv_heads", "head_dim", "scale", "is_causal",
                      "window_left", "window_right", "block_size", "softcap")
# Frames of the module's traceback kept in a failure line.
TRACEBACK_FRAMES = 3


class DeclarationError(Exception):
    """The module's declaration is not usable; the message is the one-line reason."""


def _get(obj, key, default=None):
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _has(obj, key):
    return key in obj if isinstance(obj, dict) else hasattr(obj, key)


class _OnceHandler(logging.Handler):
    """Engine modules log a warning on every call of a fallback path; attn-tune calls them
    thousands of times. Each distinct message is printed once, to stderr."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = set()

    def emit(self, record):
        try:
            text = "%s: %s" % (record.name, record.getMessage())
        except Exception:  # a bad format string in the engine's log call
            text = "%s: %s" % (record.name, record.msg)
        if text not in self.seen:
            self.seen.add(text)
            sys.stderr.write("python: %s %s (printed once)\n" % (record.levelname, text))
            sys.stderr.flush()


def _quiet_repeated_logging():
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_OnceHandler())


# ---------------------------------------------------------------------------------------------
# Finding the kernels a module declares


class Family:
    def __init__(self, name, kv_layout, writes_lse, params, run, can_run, prepare=None,
                 workspace=None, kv_dtypes=()):
        self.name = name
        self.kv_layout = kv_layout
        self.writes_lse = writes_lse
        self.params = params  # [(name, [ints])] in declaration order
        self.run = run
        self.can_run = can_run
        self.prepare = prepare  # prepare(call, config) -> dict, untimed, once per run
        self.workspace = workspace  # workspace(call, config) -> bytes attn-tune allocates
        self.kv_dtypes = tuple(kv_dtypes)  # the fp8 caches it reads ("fp8_e4m3", "fp8_e5m2")


# The engine rules a declaration may name (the kernel set's own dispatch rule, which regret
# compares the tuned table against).
ENGINE_RULES = ("vllm-cuda", "vllm-cpu", "seed")


class Kernels:
    def __init__(self, name, version, device, families, module, spec, engine_rule=""):
        self.name = name
        self.version = version
        self.device = device
        self.families = families  # [Family]
        self.module = module
        self.spec = spec
        self.engine_rule = engine_rule


def _parse_spec(spec):
    module_name, _, factory = spec.partition(":")
    if not module_name or any(not part.isidentifier() for part in module_name.split(".")):
        raise DeclarationError("'%s' is not python:MODULE[:FACTORY] (MODULE is a dotted module "
                               "name, as after `import`)" % ("python:" + spec))
    if factory and not factory.isidentifier():
        raise DeclarationError("'%s' names factory '%s', which is not a Python identifier"
                               % ("python:" + spec, factory))
    if not factory and spec.endswith(":"):
        raise DeclarationError("'%s' ends with ':' but names no factory (python:MODULE, or "
                               "python:MODULE:FACTORY)" % ("python:" + spec))
    return module_name, factory


def _module_version(module):
    version = getattr(module, "__version__", None)
    if version is None and "." in module.__name__:
        top = sys.modules.get(module.__name__.split(".")[0])
        version = getattr(top, "__version__", None)
    return str(version) if version is not None else "unversioned"


# The keys a declaration's dicts are read for (docs/python-kernels.md); any other key in a dict
# is most likely a misspelling, which would otherwise pass unnoticed ("writes_lze" leaves the
# lse unchecked), so it is warned about. A declaration that is an object is read for the same
# names as attributes: its data attributes are held to them like a dict's keys, while a method
# (an object has helpers of its own) is warned about only when its name is a near miss of one
# the object lacks ("can_rn" without "can_run").
DECLARATION_KEYS = ("name", "version", "device", "engine_rule", "families")
FAMILY_KEYS = ("run", "kv_layout", "writes_lse", "params", "can_run", "prepare", "workspace",
               "kv_dtypes", "family")
_warned_keys = set()
# Whether this module's declaration warnings were printed already, by the process that read its
# declaration before this one (ATTN_TUNE_PYTHON_DECLARED lists the specs it read).
_declaration_said = False


def _declared_names(decl):
    """(name, is_method) of what a declaration holds: a dict's keys, or an object's public
    attributes (its own and its classes')."""
    if isinstance(decl, dict):
        return [(key, False) for key in decl]
    if isinstance(decl, (types.ModuleType, type)) or decl is None:
        return []  # a module or a class holds all manner of names; nothing to judge
    names = list(getattr(decl, "__dict__", {}))
    for cls in type(decl).__mro__[:-1]:  # not object's own
        names += [n for n in vars(cls) if n not in names]
    out = []
    for name in names:
        if not isinstance(name, str) or name.startswith("_"):
            continue
        try:
            value = getattr(decl, name)
        except Exception:  # a property that raises: not ours to judge
            continue
        out.append((name, callable(value)))
    return out


def _warn_unknown_keys(decl, known, where):
    if _declaration_said:
        return
    names = _declared_names(decl)
    held = {name for name, _ in names}
    for key, method in names:
        if key in known or (where, key) in _warned_keys:
            continue
        near = difflib.get_close_matches(str(key), known, n=1)
        if method and not (near and near[0] not in held):
            continue  # a helper of the object's own
        _warned_keys.add((where, key))
        what = "key" if isinstance(decl, dict) else "attribute"
        sys.stderr.write("python: warning: %s: %s %r is not one attn-tune reads (%s); ignored\n"
                         % (where, what, key, "did you mean %r?" % near[0] if near
                            else "it reads " + ", ".join(known)))
        sys.stderr.flush()


def _family(name, decl, who):
    if name not in FAMILIES:
        raise DeclarationError("%s declares family '%s'; families are %s"
                               % (who, name, ", ".join(FAMILIES)))
    _warn_unknown_keys(decl, FAMILY_KEYS, "%s: family %s" % (who, name))
    run = _get(decl, "run")
    if not callable(run):
        raise DeclarationError("%s: family %s has no callable 'run'" % (who, name))
    can_run = _get(decl, "can_run")
    if can_run is not None and not callable(can_run):
        raise DeclarationError("%s: family %s has a 'can_run' that is not callable" % (who, name))
    for hook in ("prepare", "workspace"):
        if _get(decl, hook) is not None and not callable(_get(decl, hook)):
            raise DeclarationError("%s: family %s has a '%s' that is not callable"
                                   % (who, name, hook))
    layout = _get(decl, "kv_layout", "HND")
    if layout not in LAYOUTS:
        raise DeclarationError("%s: family %s declares kv_layout %r; layouts are %s"
                               % (who, name, layout, ", ".join(LAYOUTS)))
    params = []
    for pname, values in dict(_get(decl, "params", None) or {}).items():
        if isinstance(values, int):
            values = [values]
        try:
            ints = [int(v) for v in values]
        except (TypeError, ValueError):
            raise DeclarationError("%s: parameter %s of %s must list integers, not %r"
                                   % (who, pname, name, values)) from None
        if any(isinstance(v, bool) or int(v) != v for v in values):
            raise DeclarationError("%s: parameter %s of %s must list integers, not %r"
                                   % (who, pname, name, values))
        # attn-tune keeps parameter values in 32 bits: 2**40 + 7 must not arrive as 7.
        wide = [v for v in ints if not -2**31 <= v < 2**31]
        if wide:
            raise DeclarationError("%s: parameter %s of %s has value %d, outside 32 bits"
                                   % (who, pname, name, wide[0]))
        params.append((str(pname), ints))
    kv_dtypes = _get(decl, "kv_dtypes", None) or []
    if isinstance(kv_dtypes, str):
        kv_dtypes = [kv_dtypes]
    caches = []
    for kv in kv_dtypes:
        if kv not in KV_DTYPE_NAMES:
            raise DeclarationError("%s: family %s declares kv_dtypes %r; the fp8 caches are %s"
                                   % (who, name, kv, ", ".join(sorted(KV_DTYPE_NAMES))))
        if KV_DTYPE_NAMES[kv] not in caches:
            caches.append(KV_DTYPE_NAMES[kv])
    # A boolean (numpy's too), not any truthy value: "False" from a config file would be True.
    writes_lse = _get(decl, "writes_lse", False)
    boolean = (writes_lse is None or type(writes_lse).__name__ in ("bool", "bool_")
               or (isinstance(writes_lse, int) and writes_lse in (0, 1)))
    if not boolean:
        raise DeclarationError("%s: family %s declares writes_lse %r; it is True or False"
                               % (who, name, writes_lse))
    return Family(name, layout, bool(writes_lse), params, run, can_run,
                  _get(decl, "prepare"), _get(decl, "workspace"), caches)


def _declared_kernels(module, decl, spec):
    who = "python:" + spec
    _warn_unknown_keys(decl, DECLARATION_KEYS, who)
    families_decl = _get(decl, "families")
    if families_decl is None:
        raise DeclarationError("%s declares no 'families' (a dict of family name -> run, "
                               "kv_layout, writes_lse, params, can_run)" % who)
    if not isinstance(families_decl, dict):
        families_decl = {_get(f, "family"): f for f in families_decl}
    families = [_family(n, d, who) for n, d in families_decl.items()]
    if not families:
        raise DeclarationError("%s declares no families" % who)
    device = _get(decl, "device", "cpu")
    if device not in ("cpu", "cuda"):
        raise DeclarationError("%s declares device %r; it must be 'cpu' or 'cuda'" % (who, device))
    name = _get(decl, "name") or module.__name__
    version = _get(decl, "version") or _module_version(module)
    engine_rule = _get(decl, "engine_rule") or ""
    if engine_rule and engine_rule not in ENGINE_RULES:
        raise DeclarationError("%s names engine rule %r; the rules are %s (or none)"
                               % (who, engine_rule, ", ".join(ENGINE_RULES)))
    return Kernels(str(name), str(version), device, families, module, spec, str(engine_rule))


class _SeedConfig(types.SimpleNamespace):
    """The config object handed to a seed-shaped module that defines no AttnDispatchConfig."""


def _seed_config(module, call):
    fields = dict(num_heads=call.num_heads, num_kv_heads=call.num_kv_heads,
                  head_dim=call.head_dim, scale=call.scale, is_causal=call.causal,
                  window_left=call.window_left, window_right=call.window_right,
                  block_size=call.block_size, softcap=call.softcap)
    cls = getattr(module, "AttnDispatchConfig", None)
    if cls is None:
        return _SeedConfig(max_context_len=call.max_k_len, **fields)
    try:
        return cls(**fields)
    except TypeError:
        # An older config class without some of these keywords: build it with the ones it
        # takes and set the others as attributes where it allows, as the dispatch code reads
        # them from the object.
        import inspect
        params = inspect.signature(cls).parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            raise
        cfg = cls(**{k: v for k, v in fields.items() if k in params})
        for k, v in fields.items():
            if k not in params:
                try:
                    setattr(cfg, k, v)
                except AttributeError:
                    pass
        return cfg


def _seed_kernels(module, spec):
    """A module with the seed engine's dispatch_prefill and dispatch_decode: decode is decode_v1
    (the seed's dispatch_decode never chooses v2), prefill is prefill, the cache HND."""

    def decode(call, config):
        cfg = _seed_config(module, call)
        module.dispatch_decode(cfg, call.out, call.query, call.key_cache, call.value_cache,
                               call.block_tables, call.context_lens, call.max_k_len)

    def prefill(call, config):
        cfg = _seed_config(module, call)
        result = module.dispatch_prefill(cfg, call.query, call.key_cache, call.value_cache,
                                         call.block_tables, call.cu_seqlens_q, call.cu_seqlens_k,
                                         call.max_q_len, call.max_k_len)
        shape = tuple(call.out.shape)
        if result is None or not hasattr(result, "shape"):
            raise TypeError("dispatch_prefill returned %s, not a tensor" % type(result).__name__)
        if tuple(result.shape) != shape:
            raise ValueError("dispatch_prefill returned shape %s, the query's is %s"
                             % (tuple(result.shape), shape))
        # copy_ would convert any dtype in silence; an engine's caller gets what it returned.
        if getattr(result, "dtype", None) != call.out.dtype:
            raise TypeError("dispatch_prefill returned dtype %s, the query's is %s"
                            % (str(getattr(result, "dtype", None)).replace("torch.", ""),
                               str(call.out.dtype).replace("torch.", "")))
        call.out.copy_(result)

    families = [Family("decode_v1", "HND", False, [], decode, None),
                Family("prefill", "HND", False, [], prefill, None)]
    return Kernels(module.__name__, _module_version(module), "cpu", families, module, spec, "seed")


def _kernels(spec, attn_python_dir):
    module_name, factory = _parse_spec(spec)
    # attn-tune's own python/ (attn_tune_torch) after everything the user's environment puts
    # on the path, so that their modules win.
    if attn_python_dir and os.path.isdir(attn_python_dir) and attn_python_dir not in sys.path:
        sys.path.append(attn_python_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise DeclarationError("no module named '%s' on this Python's path (%s; set "
                                   "PYTHONPATH or activate the engine's virtual environment)"
                                   % (e.name, sys.executable or "embedded Python")) from None
        raise DeclarationError("importing %s failed: %s" % (module_name, describe(e))) from None
    except Exception as e:
        raise DeclarationError("importing %s failed: %s" % (module_name, describe(e))) from None
    who = "python:" + spec
    if factory and not hasattr(module, factory):
        raise DeclarationError("%s: module %s has no '%s'" % (who, module_name, factory))
    name = factory or ("attn_tune_kernels" if hasattr(module, "attn_tune_kernels") else None)
    if name:
        target = getattr(module, name)
        decl = target() if callable(target) else target
        if decl is None:
            raise DeclarationError("%s: %s.%s%s is None, not a declaration (a dict or an object "
                                   "with 'families', docs/python-kernels.md; does the factory "
                                   "return it?)" % (who, module_name, name,
                                                    "()" if callable(target) else ""))
        return _declared_kernels(module, decl, spec)
    if callable(getattr(module, "dispatch_prefill", None)) and \
            callable(getattr(module, "dispatch_decode", None)):
        return _seed_kernels(module, spec)
    raise DeclarationError("%s declares no kernels: define attn_tune_kernels() (docs/"
                           "python-kernels.md), name a factory as python:MODULE:FACTORY, or "
                           "define the seed engine's dispatch_prefill and dispatch_decode" % who)


def _file_sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _imported_beside(base, skip):
    """The .py files of the modules imported so far from under folder `base`, less `skip` (a
    folder whose files are counted already). None when `base` holds installed packages
    (site-packages, the standard library): those are not the kernels' own code."""
    parts = os.path.abspath(base).split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return []
    for lib in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        if lib and os.path.abspath(base).startswith(os.path.join(os.path.abspath(lib), "lib")):
            return []
    out = set()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if not f or not f.endswith(".py"):
            continue
        f = os.path.abspath(f)
        if f.startswith(os.path.abspath(base) + os.sep) and not (
                skip and f.startswith(os.path.abspath(skip) + os.sep)):
            out.add(f)
    return sorted(out)


def _sources_sha256(module):
    """SHA-256 of the module's source, so a table names the code it timed: its file, or every
    .py file of its top-level package, as "relative/path:sha256\n" lines, sorted; with the
    modules it imported from the same folder (a helper beside a single-file module, a module
    beside the package) added as lines too. A single file that imports nothing beside it is
    hashed alone, as sha256sum would. Returns (sha256, the file or package folder shown, the
    relative paths hashed, sorted)."""
    path = getattr(module, "__file__", None)
    if not path:
        return hashlib.sha256(module.__name__.encode()).hexdigest(), "", []
    top = sys.modules.get(module.__name__.split(".")[0], module)
    top_file = getattr(top, "__file__", None) or path
    lines = []
    if os.path.basename(top_file) == "__init__.py":
        root = os.path.dirname(top_file)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in filenames:
                if f.endswith(".py"):
                    full = os.path.join(dirpath, f)
                    lines.append("%s:%s\n" % (os.path.relpath(full, root), _file_sha256(full)))
        beside = os.path.dirname(root)
        skip, shown = root, root
    else:
        beside = os.path.dirname(path)
        skip, shown = None, path
    extra = [f for f in _imported_beside(beside, skip) if f != os.path.abspath(path)]
    if not lines and not extra:
        return _file_sha256(path), shown, [os.path.basename(path)]
    if not lines:
        lines.append("%s:%s\n" % (os.path.basename(path), _file_sha256(path)))
    for f in extra:
        lines.append("%s:%s\n" % (os.path.relpath(f, beside), _file_sha256(f)))
    lines.sort()
    return (hashlib.sha256("".join(lines).encode()).hexdigest(), shown,
            [line.rsplit(":", 1)[0] for line in lines])


_KERNELS = None


def load(spec, attn_python_dir):
    """Imports the module and returns its declaration for the C side:
    (name, version, device, [(family, layout, writes_lse, [(param, [values])], kv_dtypes)], sha256,
    path, engine_rule, has_prepare, [the files the sha256 is over]), family and layout as their
    numbers in the plugin ABI (their places in FAMILIES and LAYOUTS), kv_dtypes as the ABI's mask
    of the fp8 caches the family reads (bit i for KV_DTYPES[i]). Raises DeclarationError (its message is the reason) or any
    import error."""
    global _KERNELS, _declaration_said
    _quiet_repeated_logging()
    _declaration_said = spec in os.environ.get("ATTN_TUNE_PYTHON_DECLARED", "").split("\n")
    k = _kernels(spec, attn_python_dir)
    _KERNELS = k
    sha, path, files = _sources_sha256(k.module)
    fams = [(FAMILIES.index(f.name), LAYOUTS.index(f.kv_layout), f.writes_lse, f.params,
             sum(1 << KV_DTYPES.index(kv) for kv in f.kv_dtypes))
            for f in k.families]
    has_prepare = any(f.prepare is not None for f in k.families)
    return (k.name, k.version, k.device, fams, sha, path, k.engine_rule, has_prepare, files)


# ---------------------------------------------------------------------------------------------
# Calls


class Call:
    """One attention call as a kernel sees it: SPEC.md's fields as attributes, the buffers as
    torch tensors viewing attn-tune's memory (None in can_run), and every sequence's query and
    key lengths as lists of ints (q_lens, k_lens: in can_run too).

    kv_dtype is "auto" (the caches have the query's dtype) or the fp8 cache's "fp8_e4m3" /
    "fp8_e5m2" (only for a family that lists it in kv_dtypes). An fp8 cache arrives as
    torch.float8_e4m3fn / float8_e5m2 where this torch has them, else as torch.uint8 holding the
    bytes; k_scale and v_scale are then fp32 tensors of shape [1] (per tensor) or [num_kv_heads],
    None for "auto". num_kv_scales is that length (0 for "auto"), in can_run too."""

    __slots__ = ("family", "dtype", "kv_layout", "num_heads", "num_kv_heads", "head_dim",
                 "block_size", "scale", "softcap", "causal", "window_left", "window_right",
                 "batch", "num_rows", "max_q_len", "max_k_len", "num_blocks",
                 "max_blocks_per_seq", "threads", "query", "key_cache", "value_cache",
                 "block_tables", "context_lens", "cu_seqlens_q", "cu_seqlens_k", "out", "lse",
                 "device", "workspace", "prepared", "q_lens", "k_lens", "kv_dtype",
                 "num_kv_scales", "k_scale", "v_scale")

    def __repr__(self):
        return "Call(%s)" % ", ".join("%s=%r" % (s, getattr(self, s)) for s in self.__slots__
                                      if not hasattr(getattr(self, s), "shape"))


_SCALARS = ("family", "dtype", "kv_layout", "num_heads", "num_kv_heads", "head_dim", "block_size",
            "scale", "softcap", "causal", "window_left", "window_right", "batch", "num_rows",
            "max_q_len", "max_k_len", "num_blocks", "max_blocks_per_seq", "threads", "q_lens",
            "k_lens", "kv_dtype", "num_kv_scales")
_TENSORS = ("query", "key_cache", "value_cache", "block_tables", "context_lens", "cu_seqlens_q",
            "cu_seqlens_k", "out", "lse", "k_scale", "v_scale")


def make_call(scalars, capsules):
    """A Call from the C side's scalars (in _SCALARS order; family, dtype and layout as indices)
    and DLPack capsules (in _TENSORS order, None where absent; all None for can_run)."""
    c = Call()
    for name, value in zip(_SCALARS, scalars):
        setattr(c, name, value)
    c.family = FAMILIES[c.family]
    c.dtype = DTYPES[c.dtype]
    c.kv_layout = LAYOUTS[c.kv_layout]
    c.kv_dtype = KV_DTYPES[c.kv_dtype]
    c.causal = bool(c.causal)
    c.device = _KERNELS.device if _KERNELS else "cpu"
    c.workspace = None
    c.prepared = None
    if capsules is None:
        for name in _TENSORS:
            setattr(c, name, None)
    else:
        from torch.utils.dlpack import from_dlpack
        for name, cap in zip(_TENSORS, capsules):
            setattr(c, name, from_dlpack(cap) if cap is not None else None)
        if c.kv_dtype != "auto":
            _view_fp8(c)
    return c


def _view_fp8(call):
    """An fp8 cache arrives from the C side as uint8 bytes; where this torch has the format's
    dtype, the caches are viewed as it (no copy)."""
    import torch
    fp8 = getattr(torch, TORCH_FP8[call.kv_dtype], None)
    if fp8 is not None:
        call.key_cache = call.key_cache.view(fp8)
        call.value_cache = call.value_cache.view(fp8)


def _family_at(index):
    return _KERNELS.families[index]


def can_run(index, config, call):
    """None, or the reason the family's can_run gives for refusing."""
    fam = _family_at(index)
    if fam.can_run is None:
        return None
    why = fam.can_run(call, config)
    if why is None or why is True or why == "":
        return None
    if why is False:
        return "can_run refused without a reason"
    return str(why)


def workspace_bytes(index, config, call):
    """The bytes of scratch the family's `workspace` asks for (0 without one)."""
    fam = _family_at(index)
    if fam.workspace is None:
        return 0
    n = fam.workspace(call, config)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError("workspace() returned %r, not a byte count >= 0" % (n,))
    return n


def set_workspace(call, capsule):
    """Hands the run's workspace (a DLPack capsule of uint8, or None) to the call."""
    if capsule is None:
        call.workspace = None
    else:
        from torch.utils.dlpack import from_dlpack
        call.workspace = from_dlpack(capsule)


def _tensor_ranges(value, out):
    """(data_ptr, bytes) of every torch tensor in `value` or in a list/tuple of them."""
    if isinstance(value, (list, tuple)):
        for v in value:
            _tensor_ranges(v, out)
        return
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_tensor(value) or value.numel() == 0:
        return
    if value.is_contiguous():
        out.append((value.data_ptr(), value.numel() * value.element_size()))
    else:
        storage = value.untyped_storage() if hasattr(value, "untyped_storage") else \
            value.storage()
        nbytes = storage.nbytes() if hasattr(storage, "nbytes") else \
            storage.size() * value.element_size()
        out.append((storage.data_ptr(), nbytes))


def prepare(index, config, call, stream):
    """Runs the family's prepare (untimed, once per prepared run) and returns (state, ranges):
    the dict it made, kept for every run as call.prepared, and the (address, bytes) of the tensors
    among its values, which attn-tune evicts from the caches before each timed repetition."""
    fam = _family_at(index)
    if fam.prepare is None:
        return (None, [])
    if _KERNELS.device == "cuda":
        import torch
        with torch.cuda.stream(_stream(torch, stream, call)):
            state = fam.prepare(call, config)
            torch.cuda.current_stream().synchronize()
    else:
        state = fam.prepare(call, config)
    if state is None:
        return (None, [])
    if not isinstance(state, dict):
        raise TypeError("prepare() returned %s, not a dict" % type(state).__name__)
    ranges = []
    for value in state.values():
        _tensor_ranges(value, ranges)
    return (state, ranges)


_streams = {}
_threads = [0]


def _stream(torch, stream, call):
    key = (stream, call.out.device.index)
    s = _streams.get(key)
    if s is None:
        s = _streams[key] = torch.cuda.ExternalStream(stream, device=call.out.device)
    return s
# Private memory pools for calls captured into a CUDA graph (`--timing graph`), one per output
# buffer, i.e. per prepared run: what torch allocates while attn-tune captures must stay the
# graph's, or a replay would write into memory torch has since handed to someone else.
_graph_pools = {}


def _capture_pool(torch, call):
    """A context manager that routes this thread's torch allocations to the run's private pool
    while the stream is being captured."""
    device = call.out.device
    key = (device.index, call.out.data_ptr())
    use_mem_pool = getattr(torch.cuda, "use_mem_pool", None)
    mem_pool = getattr(torch.cuda, "MemPool", None)
    if use_mem_pool is None or mem_pool is None:
        raise RuntimeError("timing Python kernels as a CUDA graph needs torch.cuda.MemPool and "
                           "torch.cuda.use_mem_pool (torch %s has neither): time with "
                           "--timing events" % torch.__version__)
    pool = _graph_pools.get(key)
    if pool is None:
        pool = _graph_pools[key] = mem_pool()
    return use_mem_pool(pool, device=device)


def run(index, config, call, stream):
    fam = _family_at(index)
    if _KERNELS.device == "cuda":
        import torch
        with torch.cuda.stream(_stream(torch, stream, call)):
            if torch.cuda.is_current_stream_capturing():
                with _capture_pool(torch, call):
                    fam.run(call, config)
            else:
                fam.run(call, config)
        return
    if call.threads != _threads[0] and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(max(1, call.threads))
        _threads[0] = call.threads
    fam.run(call, config)


def describe(exc):
    """One line: the exception and where it came from, the last TRACEBACK_FRAMES frames of the
    traceback outside this bridge, innermost first."""
    if isinstance(exc, DeclarationError):
        return str(exc)
    # Python's own import machinery (<frozen importlib._bootstrap>, importlib.import_module)
    # says nothing about the module: its frames are left out too.
    machinery = os.sep + "importlib" + os.sep
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename != __file__ and not f.filename.startswith("<attn-tune")
              and not f.filename.startswith("<frozen ") and machinery not in f.filename]
    where = ["%s:%d in %s" % (os.path.basename(f.filename), f.lineno, f.name)
             for f in frames[-TRACEBACK_FRAMES:]]
    text = " ".join(str(exc).split())  # one line
    head = type(exc).__name__ + (": " + text if text else "")
    if not where:
        return head
    more = "" if len(frames) <= TRACEBACK_FRAMES else " <- ..."
    return "%s (at %s%s)" % (head, " <- ".join(reversed(where)), more)
