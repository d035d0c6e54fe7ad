// Replay files: the shapes of SPEC.md's tensor table are the only description of the problem, so
// every dimension is derived from them and cross-checked before Problem::validate() runs.
#include "src/validation/replay.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "reference/reference.h"
#include "src/io/memory_left.h"
#include "src/model/errors.h"
#include "src/model/workload.h"

namespace attn {

namespace {

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw InputError(file + ": " + what);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    r += (i ? ", " : "") + std::to_string(s[i]);
  }
  return r + "]";
}

StTensor& need(SafetensorsFile& f, const std::string& file, const std::string& name,
               std::size_t rank) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) {
    bad(file, "has no tensor '" + name + "'");
  }
  if (it->second.shape.size() != rank) {
    bad(file, name + " has shape " + shape_str(it->second.shape) + ", expected rank " +
                  std::to_string(rank));
  }
  return it->second;
}

// key_cache or value_cache, whose rank depends on the layout the file declares.
StTensor& need_cache(SafetensorsFile& f, const std::string& file, const std::string& name,
                     KvLayout layout) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) {
    bad(file, "has no tensor '" + name + "'");
  }
  const bool is_key = name == "key_cache";
  const std::size_t rank = is_key && layout == KvLayout::vllm ? 5 : 4;
  if (it->second.shape.size() != rank) {
    bad(file, name + " has shape " + shape_str(it->second.shape) + ", expected rank " +
                  std::to_string(rank) + " for kv_layout " + kv_layout_name(layout) + " " +
                  (is_key ? key_cache_shape_pattern(layout) : value_cache_shape_pattern(layout)));
  }
  return it->second;
}

int dim_as_int(const std::string& file, const std::string& what, int64_t v) {
  if (v > INT_MAX) {
    bad(file, what + " = " + std::to_string(v) + " is too large");
  }
  return int(v);
}

// Metadata values are strings by the format's rules; engines write Python's str() of the value.
bool parse_bool(const std::string& file, const std::string& key, const std::string& s) {
  std::string l;
  for (char c : s) {
    l += char(std::tolower(static_cast<unsigned char>(c)));
  }
  if (l == "true" || l == "1") {
    return true;
  }
  if (l == "false" || l == "0") {
    return false;
  }
  bad(file, "__metadata__ " + key + " = '" + s + "' is not a boolean (true/false/1/0)");
}

int parse_int(const std::string& file, const std::string& key, const std::string& s) {
  int v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec == std::errc::result_out_of_range && p == end) {
    bad(file, "__metadata__ " + key + " = '" + s + "' is out of range (a 32-bit integer)");
  }
  if (s.empty() || ec != std::errc() || p != end) {
    bad(file, "__metadata__ " + key + " = '" + s + "' is not an integer");
  }
  return v;
}

double parse_double(const std::string& file, const std::string& key, const std::string& s) {
  double v = 0;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (!s.empty() && *begin == '+') { // from_chars refuses a leading '+'; Python never writes it
    ++begin;
  }
  auto [p, ec] = std::from_chars(begin, end, v);
  if (s.empty() || ec != std::errc() || p != end || !std::isfinite(v)) {
    bad(file, "__metadata__ " + key + " = '" + s + "' is not a finite number");
  }
  return v;
}

std::string format_double(double v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v); // shortest text that reads back exactly
  return std::string(buf, p);
}

// The first NaN or infinity the call reads: an element of a query row that sees a key, or of a
// key or value that some row sees. SPEC.md's function is one of finite inputs (its lse is never
// NaN), so no answer to such a call can be judged; slots nobody reads may hold anything (an
// engine's cache does: fp8 NaN bytes, stale blocks).
std::optional<std::string> nonfinite_read(const Problem& pr) {
  const AttnParams& a = pr.params;
  const int H = a.num_heads;
  const int D = a.head_dim;
  const auto word = [](double x) {
    return std::isnan(x) ? std::string("NaN") : std::string("inf");
  };
  for (int b = 0; b < pr.batch; ++b) {
    const int ql = pr.q_len(b);
    const int kl = pr.k_len(b);
    std::vector<char> seen(std::size_t(std::max(kl, 0)), 0);
    for (int i = 0; i < ql; ++i) {
      bool any = false;
      for (int j = 0; j < kl; ++j) {
        if (reference_visible(a, ql, kl, i, j)) {
          seen[std::size_t(j)] = 1;
          any = true;
        }
      }
      const int row = pr.q_start(b) + i;
      for (int h = 0; any && h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          const double x = pr.query.get((std::size_t(row) * H + h) * D + d);
          if (!std::isfinite(x)) {
            return "query[" + std::to_string(row) + ", " + std::to_string(h) + ", " +
                   std::to_string(d) + "] is " + word(x) + " (sequence " + std::to_string(b) + ")";
          }
        }
      }
    }
    for (int j = 0; j < kl; ++j) {
      for (int kvh = 0; seen[std::size_t(j)] != 0 && kvh < a.num_kv_heads; ++kvh) {
        for (int d = 0; d < D; ++d) {
          const double k = pr.key_cache.get(std::size_t(pr.key_index(b, kvh, j, d)));
          const double v = pr.value_cache.get(std::size_t(pr.value_index(b, kvh, j, d)));
          if (!std::isfinite(k) || !std::isfinite(v)) {
            return std::string(std::isfinite(k) ? "value" : "key") + " " + std::to_string(j) +
                   " of sequence " + std::to_string(b) + ", KV head " + std::to_string(kvh) +
                   ", dim " + std::to_string(d) + " (block " +
                   std::to_string(pr.physical_block(b, j)) + ") is " +
                   word(std::isfinite(k) ? v : k);
          }
        }
      }
    }
  }
  return std::nullopt;
}

// The metadata keys of `f` that look meant for one attn-tune reads (replay.h, `misnamed`): the
// names other libraries give the same parameters, and any key that differs from one only in case.
std::vector<std::string> misnamed_keys(const SafetensorsFile& f) {
  static const std::map<std::string, std::string> kOther = {
      {"window_size_left", "window_left"},
      {"window_size_right", "window_right"},
      {"window_size", "window_left and window_right"},
      {"sliding_window", "window_left"},
      {"logits_soft_cap", "softcap"},
      {"logit_softcap", "softcap"},
      {"soft_cap", "softcap"},
      {"softcapping", "softcap"},
      {"attn_logit_softcapping", "softcap"},
      {"softmax_scale", "scale"},
      {"sm_scale", "scale"},
      {"is_causal", "causal"},
      {"kv_cache_layout", "kv_layout"},
      {"layout", "kv_layout"},
      {"cache_dtype", "kv_cache_dtype"},
      {"kv_dtype", "kv_cache_dtype"}};
  static const std::set<std::string> kRead = {
      "causal", "scale", "window_left", "window_right", "softcap", "kv_layout", "kv_cache_dtype"};
  const auto lower = [](std::string s) {
    for (char& c : s) {
      c = char(std::tolower(static_cast<unsigned char>(c)));
    }
    return s;
  };
  std::vector<std::string> out;
  for (const auto& [key, value] : f.metadata) {
    if (kRead.count(key)) {
      continue;
    }
    const std::string low = lower(key);
    if (const auto it = kOther.find(low); it != kOther.end()) {
      out.push_back(key + " (attn-tune reads " + it->second + ")");
    } else if (kRead.count(low)) {
      out.push_back(key + " (attn-tune reads " + low + ", in lower case)");
    }
  }
  return out;
}

// A replay file holds a call to what a profile may ask for (src/model/workload.h): past that, a
// small file (one block shared by every page of a table) could ask the reference for a context of
// two billion keys or a billion heads.
void refuse_past_limits(const Problem& pr, const std::string& file) {
  const AttnParams& p = pr.params;
  const auto over = [&](const std::string& what, int64_t n, int64_t most) {
    if (n > most) {
      bad(file, what + " " + std::to_string(n) + " is past the " + std::to_string(most) +
                    " a profile may ask for");
    }
  };
  over("batch", pr.batch, kMaxBatch);
  over("num_heads", p.num_heads, kMaxHeads);
  for (int b = 0; b < pr.batch; ++b) {
    over("sequence " + std::to_string(b) + "'s key length", pr.k_len(b), kMaxContextLen);
    over("sequence " + std::to_string(b) + "'s query length", pr.q_len(b), kMaxContextLen);
  }
  if (p.softcap > 0 && p.softcap < double(std::numeric_limits<float>::min())) {
    bad(file, "__metadata__ softcap = " + format_double(p.softcap) +
                  " is below fp32's smallest normal number (1.2e-38): the kernels' fp32 cap "
                  "would be a subnormal; a profile asks for 0 (off) or at least that");
  }
}

} // namespace

ReplayFile replay_from_safetensors(SafetensorsFile f, const std::string& file) {
  ReplayFile rf;
  rf.metadata = f.metadata;
  rf.misnamed = misnamed_keys(f);
  static const std::set<std::string> kRead = {
      "query",        "key_cache", "value_cache", "block_tables", "context_lens", "cu_seqlens_q",
      "cu_seqlens_k", "out",       "lse",         "k_scale",      "v_scale"};
  for (const auto& [name, t] : f.tensors) {
    if (!kRead.count(name)) {
      rf.unread.push_back(name);
    }
  }
  for (const auto& [name, dtype] : f.skipped) {
    if (kRead.count(name)) {
      bad(file, "tensor '" + name + "' has unsupported dtype " + dtype + " (attn-tune reads " +
                    kStDtypesRead + ")");
    }
    rf.unread.push_back(name + " (" + dtype + ")");
  }
  Problem& pr = rf.problem;
  AttnParams& p = pr.params;

  const bool has_ctx = f.tensors.count("context_lens") != 0;
  const bool has_cuq = f.tensors.count("cu_seqlens_q") != 0;
  const bool has_cuk = f.tensors.count("cu_seqlens_k") != 0;
  if (has_ctx && (has_cuq || has_cuk)) {
    bad(file, "holds both context_lens (decode) and cu_seqlens (prefill); which is it?");
  }
  if (!has_ctx && !has_cuq && !has_cuk) {
    if (auto of = f.metadata.find("attn_tune_replay_of"); of != f.metadata.end()) {
      // What `replay --save` writes: an answer to judge a call by, not a call.
      bad(file, "is what `replay --save` wrote (out and lse alone, no call): replay the file it "
                "was computed from, " +
                    of->second);
    }
    bad(file, "has neither context_lens (decode) nor cu_seqlens_q/cu_seqlens_k (prefill)");
  }
  if (!has_ctx && has_cuq != has_cuk) {
    bad(file, std::string("has ") + (has_cuq ? "cu_seqlens_q" : "cu_seqlens_k") + " but no " +
                  (has_cuq ? "cu_seqlens_k" : "cu_seqlens_q"));
  }
  pr.phase = has_ctx ? Phase::decode : Phase::prefill;

  try {
    // The layout first: it says how to read the caches' shapes.
    if (auto it = f.metadata.find("kv_layout"); it != f.metadata.end()) {
      try {
        pr.kv_layout = parse_kv_layout(it->second);
      } catch (const InputError&) {
        bad(file, "__metadata__ kv_layout = '" + it->second +
                      "' is not a KV-cache layout (HND, NHD or vllm)");
      }
    }
    const KvLayout layout = pr.kv_layout;
    const bool vllm = layout == KvLayout::vllm;
    StTensor& q = need(f, file, "query", 3);
    StTensor& k = need_cache(f, file, "key_cache", layout);
    StTensor& v = need_cache(f, file, "value_cache", layout);
    const StTensor& bt = need(f, file, "block_tables", 2);
    pr.query = to_host(std::move(q), "query");
    // The cache's dtype (SPEC.md "fp8 KV caches"): __metadata__ kv_cache_dtype, `auto` (the
    // query's) when absent, unless the caches are F8_E4M3 or F8_E5M2, which name their format.
    // U8 caches need it named.
    std::optional<DType> kv;
    if (auto it = f.metadata.find("kv_cache_dtype"); it != f.metadata.end() && it->second != "auto") {
      try {
        kv = parse_kv_dtype(it->second, pr.query.dtype);
      } catch (const InputError&) {
      }
      if (!kv || !is_fp8(*kv)) {
        bad(file, "__metadata__ kv_cache_dtype = '" + it->second +
                      "' is not auto, fp8_e4m3 (or fp8, fp8_e4m3fn, float8_e4m3fn, e4m3) or "
                      "fp8_e5m2 (or float8_e5m2, e5m2), in lower case (docs/fp8.md)");
      }
    } else if (it == f.metadata.end() && k.dtype == v.dtype &&
               (k.dtype == StDType::f8_e4m3 || k.dtype == StDType::f8_e5m2)) {
      kv = k.dtype == StDType::f8_e4m3 ? DType::fp8_e4m3 : DType::fp8_e5m2;
    }
    if (kv) {
      const StDType named = *kv == DType::fp8_e4m3 ? StDType::f8_e4m3 : StDType::f8_e5m2;
      for (StTensor* c : {&k, &v}) {
        if (c->dtype == StDType::u8) {
          c->dtype = named; // the bytes as the metadata names them
        } else if (c->dtype != named) {
          bad(file, std::string(c == &k ? "key_cache" : "value_cache") + " is " +
                        st_dtype_name(c->dtype) + " but kv_cache_dtype is " +
                        std::string(dtype_name(*kv)) + " (expected " + st_dtype_name(named) +
                        " or U8)");
        }
      }
    }
    for (const StTensor* c : {&k, &v}) {
      if (c->dtype == StDType::u8) { // kv names no format here
        bad(file, std::string(c == &k ? "key_cache" : "value_cache") +
                      " is U8: an fp8 cache names its format in __metadata__ kv_cache_dtype "
                      "(fp8_e4m3 or fp8_e5m2)");
      }
    }
    pr.key_cache = to_host(std::move(k), "key_cache");
    pr.value_cache = to_host(std::move(v), "value_cache");
    const DType cache_dtype = kv.value_or(pr.query.dtype);
    if (pr.key_cache.dtype != cache_dtype || pr.value_cache.dtype != cache_dtype) {
      bad(file, kv ? std::string("key_cache and value_cache must both be ") +
                         std::string(dtype_name(*kv)) + " (they are " +
                         st_dtype_name(k.dtype) + " and " + st_dtype_name(v.dtype) + ")"
                   : std::string("query, key_cache and value_cache must share a dtype (they "
                                 "are ") +
                         st_dtype_name(q.dtype) + ", " + st_dtype_name(k.dtype) + ", " +
                         st_dtype_name(v.dtype) +
                         "; an fp8 cache names its format in __metadata__ kv_cache_dtype)");
    }
    p.kv_dtype = kv;
    // The key cache's dimensions in its layout; the value cache must then have exactly the
    // shape that layout gives it.
    const std::vector<int64_t>& ks = k.shape;
    // In vllm head_dim is split in two dimensions; each fits an int, so their product is exact.
    const int64_t key_head_dim = vllm ? int64_t(dim_as_int(file, "key_cache head_dim / x", ks[2])) *
                                            dim_as_int(file, "key_cache x", ks[4])
                                      : ks[3];
    if (key_head_dim != q.shape[2]) {
      bad(file, "key_cache head_dim " + std::to_string(key_head_dim) +
                    " differs from query head_dim " + std::to_string(q.shape[2]) + " (key_cache " +
                    shape_str(ks) + " read as kv_layout " + kv_layout_name(layout) + " " +
                    key_cache_shape_pattern(layout) + ")");
    }
    p.dtype = pr.query.dtype;
    p.num_heads = dim_as_int(file, "query num_heads", q.shape[1]);
    p.head_dim = dim_as_int(file, "query head_dim", q.shape[2]);
    p.num_kv_heads =
        dim_as_int(file, "key_cache num_kv_heads", layout == KvLayout::NHD ? ks[2] : ks[1]);
    p.block_size = dim_as_int(file, "key_cache block_size",
                              layout == KvLayout::NHD ? ks[1] : (vllm ? ks[3] : ks[2]));
    pr.num_blocks = dim_as_int(file, "key_cache num_blocks", ks[0]);
    for (const auto& [name, t] :
         {std::pair<const char*, const StTensor*>{"key_cache", &k}, {"value_cache", &v}}) {
      const bool is_key = t == &k;
      const std::vector<int64_t> want =
          is_key ? key_cache_shape(layout, cache_dtype, pr.num_blocks, p.num_kv_heads,
                                   p.block_size, p.head_dim)
                 : value_cache_shape(layout, cache_dtype, pr.num_blocks, p.num_kv_heads,
                                     p.block_size, p.head_dim);
      if (t->shape != want) {
        bad(file,
            std::string(name) + " has shape " + shape_str(t->shape) + ", expected " +
                shape_str(want) + " for kv_layout " + kv_layout_name(layout) + " " +
                (is_key ? key_cache_shape_pattern(layout) : value_cache_shape_pattern(layout)));
      }
    }
    const int rows = dim_as_int(file, "query rows", q.shape[0]);

    pr.batch = dim_as_int(file, "block_tables batch", bt.shape[0]);
    pr.max_blocks_per_seq = dim_as_int(file, "block_tables columns", bt.shape[1]);
    pr.block_tables = to_int32(bt, "block_tables");
    if (pr.phase == Phase::decode) {
      const StTensor& cl = need(f, file, "context_lens", 1);
      if (cl.shape[0] != pr.batch) {
        bad(file, "context_lens has " + std::to_string(cl.shape[0]) +
                      " entries but block_tables has " + std::to_string(pr.batch) + " rows");
      }
      if (rows != pr.batch) {
        bad(file, "decode query has " + std::to_string(rows) +
                      " rows, expected one per sequence (" + std::to_string(pr.batch) + ")");
      }
      pr.context_lens = to_int32(cl, "context_lens");
    } else {
      for (const char* name : {"cu_seqlens_q", "cu_seqlens_k"}) {
        const StTensor& cu = need(f, file, name, 1);
        if (cu.shape[0] != int64_t(pr.batch) + 1) {
          bad(file,
              std::string(name) + " has " + std::to_string(cu.shape[0]) +
                  " entries, expected block_tables rows + 1 = " + std::to_string(pr.batch + 1));
        }
        (std::string(name) == "cu_seqlens_q" ? pr.cu_seqlens_q : pr.cu_seqlens_k) =
            to_int32(cu, name);
      }
      for (const auto* cu : {&pr.cu_seqlens_q, &pr.cu_seqlens_k}) {
        // A decrease first: it is the mistake, and the end it leads to only a consequence.
        for (std::size_t i = 1; i < cu->size(); ++i) {
          if ((*cu)[i] < (*cu)[i - 1]) {
            bad(file, std::string(cu == &pr.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k") +
                          " decreases at index " + std::to_string(i) + " (" +
                          std::to_string((*cu)[i - 1]) + " -> " + std::to_string((*cu)[i]) +
                          "), a negative length");
          }
        }
      }
      if (!pr.cu_seqlens_q.empty() && pr.cu_seqlens_q.back() != rows) {
        bad(file, "cu_seqlens_q ends at " + std::to_string(pr.cu_seqlens_q.back()) +
                      " but query has " + std::to_string(rows) + " rows");
      }
    }

    // Parameters: missing keys take SPEC.md's defaults; keys we do not know are the engine's.
    // Python's str(None) ("None") for scale, windows or softcap also means "the default": that is
    // what an engine that dumps its optional arguments with str() writes for an unset one.
    auto meta = [&](const char* key) -> const std::string* {
      auto it = f.metadata.find(key);
      return it == f.metadata.end() ? nullptr : &it->second;
    };
    auto optional_meta = [&](const char* key) -> const std::string* {
      const std::string* s = meta(key);
      return s && *s != "None" ? s : nullptr;
    };
    if (auto* s = meta("causal")) {
      p.causal = parse_bool(file, "causal", *s);
    }
    if (auto* s = optional_meta("scale")) {
      p.scale = parse_double(file, "scale", *s);
      // Kernels take the scale as an fp32 (SPEC.md): one that is no finite fp32 is no call.
      if (!std::isfinite(float(*p.scale))) {
        bad(file, "__metadata__ scale = '" + *s + "' does not fit an fp32");
      }
    }
    if (auto* s = optional_meta("window_left")) {
      p.window_left = parse_int(file, "window_left", *s);
    }
    if (auto* s = optional_meta("window_right")) {
      p.window_right = parse_int(file, "window_right", *s);
    }
    if (auto* s = optional_meta("softcap")) {
      p.softcap = parse_double(file, "softcap", *s);
      // Kernels take it as an fp32 too: 1e40 would be an infinite cap, and NaN no cap at all.
      if (!std::isfinite(float(p.softcap))) {
        bad(file, "__metadata__ softcap = '" + *s + "' does not fit an fp32");
      }
    }
    // An fp8 cache's scales: F32, shape [] (per tensor) or [num_kv_heads]; 1.0 when absent.
    for (const char* name : {"k_scale", "v_scale"}) {
      auto it = f.tensors.find(name);
      if (it == f.tensors.end()) {
        continue;
      }
      if (!kv) {
        bad(file, std::string(name) + " is given but the cache is not fp8 (kv_cache_dtype)");
      }
      const StTensor& t = it->second;
      if (!(t.shape.empty() || (t.shape.size() == 1 && (t.shape[0] == 1 ||
                                                        t.shape[0] == p.num_kv_heads)))) {
        bad(file, std::string(name) + " has shape " + shape_str(t.shape) +
                      ", expected [] (per tensor) or [" + std::to_string(p.num_kv_heads) +
                      "] (per KV head)");
      }
      (std::string(name) == "k_scale" ? pr.k_scale : pr.v_scale) = to_float32(t, name);
    }

    // Caches of another layout can have a plausible shape in this one (NHD read as HND, the
    // default, swaps block_size and num_kv_heads): a refusal about those says where they came
    // from.
    try {
      pr.validate();
    } catch (const InputError& e) {
      const std::string why = e.what();
      if (why.find("num_kv_heads") == std::string::npos &&
          why.find("block_size") == std::string::npos) {
        throw;
      }
      bad(file,
          why + " (num_kv_heads " + std::to_string(p.num_kv_heads) + " and block_size " +
              std::to_string(p.block_size) + " read from key_cache " + shape_str(ks) +
              " as kv_layout " + kv_layout_name(layout) + " " + key_cache_shape_pattern(layout) +
              (f.metadata.count("kv_layout") ? ")" : ", the default: no __metadata__ kv_layout)"));
    }
    refuse_past_limits(pr, file);
    refuse_past_memory(pr, 1, file); // before the scan below reads every key the call does
    if (const auto where = nonfinite_read(pr)) {
      bad(file, "the call reads a value that is not finite: " + *where +
                    "; attention is defined on finite inputs (SPEC.md), so no answer can be "
                    "judged: the value came from before the attention");
    }

    if (auto it = f.tensors.find("out"); it != f.tensors.end()) {
      HostTensor out = to_host(std::move(it->second), "out");
      if (out.dtype != p.dtype) {
        bad(file, std::string("out is ") + st_dtype_name(it->second.dtype) + " but query is " +
                      st_dtype_name(q.dtype));
      }
      if (out.shape != pr.query.shape) {
        bad(file, "out has shape " + shape_str(out.shape) + ", expected the query's " +
                      shape_str(pr.query.shape));
      }
      rf.out = std::move(out);
    }
    if (auto it = f.tensors.find("lse"); it != f.tensors.end()) {
      const std::vector<int64_t> want = {rows, p.num_heads};
      if (it->second.shape != want) {
        bad(file, "lse has shape " + shape_str(it->second.shape) + ", expected " + shape_str(want));
      }
      rf.lse = to_float32(it->second, "lse");
    }
  } catch (const InputError& e) {
    // Messages from the tensor and problem layers do not know the file; name it once.
    const std::string msg = e.what();
    if (msg.rfind(file + ": ", 0) == 0) {
      throw;
    }
    bad(file, msg);
  }
  return rf;
}

void refuse_past_memory(const Problem& pr, int threads, const std::string& file) {
  const std::optional<int64_t> left = memory_left_bytes();
  const int64_t need = reference_peak_bytes(pr, threads);
  if (!left || need <= *left) {
    return;
  }
  const auto gib = [](int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(int64_t(1) << 30));
    return std::string(buf);
  };
  const int64_t one = reference_peak_bytes(pr, 1);
  bad(file, "the reference needs about " + gib(need) +
                " for this call (as doubles: K, V and |V| of the longest sequences, " +
                "one per worker thread, and every output), more than the " + gib(*left) +
                " of memory left here" +
                (one < need && one <= *left ? "; --threads 1 needs " + gib(one) : ""));
}

ReplayFile load_replay(const std::string& path) {
  return replay_from_safetensors(read_safetensors(path), path);
}

SafetensorsFile replay_to_safetensors(const Problem& pr, const HostTensor* out,
                                      const std::vector<float>* lse) {
  pr.validate();
  const AttnParams& p = pr.params;
  SafetensorsFile f;
  f.tensors["query"] = to_st(pr.query);
  f.tensors["key_cache"] = to_st(pr.key_cache);
  f.tensors["value_cache"] = to_st(pr.value_cache);
  f.tensors["block_tables"] = to_st(pr.block_tables, {pr.batch, pr.max_blocks_per_seq});
  if (pr.phase == Phase::decode) {
    f.tensors["context_lens"] = to_st(pr.context_lens, {pr.batch});
  } else {
    f.tensors["cu_seqlens_q"] = to_st(pr.cu_seqlens_q, {int64_t(pr.batch) + 1});
    f.tensors["cu_seqlens_k"] = to_st(pr.cu_seqlens_k, {int64_t(pr.batch) + 1});
  }
  const int64_t rows = pr.num_rows();
  if (out) {
    if (out->dtype != p.dtype || out->shape != pr.query.shape) {
      throw InputError("out is " + std::string(dtype_name(out->dtype)) + " " +
                       shape_str(out->shape) + ", expected " + std::string(dtype_name(p.dtype)) +
                       " " + shape_str(pr.query.shape));
    }
    f.tensors["out"] = to_st(*out);
  }
  if (lse) {
    if (lse->size() != std::size_t(rows) * p.num_heads) {
      throw InputError("lse holds " + std::to_string(lse->size()) + " values, expected " +
                       std::to_string(rows * p.num_heads));
    }
    f.tensors["lse"] = to_st(*lse, {rows, p.num_heads});
  }
  f.metadata["kv_layout"] = kv_layout_name(pr.kv_layout); // the caches go as they are stored
  if (p.fp8_cache()) {
    f.metadata["kv_cache_dtype"] = std::string(dtype_name(p.cache_dtype()));
    if (!pr.k_scale.empty()) {
      f.tensors["k_scale"] = to_st(pr.k_scale, pr.k_scale.size() == 1
                                                   ? std::vector<int64_t>{}
                                                   : std::vector<int64_t>{p.num_kv_heads});
    }
    if (!pr.v_scale.empty()) {
      f.tensors["v_scale"] = to_st(pr.v_scale, pr.v_scale.size() == 1
                                                   ? std::vector<int64_t>{}
                                                   : std::vector<int64_t>{p.num_kv_heads});
    }
  }
  f.metadata["causal"] = p.causal ? "true" : "false";
  f.metadata["window_left"] = std::to_string(p.window_left);
  f.metadata["window_right"] = std::to_string(p.window_right);
  f.metadata["softcap"] = format_double(p.softcap);
  if (p.scale) {
    f.metadata["scale"] = format_double(*p.scale);
  }
  return f;
}

void save_replay(const std::string& path, const Problem& pr, const HostTensor* out,
                 const std::vector<float>* lse) {
  write_safetensors(path, replay_to_safetensors(pr, out, lse));
}

void save_outputs(const std::string& path, const HostTensor& out, const std::vector<float>& lse,
                  const std::map<std::string, std::string>& metadata) {
  if (out.shape.size() != 3 ||
      lse.size() != std::size_t(out.shape[0]) * std::size_t(out.shape[1])) {
    throw InputError("out " + shape_str(out.shape) + " and " + std::to_string(lse.size()) +
                     " lse values do not go together");
  }
  SafetensorsFile f;
  f.tensors["out"] = to_st(out);
  f.tensors["lse"] = to_st(lse, {out.shape[0], out.shape[1]});
  f.metadata = metadata;
  write_safetensors(path, f);
}

float round_double_to(DType t, double v) {
  float f = float(v); // nearest even in fp32
  if (t == DType::f32 || !std::isfinite(v) || double(f) == v) {
    return round_to(t, f);
  }
  // Round to odd first: truncate toward zero and set the last bit when inexact. A second
  // nearest-even rounding to a format at least two bits narrower is then exact (Boldo-Melquiond).
  if (std::abs(double(f)) > std::abs(v)) {
    f = std::nextafter(f, 0.0f);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return round_to(t, f);
}

HostTensor reference_out_as(const ReferenceResult& ref, DType t) {
  HostTensor out(t, {ref.rows, ref.heads, ref.head_dim});
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    out.set(i, round_double_to(t, ref.out[i]));
  }
  return out;
}

std::vector<float> reference_lse_as_float(const ReferenceResult& ref) {
  std::vector<float> lse(ref.lse.size());
  for (std::size_t i = 0; i < lse.size(); ++i) {
    lse[i] = float(ref.lse[i]);
  }
  return lse;
}

} // namespace attn
