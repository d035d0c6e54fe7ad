"""Test fixture: Python kernels that misbehave where $ATTN_TEST_MODULE says (issue 31).

ATTN_TEST_MODULE is "ENTRY:ACTION". ENTRY is where: "import" (the module's own top level),
"factory" (attn_tune_kernels()), or one of the family's hooks "can_run", "workspace",
"prepare", "run". ACTION is what: "segv" (a read of address 0 through ctypes), "abort"
(os.abort()), "exit0" and "exit7" (os._exit, which skips every handler), "hang" (sleeps for
ever), "raise" (a RuntimeError). Anything else, or no variable: a correct decode_v1 in plain
PyTorch, so that the harness can check the module passes when it is told to behave.
"""
import ctypes
import os
import time

import torch

ENTRY, _, ACTION = os.environ.get("ATTN_TEST_MODULE", "").partition(":")


def _misbehave(where):
    if where != ENTRY:
        return
    if ACTION == "segv":
        ctypes.string_at(0)
    elif ACTION == "abort":
        os.abort()
    elif ACTION == "exit0":
        os._exit(0)
    elif ACTION == "exit7":
        os._exit(7)
    elif ACTION == "hang":
        while True:
            time.sleep(1)
    elif ACTION == "raise":
        raise RuntimeError("hostile_module raised in " + where)


_misbehave("import")


def _decode(call, config):
    _misbehave("run")
    # One query token per sequence over its paged keys, in HND ([blocks, kv_heads, slots, dim]).
    group = call.num_heads // call.num_kv_heads
    for b in range(call.batch):
        n = call.k_lens[b]
        blocks = call.block_tables[b, : (n + call.block_size - 1) // call.block_size].long()
        k = call.key_cache[blocks].permute(1, 0, 2, 3).reshape(call.num_kv_heads, -1, call.head_dim)
        v = call.value_cache[blocks].permute(1, 0, 2, 3).reshape(call.num_kv_heads, -1, call.head_dim)
        k = k[:, :n].float().repeat_interleave(group, 0)
        v = v[:, :n].float().repeat_interleave(group, 0)
        q = call.query[b].float()
        s = torch.einsum("hd,hkd->hk", q, k) * call.scale
        p = torch.softmax(s, dim=-1)
        call.out[b] = torch.einsum("hk,hkd->hd", p, v).to(call.out.dtype)


def _can_run(call, config):
    _misbehave("can_run")
    if call.softcap != 0 or call.window_left >= 0 or call.window_right >= 0:
        return "hostile_module computes plain attention only"
    return None


def _workspace(call, config):
    _misbehave("workspace")
    return 0


def _prepare(call, config):
    _misbehave("prepare")
    return None


def attn_tune_kernels():
    _misbehave("factory")
    return {
        "name": "hostile-module",
        "version": "1",
        "device": "cpu",
        "families": {
            "decode_v1": {"run": _decode, "can_run": _can_run, "workspace": _workspace,
                          "prepare": _prepare},
        },
    }
