// bench/dnn_models.h — the gradient layout of real DNNs for dnn_bench (docs/dnn-benchmark.md),
// built layer by layer from the models' published shapes so that the totals can be checked,
// plus the pure arithmetic of the benchmark: how a backward time is spread over layers, the
// reference's per-layer CSV, and DDP-style gradient buckets.
//
//   StatusOr<DnnModel> m = MakeDnnModel("resnet50");        // 107 layers, 25,557,032 parameters
//   std::vector<std::chrono::nanoseconds> bw =
//       SplitTime(*m, std::chrono::milliseconds(100), TimeSplit::kFlops);
//   std::vector<GradientBucket> buckets = MakeBuckets(*m, 25 << 20);   // launch order
//
// A "layer" is one module with trainable parameters (convolution, batch norm, linear,
// embedding, layer norm); its gradient is all of its parameter tensors (weight and bias) as one
// contiguous float32 range. Layers are listed in forward order; the backward pass produces
// their gradients in reverse order. All functions are pure and thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "switchml/status.h"

namespace switchml::bench {

struct DnnLayer {
  std::string name;           // PyTorch-style module path, e.g. "layer1.0.conv1"
  std::string kind;           // conv, bn, linear, embedding, layernorm
  uint64_t num_params = 0;    // gradient elements: weight + bias, > 0
  // Forward FLOPs of one sample (2 per multiply-add; normalisations counted as 4 per element).
  // Only used to apportion a given compute time over layers (TimeSplit::kFlops).
  uint64_t forward_flops = 0;
};

struct DnnModel {
  std::string name;         // "resnet50", "vgg19", "bert-base"
  std::string description;  // the variant and what is (not) included
  std::vector<DnnLayer> layers;  // forward order
  uint64_t TotalParams() const;
  uint64_t TotalFlops() const;
  // Element offset of layer i's gradient in a buffer holding all layers in forward order.
  uint64_t Offset(size_t layer) const;
};

// "resnet50", "vgg19", "bert-base".
std::vector<std::string> DnnModelNames();
// INVALID_ARGUMENT naming the unknown model and the known ones.
StatusOr<DnnModel> MakeDnnModel(std::string_view name);

// torchvision resnet50 (v1.5: stride on the 3x3 convolution), ImageNet 224x224, 1000 classes:
// 53 convolutions (no bias) each with its batch norm, and the fully connected layer.
DnnModel ResNet50();
// torchvision vgg19 (no batch norm), 224x224, 1000 classes: 16 convolutions + 3 linear layers.
DnnModel Vgg19();
// BERT-base uncased (Hugging Face BertModel: embeddings, 12 encoder layers with 12 heads,
// hidden 768, intermediate 3072, and the pooler; no pre-training or task heads), vocabulary
// 30522, 512 positions. FLOPs are for `seq_len` tokens per sample.
DnnModel BertBase(uint32_t seq_len = 128);

enum class TimeSplit { kFlops, kParams };
// Spreads `total` over the model's layers proportionally to their forward FLOPs or parameter
// counts. The parts add up to `total` exactly (rounding remainders go to the largest layers).
std::vector<std::chrono::nanoseconds> SplitTime(const DnnModel& model, std::chrono::nanoseconds total,
                                                TimeSplit split);

// Per-layer compute times, forward order.
struct LayerTimes {
  std::vector<std::chrono::nanoseconds> forward, backward;
};
// The reference dnn_benchmark's model CSV (docs/dnn-benchmark.md): a header line (ignored), then
// one row per layer `layer_index, numel, forward_pass_ns, backward_pass_ns`, columns by
// position. The rows must describe `model`: one row per layer in forward order, index = row
// number, numel = the layer's parameter count. INVALID_ARGUMENT names the row and column of
// the first problem.
StatusOr<LayerTimes> ParseLayerTimesCsv(std::string_view text, const DnnModel& model);
// The same format, for --print-layers (and editing into a --layer-times file).
std::string LayerTimesCsv(const DnnModel& model, const LayerTimes& times);

// One all-reduce of the backward pass: layers [first_layer, end_layer) in forward order,
// which are contiguous in the gradient buffer. It can start once layer `first_layer` (the
// last of them in backward order) has its gradient.
struct GradientBucket {
  size_t first_layer = 0, end_layer = 0;
  uint64_t offset = 0;        // elements
  uint64_t num_elements = 0;
};
// Buckets in launch order (from the last layer backwards). cap_bytes == 0: one bucket per
// layer. Otherwise as PyTorch DDP assigns them: layers are appended in backward order and a
// bucket is closed as soon as it holds >= cap_bytes (so a bucket exceeds the cap by at most
// its last layer, and a layer larger than the cap is a bucket of its own).
std::vector<GradientBucket> MakeBuckets(const DnnModel& model, uint64_t cap_bytes);

}  // namespace switchml::bench
