#include "dnn_models.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <sstream>

namespace switchml::bench {

namespace {

// Builds a model layer by layer; the helpers take the shapes a paper or torchvision lists.
class Builder {
 public:
  // k×k convolution, c_in → c_out channels, producing an h×w output.
  void Conv(std::string name, uint32_t k, uint64_t c_in, uint64_t c_out, uint64_t h, uint64_t w, bool bias) {
    const uint64_t weights = uint64_t(k) * k * c_in * c_out;
    Add(std::move(name), "conv", weights + (bias ? c_out : 0), 2 * weights * h * w);
  }
  // Batch norm over c channels of h×w: scale and shift per channel.
  void BatchNorm(std::string name, uint64_t c, uint64_t h, uint64_t w) {
    Add(std::move(name), "bn", 2 * c, 4 * c * h * w);
  }
  // Linear layer applied to `tokens` vectors (1 for a classifier).
  void Linear(std::string name, uint64_t in, uint64_t out, uint64_t tokens, uint64_t extra_flops = 0) {
    Add(std::move(name), "linear", in * out + out, 2 * in * out * tokens + extra_flops);
  }
  // Embedding table: a lookup, no arithmetic.
  void Embedding(std::string name, uint64_t rows, uint64_t dim) { Add(std::move(name), "embedding", rows * dim, 0); }
  void LayerNorm(std::string name, uint64_t dim, uint64_t tokens) {
    Add(std::move(name), "layernorm", 2 * dim, 4 * dim * tokens);
  }
  std::vector<DnnLayer> Take() { return std::move(layers_); }

 private:
  void Add(std::string name, std::string kind, uint64_t params, uint64_t flops) {
    layers_.push_back(DnnLayer{std::move(name), std::move(kind), params, flops});
  }
  std::vector<DnnLayer> layers_;
};

}  // namespace

uint64_t DnnModel::TotalParams() const {
  uint64_t s = 0;
  for (const DnnLayer& l : layers) s += l.num_params;
  return s;
}

uint64_t DnnModel::TotalFlops() const {
  uint64_t s = 0;
  for (const DnnLayer& l : layers) s += l.forward_flops;
  return s;
}

uint64_t DnnModel::Offset(size_t layer) const {
  uint64_t s = 0;
  for (size_t i = 0; i < layer && i < layers.size(); ++i) s += layers[i].num_params;
  return s;
}

DnnModel ResNet50() {
  Builder b;
  b.Conv("conv1", 7, 3, 64, 112, 112, false);
  b.BatchNorm("bn1", 64, 112, 112);
  // After the 3×3/2 max pool: 56×56. Stages of bottleneck blocks (1×1 → 3×3 → 1×1, ×4
  // expansion); the first block of a stage changes the width and, from stage 2 on, halves the
  // resolution in its 3×3 convolution and in its 1×1 projection shortcut ("downsample").
  struct Stage {
    uint64_t width;
    int blocks;
    uint64_t stride;
  };
  const Stage stages[] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
  uint64_t in = 64, size = 56;
  for (int s = 0; s < 4; ++s) {
    const uint64_t width = stages[s].width, out_c = 4 * width;
    for (int blk = 0; blk < stages[s].blocks; ++blk) {
      const uint64_t stride = blk == 0 ? stages[s].stride : 1;
      const uint64_t out = size / stride;
      const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(blk) + ".";
      b.Conv(p + "conv1", 1, in, width, size, size, false);
      b.BatchNorm(p + "bn1", width, size, size);
      b.Conv(p + "conv2", 3, width, width, out, out, false);
      b.BatchNorm(p + "bn2", width, out, out);
      b.Conv(p + "conv3", 1, width, out_c, out, out, false);
      b.BatchNorm(p + "bn3", out_c, out, out);
      if (blk == 0) {
        b.Conv(p + "downsample.0", 1, in, out_c, out, out, false);
        b.BatchNorm(p + "downsample.1", out_c, out, out);
      }
      in = out_c;
      size = out;
    }
  }
  b.Linear("fc", 2048, 1000, 1);  // after global average pooling
  return DnnModel{"resnet50",
                  "torchvision resnet50 (v1.5), 224x224 ImageNet, 1000 classes; one layer = one conv / bn / fc "
                  "module (weight + bias)",
                  b.Take()};
}

DnnModel Vgg19() {
  Builder b;
  // Configuration "E" of Simonyan & Zisserman: 3×3 convolutions with bias, "M" = 2×2 max pool.
  const int cfg[] = {64, 64, -1, 128, 128, -1, 256, 256, 256, 256, -1, 512, 512, 512, 512, -1, 512, 512, 512, 512, -1};
  uint64_t in = 3, size = 224;
  int index = 0;  // torchvision's features.<index>: conv, relu, [pool] each take an index
  for (int c : cfg) {
    if (c < 0) {
      size /= 2;
      ++index;
      continue;
    }
    b.Conv("features." + std::to_string(index), 3, in, uint64_t(c), size, size, true);
    index += 2;
    in = uint64_t(c);
  }
  b.Linear("classifier.0", 512 * 7 * 7, 4096, 1);
  b.Linear("classifier.3", 4096, 4096, 1);
  b.Linear("classifier.6", 4096, 1000, 1);
  return DnnModel{"vgg19", "torchvision vgg19 (no batch norm), 224x224 ImageNet, 1000 classes", b.Take()};
}

DnnModel BertBase(uint32_t seq_len) {
  constexpr uint64_t kHidden = 768, kLayers = 12, kIntermediate = 3072, kVocab = 30522, kPositions = 512,
                     kTypes = 2;
  const uint64_t s = seq_len;
  Builder b;
  b.Embedding("embeddings.word_embeddings", kVocab, kHidden);
  b.Embedding("embeddings.position_embeddings", kPositions, kHidden);
  b.Embedding("embeddings.token_type_embeddings", kTypes, kHidden);
  b.LayerNorm("embeddings.LayerNorm", kHidden, s);
  for (uint64_t i = 0; i < kLayers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    b.Linear(p + "attention.self.query", kHidden, kHidden, s);
    b.Linear(p + "attention.self.key", kHidden, kHidden, s);
    b.Linear(p + "attention.self.value", kHidden, kHidden, s);
    // The parameter-free attention products Q·Kᵀ and softmax·V (2·s²·hidden multiply-adds over
    // all heads) are charged to the output projection that consumes them.
    b.Linear(p + "attention.output.dense", kHidden, kHidden, s, 2 * 2 * s * s * kHidden);
    b.LayerNorm(p + "attention.output.LayerNorm", kHidden, s);
    b.Linear(p + "intermediate.dense", kHidden, kIntermediate, s);
    b.Linear(p + "output.dense", kIntermediate, kHidden, s);
    b.LayerNorm(p + "output.LayerNorm", kHidden, s);
  }
  b.Linear("pooler.dense", kHidden, kHidden, 1);  // the [CLS] token only
  return DnnModel{"bert-base",
                  "BERT-base uncased (Hugging Face BertModel: embeddings + 12 layers x 12 heads, hidden 768, "
                  "intermediate 3072 + pooler; no MLM/NSP or task head), vocabulary 30522, FLOPs at sequence "
                  "length " + std::to_string(seq_len),
                  b.Take()};
}

std::vector<std::string> DnnModelNames() { return {"resnet50", "vgg19", "bert-base"}; }

StatusOr<DnnModel> MakeDnnModel(std::string_view name) {
  if (name == "resnet50") return ResNet50();
  if (name == "vgg19") return Vgg19();
  if (name == "bert-base") return BertBase();
  return InvalidArgumentError("--model must be one of resnet50, vgg19, bert-base, got '" + std::string(name) + "'");
}

std::vector<std::chrono::nanoseconds> SplitTime(const DnnModel& model, std::chrono::nanoseconds total,
                                                TimeSplit split) {
  const size_t n = model.layers.size();
  std::vector<std::chrono::nanoseconds> out(n, std::chrono::nanoseconds(0));
  if (n == 0 || total.count() <= 0) return out;
  std::vector<long double> weight(n);
  long double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    weight[i] = split == TimeSplit::kFlops ? (long double)model.layers[i].forward_flops
                                           : (long double)model.layers[i].num_params;
    sum += weight[i];
  }
  if (sum <= 0) {  // no weights at all: equal parts
    std::fill(weight.begin(), weight.end(), 1.0L);
    sum = (long double)n;
  }
  int64_t assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::chrono::nanoseconds(int64_t((long double)total.count() * weight[i] / sum));
    assigned += out[i].count();
  }
  // Floor rounding leaves at most n nanoseconds; hand them to the heaviest layers, one each.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weight[a] > weight[b]; });
  for (size_t k = 0; assigned < total.count(); k = (k + 1) % n, ++assigned) out[order[k]] += std::chrono::nanoseconds(1);
  return out;
}

namespace {

std::string Trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return std::string(s.substr(a, b - a));
}

}  // namespace

StatusOr<LayerTimes> ParseLayerTimesCsv(std::string_view text, const DnnModel& model) {
  static const char* kColumns[] = {"layer_index", "numel", "forward_pass_ns", "backward_pass_ns"};
  LayerTimes t;
  std::istringstream in{std::string(text)};
  std::string line;
  size_t line_no = 0, row = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 || Trim(line).empty()) continue;  // header (names ignored, as in the reference)
    const std::string where = "--layer-times line " + std::to_string(line_no);
    std::vector<std::string> cols;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cols.push_back(Trim(c));
    if (cols.size() < 4)
      return InvalidArgumentError(where + ": want 4 columns (layer_index, numel, forward_pass_ns, backward_pass_ns), got " +
                                  std::to_string(cols.size()));
    uint64_t v[4];
    for (int c = 0; c < 4; ++c) {
      const std::string& s = cols[size_t(c)];
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v[c]);
      if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
        return InvalidArgumentError(where + ": column " + kColumns[c] + " is not a non-negative integer: '" + s + "'");
    }
    if (row >= model.layers.size())
      return InvalidArgumentError(where + ": more rows than the " + std::to_string(model.layers.size()) +
                                  " layers of " + model.name);
    if (v[0] != row)
      return InvalidArgumentError(where + ": layer_index " + std::to_string(v[0]) + ", want " + std::to_string(row) +
                                  " (rows in forward order)");
    if (v[1] != model.layers[row].num_params)
      return InvalidArgumentError(where + ": numel " + std::to_string(v[1]) + " but layer " + std::to_string(row) +
                                  " (" + model.layers[row].name + ") of " + model.name + " has " +
                                  std::to_string(model.layers[row].num_params) + " parameters");
    t.forward.push_back(std::chrono::nanoseconds(int64_t(v[2])));
    t.backward.push_back(std::chrono::nanoseconds(int64_t(v[3])));
    ++row;
  }
  if (row != model.layers.size())
    return InvalidArgumentError("--layer-times has " + std::to_string(row) + " layer rows, but " + model.name +
                                " has " + std::to_string(model.layers.size()) + " layers");
  return t;
}

std::string LayerTimesCsv(const DnnModel& model, const LayerTimes& times) {
  std::ostringstream o;
  o << "layer_index,numel,forward_pass_ns,backward_pass_ns\n";
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const int64_t f = i < times.forward.size() ? times.forward[i].count() : 0;
    const int64_t bw = i < times.backward.size() ? times.backward[i].count() : 0;
    o << i << "," << model.layers[i].num_params << "," << f << "," << bw << "\n";
  }
  return o.str();
}

std::vector<GradientBucket> MakeBuckets(const DnnModel& model, uint64_t cap_bytes) {
  std::vector<GradientBucket> out;
  const size_t n = model.layers.size();
  size_t end = n;  // the open bucket covers layers [i, end)
  uint64_t bytes = 0;
  auto close = [&](size_t first) {
    GradientBucket g;
    g.first_layer = first;
    g.end_layer = end;
    g.offset = model.Offset(first);
    for (size_t k = first; k < end; ++k) g.num_elements += model.layers[k].num_params;
    out.push_back(g);
    end = first;
    bytes = 0;
  };
  for (size_t i = n; i-- > 0;) {
    bytes += model.layers[i].num_params * sizeof(float);
    if (cap_bytes == 0 || bytes >= cap_bytes || i == 0) close(i);
  }
  return out;
}

}  // namespace switchml::bench
