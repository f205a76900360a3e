// models/hf_weights.h — Hugging Face weight import/export for Tessera models.
//
// Parameter names already are the family's HF names (models/parameter.h), so import is a
// lookup plus two translations: GPT-2 files may prefix names with "transformer." (as
// GPT2LMHeadModel.save_pretrained does), and GPT-2's Conv1D weights (Parameter::hf_transposed)
// are (in, out) in HF files but (out, in) in Tessera.
//
// Import is all-or-nothing with respect to the file's contents: every name, shape and dtype is
// validated before the first byte is written into a parameter, so a wrong file never leaves a
// half-loaded model. Only an I/O failure during the copy itself (the file changed or the disk
// failed after validation) can leave parameters partly written; that Status says so (the
// trainer then refuses to start on every rank).
// Import is implemented in hf_weights.cc, export in hf_weights_export.cc, the name mapping they
// share in hf_layout.h.
// Thread-safety: LoadHfWeights and the exports: none, the caller owns `params` for the call.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/parameter.h"
#include "models/safetensors.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace tessera {

// How a Llama-family MoE model's routed experts are named in HF files: Mixtral's
// (block_sparse_moe.gate, block_sparse_moe.experts.N.w1/w2/w3) or Qwen2-MoE's / DeepSeek's
// (mlp.gate, mlp.experts.N.{gate,up,down}_proj; DeepSeek's mlp.shared_experts.*). Tessera keeps them
// stacked on the expert axis (param_layout.h); import and export split them per expert.
// GPT-2-family experts have no HF convention and keep Tessera's stacked names.
enum class HfMoeNames { kMixtral, kQwenMoe };
// What an export writes: Mixtral's names for a model that computes exactly what HF's Mixtral
// does (softmax, renormalised gates, route scale 1, no shared experts, no groups, no routing
// bias), the others' otherwise. Import reads either.
HfMoeNames DefaultHfMoeNames(const ModelConfig& config);

// What an HF file may hold beyond the parameters.
struct HfExtras {
  // The routing bias of every MoE block, in layer order (DeepSeek-V3's
  // "model.layers.L.mlp.gate.e_score_correction_bias", E each); empty when the file has none.
  std::vector<std::vector<float>> moe_bias;
};

// The one-rank model's parameters without values, in DeclareParameters order: names, global
// shapes, kinds and hf_transposed -- what HfWeightSource maps a file onto.
std::vector<Parameter> HfGlobalSpecs(const ModelConfig& config);

// Test seam of HfWeightSource: called before each attempt at reading a piece of the file
// tensor `tensor` (attempt 0, then 1 for the retry); a non-OK Status fails that attempt as a
// failed read would.
using HfReadFault = std::function<Status(std::string_view tensor, int attempt)>;

// An HF checkpoint validated against a model, from which any element range of any parameter
// can be read: the sharded loader's source (each rank reads only what its layout holds).
//
// Open validates every name, shape and dtype against `params` (their specs: names, global
// shapes, hf_transposed; values are not used) before returning, with LoadHfWeights' errors,
// and reads the routing bias when `routing_bias` (all MoE blocks' or none; without, a file
// holding one is refused). Read then touches only the bytes of the requested elements, except
// for GPT-2's transposed Conv1D weights, whose rows are strided in the file: those read, once
// per call, the file rows and columns that bound all of the call's requests (so a rank's
// pieces of one tensor should come in one call).
// Memory: F32 data is read straight into the destination; F16/BF16 and transposed tensors go
// through a buffer of at most kHfReadBufferElems (or one file row, if larger) per call.
// A failed or short read, or a non-finite value, is retried once, then refused naming file,
// tensor and element (kIoError / kDataLoss). Thread-safety: Read is safe to call concurrently.
inline constexpr int64_t kHfReadBufferElems = int64_t{1} << 20;
class HfWeightSource {
 public:
  static Result<std::unique_ptr<HfWeightSource>> Open(const std::string& path,
                                                      const ModelConfig& config,
                                                      std::span<const Parameter> params,
                                                      bool routing_bias, HfReadFault fault = {});
  ~HfWeightSource();

  // Elements [begin, begin + n) of params[param] in Tessera's row-major layout, as f32.
  struct Request {
    int64_t begin = 0, n = 0;
    float* out = nullptr;
  };
  Status Read(size_t param, std::span<const Request> requests) const;
  Status Read(size_t param, int64_t begin, int64_t n, float* out) const {
    const Request r{begin, n, out};
    return Read(param, std::span<const Request>(&r, 1));
  }

  // The routing bias of every MoE block in layer order (empty when the file has none).
  const std::vector<std::vector<float>>& routing_bias() const { return bias_; }
  const std::string& path() const;
  size_t num_files() const;
  int64_t bytes_read() const { return bytes_read_.load(); }  // by Read so far, retries included

 private:
  struct Piece;  // one file tensor's share of a parameter
  HfWeightSource() = default;
  Status ReadPiece(const Piece& piece, std::span<const Request> requests) const;
  Status ReadTransposed(const Piece& piece, std::span<const Request> requests) const;

  std::unique_ptr<SafetensorsCheckpoint> ckpt_;
  std::vector<std::vector<Piece>> pieces_;  // per parameter, by offset
  std::vector<std::vector<float>> bias_;
  HfReadFault fault_;
  mutable std::atomic<int64_t> bytes_read_{0};
};

// Loads HF weights into `params` (whole, f32, CPU tensors): HfWeightSource::Open, then every
// parameter read whole. `path` is a .safetensors file, a model.safetensors.index.json, or a
// directory holding model.safetensors or model.safetensors.index.json (the single file wins if
// both exist).
// Tensors in F32, F16 or BF16 are converted to f32. Ignored without complaint: GPT-2's causal
// mask buffers "h.{i}.attn.bias" / "h.{i}.attn.masked_bias", Llama's
// "model.layers.{i}.self_attn.rotary_emb.inv_freq", and "lm_head.weight" when
// config.tie_embeddings. Errors: kNotFound (no file), kDataLoss (malformed file), and
// kInvalidArgument naming file and tensor for missing tensors, unexpected tensors, shape or
// dtype mismatches. An MoE model's experts are read per expert in either dialect (above).
// With `extras`, the MoE blocks' routing-bias tensors are read into it (all blocks' or none);
// without, a file holding them is refused (ignoring a routing bias would route differently).
Status LoadHfWeights(const std::string& path, const ModelConfig& config,
                     std::span<Parameter> params, HfExtras* extras = nullptr);

// Writes `params` as one safetensors file at `path` with HF names (no "transformer." prefix,
// like the hub's gpt2 model.safetensors) and HF layouts (hf_transposed weights back to
// (in, out)), stored as `dtype` (kF32, kBF16 or kF16), with metadata {"format": "pt"}.
// When config.tie_embeddings no "lm_head.weight" is written (HF drops the shared tensor);
// a parameter of that name under a tied config is kInvalidArgument. Atomic (temp + rename).
// Loading an f32 export gives bit-identical parameters. An MoE model's experts are written per
// expert (DefaultHfMoeNames); `extras` adds the routing bias (always f32) unless it is all zero.
Status ExportHfWeights(const std::string& path, const ModelConfig& config,
                       std::span<const Parameter> params, DType dtype = DType::kF32,
                       const HfExtras* extras = nullptr);

// What an export writes, tensor by tensor in model order (embeddings, blocks in layer order,
// the rest), each pointing into `params`, `extras` or `owned`; ExportHfWeights writes them as
// one file, ExportHfModelDir (hf_export.h) as shards. `where` names the output in errors.
struct HfExportTensors {
  std::vector<SafetensorsTensorOut> tensors;
  std::vector<std::vector<float>> owned;  // transposed copies the tensors point into
  bool routing_bias = false;              // a non-zero MoE routing bias is written
  HfMoeNames moe_names = HfMoeNames::kMixtral;
};
Result<HfExportTensors> CollectHfExport(const std::string& where, const ModelConfig& config,
                                        std::span<const Parameter> params, DType dtype,
                                        const HfExtras* extras);

}  // namespace tessera
