"""attn_tune_engines: inference engines' own attention kernels as attn-tune kernel sets
(docs/engines.md). Each engine is a module of its own, loaded only when asked for, since each
needs its engine installed (usually in a virtual environment of its own):

    attn-tune verify --kernels python:attn_tune_engines.vllm_cpu    # vLLM's CPU attention
"""

__version__ = "1.0"
