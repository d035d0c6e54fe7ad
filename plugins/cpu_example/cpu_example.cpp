// The CPU example plugin: attn-tune's own CPU kernels (src/backends/cpu) behind the plugin ABI
// and nothing else. Sweeping and verifying through it must give what the built-in CPU backend
// gives, which shows that the ABI carries every field a call needs. It is also the smallest
// complete host-memory plugin to copy from.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "include/attn_tune/plugin.h"
#include "src/backends/cpu/cpu_plan.h"

namespace {

using attn::Family;

const int kSplit[] = {0, 1};
const int kPartition[] = {256, 512, 1024};
const int kQTile[] = {16, 32, 64};
const int kKTile[] = {32, 64, 128};

const attn_param_space kV1Params[] = {{"split", kSplit, 2}};
const attn_param_space kV2Params[] = {{"partition", kPartition, 3}, {"split", kSplit, 2}};
const attn_param_space kPrefillParams[] = {
    {"q_tile", kQTile, 3}, {"k_tile", kKTile, 3}, {"split", kSplit, 2}};

const attn_family_decl kFamilies[] = {
    {ATTN_FAMILY_DECODE_V1, ATTN_KV_HND, 1, kV1Params, 1},
    {ATTN_FAMILY_DECODE_V2, ATTN_KV_HND, 1, kV2Params, 2},
    {ATTN_FAMILY_PREFILL, ATTN_KV_HND, 1, kPrefillParams, 3},
};
// Every family reads both fp8 caches (ABI 4), converting as it loads, as the built-in kernels do.
const uint32_t kFp8 =
    ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E4M3) | ATTN_KV_DTYPE_BIT(ATTN_KV_DTYPE_FP8_E5M2);
const uint32_t kKvDtypes[] = {kFp8, kFp8, kFp8};

int param(const attn_config* c, const char* name, int fallback) {
  for (int i = 0; i < c->num_params; ++i) {
    if (std::strcmp(c->names[i], name) == 0) {
      return c->values[i];
    }
  }
  return fallback;
}

Family family_of(attn_family f) {
  return f == ATTN_FAMILY_DECODE_V1   ? Family::decode_v1
         : f == ATTN_FAMILY_DECODE_V2 ? Family::decode_v2
                                      : Family::prefill;
}

attn::cpu::PlanParams plan_params(const attn_config* c, attn_family f) {
  attn::cpu::PlanParams pp;
  pp.family = family_of(f);
  pp.split = param(c, "split", 1);
  pp.partition = param(c, "partition", 512);
  pp.q_tile = param(c, "q_tile", 32);
  pp.k_tile = param(c, "k_tile", 64);
  return pp;
}

// The plugin's state: a thread pool and the plan of the last call. Engines cache plans by call
// shape too; here a repeated call (as when attn-tune times it) reuses its work division.
struct State {
  std::unique_ptr<attn::ThreadPool> pool;
  std::vector<int64_t> plan_key;
  std::unique_ptr<attn::cpu::CallPlan> plan;
  attn::cpu::Isa isa = attn::cpu::Isa::base;
  attn::cpu::Fp8Reads fp8_reads = attn::cpu::Fp8Reads::via_fp16;
};

std::vector<int64_t> call_key(const attn_config* c, const attn_call* a, const void* ws) {
  std::vector<int64_t> k = {
      a->family,   a->dtype,        a->kv_layout,  a->num_heads,          a->num_kv_heads,
      a->head_dim, a->block_size,   a->causal,     a->window_left,        a->window_right,
      a->batch,    a->num_rows,     a->num_blocks, a->max_blocks_per_seq, a->host_threads,
      a->kv_dtype, a->num_kv_scales};
  float fs[2] = {a->scale, a->softcap};
  int32_t bits[2];
  std::memcpy(bits, fs, sizeof bits);
  k.insert(k.end(), {bits[0], bits[1]});
  for (const void* p : {a->query, a->key_cache, a->value_cache, (const void*)a->block_tables,
                        (const void*)a->context_lens, (const void*)a->cu_seqlens_q,
                        (const void*)a->cu_seqlens_k, (const void*)a->out, (const void*)a->lse,
                        (const void*)a->k_scale, (const void*)a->v_scale, ws}) {
    k.push_back(int64_t(reinterpret_cast<std::uintptr_t>(p)));
  }
  for (int i = 0; i < c->num_params; ++i) {
    k.push_back(c->values[i]);
  }
  // The values the plan copies, not only their addresses: a later call's arrays may reuse them.
  for (int b = 0; b < a->batch; ++b) {
    k.insert(k.end(), {a->seq_q_lens[b], a->seq_k_lens[b]});
  }
  for (int h = 0; h < a->num_kv_scales; ++h) {
    float s[2] = {a->k_scale[h], a->v_scale[h]};
    std::memcpy(bits, s, sizeof bits);
    k.insert(k.end(), {bits[0], bits[1]});
  }
  return k;
}

int can_run(void*, const attn_config* c, const attn_call* a, char* reason, size_t size) {
  std::string why;
  const int split = param(c, "split", 1);
  if (a->kv_layout != ATTN_KV_HND) {
    why = "this plugin reads the HND layout only";
  } else if (split != 0 && split != 1) {
    why = "split must be 0 (per query head) or 1 (per KV head)";
  } else if (a->family == ATTN_FAMILY_DECODE_V2 &&
             (param(c, "partition", 0) <= 0 || param(c, "partition", 0) % a->block_size != 0)) {
    why = "partition " + std::to_string(param(c, "partition", 0)) +
          " is not a positive multiple of block_size " + std::to_string(a->block_size);
  } else if (a->family == ATTN_FAMILY_PREFILL &&
             (param(c, "q_tile", 0) < 1 || param(c, "q_tile", 0) > 256 ||
              param(c, "k_tile", 0) < 1 || param(c, "k_tile", 0) > 1024)) {
    why = "q_tile must be 1 to 256 and k_tile 1 to 1024";
  }
  if (why.empty()) {
    return 0;
  }
  attn_plugin_write_message(reason, size, why.c_str());
  return 1;
}

int workspace_size(void*, const attn_config* c, const attn_call* a, uint64_t* bytes, char*,
                   size_t) {
  *bytes = a->family == ATTN_FAMILY_DECODE_V2
               ? sizeof(float) * attn::cpu::partial_floats(a->batch, a->num_heads, a->head_dim,
                                                           a->max_k_len, param(c, "partition", 512))
               : 0;
  return 0;
}

int run(void* state, const attn_config* c, const attn_call* a, void* ws, uint64_t, void*, char* err,
        size_t err_size) {
  auto& s = *static_cast<State*>(state);
  try {
    const int threads = std::max(1, a->host_threads);
    if (!s.pool || s.pool->size() != threads) {
      s.pool = std::make_unique<attn::ThreadPool>(threads);
      s.plan.reset();
    }
    std::vector<int64_t> key = call_key(c, a, ws);
    if (!s.plan || key != s.plan_key) {
      attn::cpu::KernelArgs k;
      k.dtype = a->dtype == ATTN_DTYPE_F32   ? attn::DType::f32
                : a->dtype == ATTN_DTYPE_F16 ? attn::DType::f16
                                             : attn::DType::bf16;
      k.kv_dtype = a->kv_dtype == ATTN_KV_DTYPE_FP8_E4M3   ? attn::DType::fp8_e4m3
                   : a->kv_dtype == ATTN_KV_DTYPE_FP8_E5M2 ? attn::DType::fp8_e5m2
                                                           : k.dtype;
      if (k.fp8_cache()) {
        k.k_scale = a->k_scale;
        k.v_scale = a->v_scale;
        k.k_scales = k.v_scales = a->num_kv_scales;
        k.fp8_via_fp32 = s.fp8_reads == attn::cpu::Fp8Reads::via_fp32;
      }
      k.num_heads = a->num_heads;
      k.num_kv_heads = a->num_kv_heads;
      k.head_dim = a->head_dim;
      k.block_size = a->block_size;
      k.group = a->num_heads / a->num_kv_heads;
      k.scale = a->scale;
      k.softcap = a->softcap;
      k.mask = {a->causal, a->window_left, a->window_right};
      k.query = a->query;
      k.key_cache = a->key_cache;
      k.value_cache = a->value_cache;
      k.block_tables = a->block_tables;
      k.max_blocks_per_seq = a->max_blocks_per_seq;
      k.out = a->out;
      k.lse = a->lse;
      std::vector<int32_t> q_start(std::size_t(a->batch)), q_len(q_start.size()),
          k_len(q_start.size());
      for (int b = 0; b < a->batch; ++b) {
        const bool decode = a->family != ATTN_FAMILY_PREFILL;
        q_start[std::size_t(b)] = decode ? b : a->cu_seqlens_q[b];
        q_len[std::size_t(b)] = decode ? 1 : a->cu_seqlens_q[b + 1] - a->cu_seqlens_q[b];
        k_len[std::size_t(b)] =
            decode ? a->context_lens[b] : a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
      }
      s.plan = std::make_unique<attn::cpu::CallPlan>(
          s.isa, k, plan_params(c, a->family), std::move(q_start), std::move(q_len),
          std::move(k_len), static_cast<float*>(ws), threads);
      s.plan_key = std::move(key);
    }
    s.plan->run(*s.pool);
    return 0;
  } catch (const std::exception& e) {
    attn_plugin_write_message(err, err_size, e.what());
    return 1;
  }
}

void destroy(void* state) { delete static_cast<State*>(state); }

} // namespace

extern "C" __attribute__((visibility("default"))) int
attn_tune_plugin_init(uint32_t host_abi_version, attn_plugin_api* api, size_t api_size, char* err,
                      size_t err_size) {
  ATTN_PLUGIN_CHECK_HOST(host_abi_version, api, api_size, err, err_size);
  api->name = "cpu-example";
  api->version = "1.0";
  api->device_kind = ATTN_DEVICE_HOST;
  api->families = kFamilies;
  api->num_families = 3;
  api->kv_dtypes = kKvDtypes;
  auto state = std::make_unique<State>();
  try {
    state->isa = attn::cpu::selected_isa(); // ATTN_TUNE_CPU_ISA, as attn-tune's own CPU backend
    state->fp8_reads = attn::cpu::selected_fp8_reads(); // and ATTN_TUNE_CPU_FP8_READS
  } catch (const std::exception& e) {
    attn_plugin_write_message(err, err_size, e.what());
    return 1;
  }
  api->state = state.release();
  api->can_run = can_run;
  api->workspace_size = workspace_size;
  api->run = run;
  api->destroy = destroy;
  return 0;
}
