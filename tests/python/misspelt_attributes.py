"""Test fixture: attn-tune's own PyTorch decode_v1 declared as objects rather than dicts, with a
misspelt data attribute on the family ("writes_lze") and one on the declaration ("engine_rul"),
and a method whose name is a near miss of one the family lacks ("can_rn" for can_run). Each is
warned about with the name it most likely meant; the family's helper methods of its own
("describe", "_gather") are not, and the kernels still run as declared."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_DECODE = _torch_kernels()["families"]["decode_v1"]


class DecodeV1:
    family = "decode_v1"
    kv_layout = _DECODE.get("kv_layout", "HND")
    writes_lze = True

    def __init__(self):
        self.params = _DECODE.get("params", {})

    def run(self, *args, **kwargs):
        return _DECODE["run"](*args, **kwargs)

    def can_rn(self, *args, **kwargs):
        return True

    def describe(self):
        return "attn-tune's own PyTorch decode, declared as an object"

    def _gather(self):
        return None


class Declaration:
    name = "misspelt-attributes"
    version = "0.1"
    engine_rul = "vllm-cpu"

    def __init__(self):
        self.families = [DecodeV1()]


def attn_tune_kernels():
    return Declaration()
