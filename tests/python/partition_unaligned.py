"""Test fixture: attn-tune's own PyTorch decode_v2 (partition 256 only) behind a can_run that
accepts every call, block sizes that do not divide the partition (48) included, and a run that
then splits at the next multiple of the block size. Its answers are right, but the plugin contract
says such a call is refused: verify passes it and notes the accepted block size that breaks the
contract."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_decode_v2 = _torch_kernels()["families"]["decode_v2"]


def _run(call, config):
    bs = call.block_size
    partition = -(-int(config["partition"]) // bs) * bs  # the next multiple of the block size
    _decode_v2["run"](call, {"partition": partition})


def attn_tune_kernels():
    decode = dict(_decode_v2)
    decode.update(params={"partition": [256]}, can_run=None, run=_run)
    return {"name": "partition-unaligned", "version": "0.1", "families": {"decode_v2": decode}}
