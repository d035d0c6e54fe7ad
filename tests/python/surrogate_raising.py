"""Test fixture: a decode_v1 whose exception message holds a lone surrogate, as a path decoded
with surrogateescape does (os.fsdecode of the byte 0xff gives "\\udcff"). Such a str has no UTF-8
encoding as it is; the bridge must still report the failure with its type and the surrogate
escaped, not crash the worker."""


class CacheFileError(OSError):
    pass


def _decode(call, config):
    path = b"/models/kv-\xff.bin".decode("utf-8", "surrogateescape")
    raise CacheFileError("cannot map %s" % path)


def attn_tune_kernels():
    return {
        "name": "surrogate-raising",
        "version": "0.1",
        "families": {"decode_v1": {"run": _decode}},
    }
