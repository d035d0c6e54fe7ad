"""Test fixture: a module whose import fails on its fourth line (a dependency that is not
installed). attn-tune's one-line error names the module's line, not Python's import machinery."""

import attn_tune_a_dependency_that_is_not_installed  # noqa: F401
