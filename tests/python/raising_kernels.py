"""Test fixture: Python kernels declared through the protocol whose decode_v1 raises inside a
helper, and whose prefill refuses every call in can_run. The bridge must turn the exception into
a failure line with the exception and the frames it came from, and the refusal into a skip."""


def _gather(call):
    raise ValueError("block table entry %d is out of range" % 7)


def _decode(call, config):
    _gather(call)


def _prefill(call, config):
    raise AssertionError("never called: can_run refuses")


def attn_tune_kernels():
    return {
        "name": "raising-kernels",
        "version": "0.1",
        "families": {
            "decode_v1": {"run": _decode},
            "prefill": {"run": _prefill, "can_run": lambda call, config: "prefill is not here"},
        },
    }
