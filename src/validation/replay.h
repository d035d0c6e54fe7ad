// Replay files (SPEC.md "Replay files"): an engine's attention call dumped as safetensors,
// loaded as a Problem plus the engine's answer; and the writers for dumps and computed outputs.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/io/safetensors.h"
#include "src/model/problem.h"
#include "src/model/tensor.h"

namespace attn {

struct ReplayFile {
  Problem problem;
  std::optional<HostTensor> out;               // the engine's answer, [rows, num_heads, head_dim]
  std::optional<std::vector<float>> lse;       // the engine's lse, [rows, num_heads]
  std::map<std::string, std::string> metadata; // as stored, including keys attn-tune ignores
  // Tensors the file holds that attn-tune does not read (a typo such as `output` for `out`).
  std::vector<std::string> unread;
  // Metadata keys that look meant for a parameter attn-tune reads under another name (another
  // library's spelling, another case), each as "key (attn-tune reads name)": ignored, so the call
  // takes that parameter's default.
  std::vector<std::string> misnamed;
};

// Reads and validates a replay file; every problem is an InputError naming the file.
[[nodiscard]] ReplayFile load_replay(const std::string& path);
// The same from an already parsed file (`name` stands for the file in messages); taken by value
// so that a caller who moves it in does not hold the tensors twice.
[[nodiscard]] ReplayFile replay_from_safetensors(SafetensorsFile f, const std::string& name);

// Refuses (InputError naming `file`) a call whose reference, with `threads` workers, would need
// more memory than is left here (memory_left_bytes), in one line with the figures, where it would
// otherwise end part way in std::bad_alloc: a file of half a megabyte can hold a call of a
// million keys (one block shared by every page of its table). Loading checks one worker's need
// before it reads the keys; `replay` checks its --threads' before it starts.
void refuse_past_memory(const Problem& pr, int threads, const std::string& file);

// The replay file image of a problem, optionally with an answer (out in the problem's dtype,
// lse F32). Metadata holds every attention parameter; scale only when it is set explicitly.
[[nodiscard]] SafetensorsFile replay_to_safetensors(const Problem& pr, const HostTensor* out,
                                                    const std::vector<float>* lse);
void save_replay(const std::string& path, const Problem& pr, const HostTensor* out = nullptr,
                 const std::vector<float>* lse = nullptr);

// `--save`: a file with just `out` (the problem's dtype) and `lse` (F32), and `metadata` as the
// file's string metadata (what computed them, from which file).
void save_outputs(const std::string& path, const HostTensor& out, const std::vector<float>& lse,
                  const std::map<std::string, std::string>& metadata = {});

// The reference's double results in storage form: out rounded once (to nearest even) to `t`,
// lse to the nearest float.
[[nodiscard]] HostTensor reference_out_as(const ReferenceResult& ref, DType t);
[[nodiscard]] std::vector<float> reference_lse_as_float(const ReferenceResult& ref);
// One correctly rounded (nearest even) conversion of a double to dtype `t`, returned as float.
// A plain double -> float -> half chain can round twice and miss by one ulp on near-ties.
[[nodiscard]] float round_double_to(DType t, double v);

} // namespace attn
