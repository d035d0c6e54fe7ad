"""Test fixture: a module whose factory forgets to return its declaration (it returns None), and a
module attribute that is None; verify and plugin check must say so, not that it declares no
families."""

nothing = None


def attn_tune_kernels():
    {"name": "forgot-return", "families": {}}
