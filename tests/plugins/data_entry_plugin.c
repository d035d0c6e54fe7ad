/* A test-only "plugin" whose entry point attn_tune_plugin_init is exported as data, not as a
 * function: dlsym finds the symbol, and calling it jumps into memory that holds no code. The
 * probe that loads a plugin dies there; attn-tune must say so in one line and exit 2
 * (tests/fuzz/hostile_plugins.py). */
__attribute__((visibility("default"))) const unsigned char attn_tune_plugin_init[64] = {0};
