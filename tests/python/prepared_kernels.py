"""attn_tune_torch's kernels behind the bridge's prepare step and a declared workspace (the
Python side of plugin ABI 2): prepare copies both caches, once and untimed; run computes from that
copy alone and refuses to run without it or without its workspace. tests/cli/python_bridge.cmake
checks that verify passes and that the timing method counts the copy."""

from attn_tune_torch import kernels as _base

WORKSPACE_BYTES = 4096


def _prepare(call, config):
    return {"key_cache": call.key_cache.clone(), "value_cache": call.value_cache.clone()}


def _workspace(call, config):
    return WORKSPACE_BYTES


def _wrap(run):
    def prepared_run(call, config):
        state = getattr(call, "prepared", None)
        if not isinstance(state, dict):
            raise RuntimeError("run without the prepared copy (call.prepared is %r)" % (state,))
        ws = getattr(call, "workspace", None)
        if ws is None or ws.numel() != WORKSPACE_BYTES or str(ws.dtype) != "torch.uint8":
            raise RuntimeError("run without its %d-byte workspace (got %r)" % (WORKSPACE_BYTES, ws))
        call.key_cache = state["key_cache"]
        call.value_cache = state["value_cache"]
        run(call, config)
    return prepared_run


def attn_tune_kernels():
    decl = _base.attn_tune_kernels("HND")
    decl["name"] = "prepared_kernels"
    for fam in decl["families"].values():
        fam["run"] = _wrap(fam["run"])
        fam["prepare"] = _prepare
        fam["workspace"] = _workspace
    return decl


def _wrap_workspace_only(run):
    def workspace_run(call, config):
        ws = getattr(call, "workspace", None)
        if ws is None or ws.numel() != WORKSPACE_BYTES or str(ws.dtype) != "torch.uint8":
            raise RuntimeError("run without its %d-byte workspace (got %r)" % (WORKSPACE_BYTES, ws))
        run(call, config)
    return workspace_run


def attn_tune_kernels_workspace_only():
    """The same kernels with the workspace and no prepare step: every call a fresh Call object
    whose workspace may land where the call before's did (an outside audit's module got None
    there, now and then, until 2026-12-08)."""
    decl = _base.attn_tune_kernels("HND")
    decl["name"] = "workspace_kernels"
    for fam in decl["families"].values():
        fam["run"] = _wrap_workspace_only(fam["run"])
        fam["workspace"] = _workspace
    return decl
