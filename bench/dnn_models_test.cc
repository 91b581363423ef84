#include "dnn_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace switchml::bench {
namespace {

using std::chrono::nanoseconds;
using ::testing::HasSubstr;

const DnnLayer* Find(const DnnModel& m, const std::string& name) {
  for (const DnnLayer& l : m.layers)
    if (l.name == name) return &l;
  return nullptr;
}

void ExpectWellFormed(const DnnModel& m) {
  std::set<std::string> names;
  for (const DnnLayer& l : m.layers) {
    EXPECT_GT(l.num_params, 0u) << m.name << " " << l.name;
    EXPECT_TRUE(names.insert(l.name).second) << "duplicate layer " << l.name;
  }
}

// Published totals: torchvision's documented parameter counts (resnet50 25,557,032; vgg19
// 143,667,240) and Hugging Face bert-base-uncased's BertModel (109,482,240).
TEST(DnnModels, ResNet50MatchesTorchvision) {
  const DnnModel m = ResNet50();
  ExpectWellFormed(m);
  EXPECT_EQ(m.TotalParams(), 25557032u);
  EXPECT_EQ(m.layers.size(), 107u);  // 53 conv + 53 bn + fc
  int convs = 0, bns = 0;
  for (const DnnLayer& l : m.layers) {
    convs += l.kind == "conv";
    bns += l.kind == "bn";
  }
  EXPECT_EQ(convs, 53);
  EXPECT_EQ(bns, 53);
  ASSERT_NE(Find(m, "fc"), nullptr);
  EXPECT_EQ(Find(m, "fc")->num_params, 2049000u);
  ASSERT_NE(Find(m, "layer4.0.downsample.0"), nullptr);
  EXPECT_EQ(Find(m, "layer4.0.downsample.0")->num_params, 1024u * 2048u);
  ASSERT_NE(Find(m, "layer3.5.conv2"), nullptr);
  EXPECT_EQ(Find(m, "layer3.5.conv2")->num_params, 9u * 256u * 256u);
  // ~4.1 G multiply-adds per 224x224 image.
  EXPECT_GT(m.TotalFlops(), 8.0e9);
  EXPECT_LT(m.TotalFlops(), 8.4e9);
}

TEST(DnnModels, Vgg19MatchesTorchvision) {
  const DnnModel m = Vgg19();
  ExpectWellFormed(m);
  EXPECT_EQ(m.TotalParams(), 143667240u);
  EXPECT_EQ(m.layers.size(), 19u);
  EXPECT_EQ(m.layers.front().name, "features.0");
  EXPECT_EQ(m.layers.front().num_params, 27u * 64u + 64u);
  EXPECT_EQ(m.layers[15].name, "features.34");  // the last convolution, as in torchvision
  ASSERT_NE(Find(m, "classifier.0"), nullptr);
  EXPECT_EQ(Find(m, "classifier.0")->num_params, 25088u * 4096u + 4096u);
  // ~19.6 G multiply-adds per image.
  EXPECT_GT(m.TotalFlops(), 39.0e9);
  EXPECT_LT(m.TotalFlops(), 39.4e9);
}

TEST(DnnModels, BertBaseMatchesHuggingFaceBertModel) {
  const DnnModel m = BertBase();
  ExpectWellFormed(m);
  EXPECT_EQ(m.TotalParams(), 109482240u);
  EXPECT_EQ(m.layers.size(), 4u + 12u * 8u + 1u);
  EXPECT_EQ(Find(m, "embeddings.word_embeddings")->num_params, 30522u * 768u);
  EXPECT_EQ(Find(m, "encoder.layer.11.intermediate.dense")->num_params, 768u * 3072u + 3072u);
  // The encoder is 12 × 7,087,872 parameters.
  uint64_t encoder = 0;
  for (const DnnLayer& l : m.layers)
    if (l.name.rfind("encoder.", 0) == 0) encoder += l.num_params;
  EXPECT_EQ(encoder, 12u * 7087872u);
  // The sequence length changes the FLOPs, never the parameters.
  EXPECT_EQ(BertBase(512).TotalParams(), m.TotalParams());
  EXPECT_GT(BertBase(512).TotalFlops(), 4 * m.TotalFlops());
}

TEST(DnnModels, MakeByName) {
  for (const std::string& name : DnnModelNames()) {
    auto m = MakeDnnModel(name);
    ASSERT_TRUE(m.ok()) << name;
    EXPECT_EQ(m->name, name);
  }
  auto bad = MakeDnnModel("resnet18");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("resnet18"));
}

TEST(DnnModels, OffsetsAreCumulative) {
  const DnnModel m = Vgg19();
  EXPECT_EQ(m.Offset(0), 0u);
  EXPECT_EQ(m.Offset(1), m.layers[0].num_params);
  EXPECT_EQ(m.Offset(m.layers.size()), m.TotalParams());
}

TEST(SplitTime, SumsExactlyAndFollowsWeights) {
  const DnnModel m = ResNet50();
  for (TimeSplit split : {TimeSplit::kFlops, TimeSplit::kParams}) {
    const auto parts = SplitTime(m, nanoseconds(100'000'007), split);
    ASSERT_EQ(parts.size(), m.layers.size());
    int64_t sum = 0;
    for (auto p : parts) sum += p.count();
    EXPECT_EQ(sum, 100'000'007);
  }
  // By parameters: fc holds 2,049,000 / 25,557,032 of the time.
  const auto by_params = SplitTime(m, nanoseconds(1'000'000'000), TimeSplit::kParams);
  EXPECT_NEAR(double(by_params.back().count()), 1e9 * 2049000.0 / 25557032.0, 2.0);
  // By FLOPs the 7x7 stem convolution (118 M multiply-adds) outweighs fc (2 M).
  const auto by_flops = SplitTime(m, nanoseconds(1'000'000'000), TimeSplit::kFlops);
  EXPECT_GT(by_flops.front(), 10 * by_flops.back());
  // Embedding lookups have no FLOPs and get no time.
  EXPECT_EQ(SplitTime(BertBase(), nanoseconds(1'000'000), TimeSplit::kFlops).front().count(), 0);
  EXPECT_EQ(SplitTime(m, nanoseconds(0), TimeSplit::kFlops).front().count(), 0);
}

TEST(LayerTimesCsv, RoundTripsAndRejectsMismatches) {
  const DnnModel m = Vgg19();
  LayerTimes t;
  t.forward = SplitTime(m, nanoseconds(50'000'000), TimeSplit::kFlops);
  t.backward = SplitTime(m, nanoseconds(100'000'000), TimeSplit::kFlops);
  const std::string csv = LayerTimesCsv(m, t);
  auto back = ParseLayerTimesCsv(csv, m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->forward, t.forward);
  EXPECT_EQ(back->backward, t.backward);

  // Spaces after commas (the reference's example files) are accepted.
  std::string spaced = "idx, numel, f, b\n";
  for (size_t i = 0; i < m.layers.size(); ++i)
    spaced += std::to_string(i) + ", " + std::to_string(m.layers[i].num_params) + ", 5, 7\n";
  auto s = ParseLayerTimesCsv(spaced, m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->backward.back(), nanoseconds(7));

  std::string wrong_numel = csv;
  wrong_numel.replace(wrong_numel.find("\n0,1792,"), 8, "\n0,1793,");
  auto e1 = ParseLayerTimesCsv(wrong_numel, m);
  EXPECT_EQ(e1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(e1.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(e1.status().message(), HasSubstr("1793"));

  const std::string truncated = csv.substr(0, csv.rfind('\n', csv.size() - 2) + 1);
  EXPECT_THAT(ParseLayerTimesCsv(truncated, m).status().message(), HasSubstr("18 layer rows"));
  EXPECT_THAT(ParseLayerTimesCsv("h\n0,1792,x,1\n", m).status().message(), HasSubstr("forward_pass_ns"));
  EXPECT_THAT(ParseLayerTimesCsv("h\n1,1792,1,1\n", m).status().message(), HasSubstr("layer_index 1"));
}

// Every layer is in exactly one bucket, buckets are contiguous and come in backward order.
void ExpectPartition(const DnnModel& m, const std::vector<GradientBucket>& buckets) {
  size_t expect_end = m.layers.size();
  uint64_t total = 0;
  for (const GradientBucket& b : buckets) {
    EXPECT_EQ(b.end_layer, expect_end);
    EXPECT_LT(b.first_layer, b.end_layer);
    EXPECT_EQ(b.offset, m.Offset(b.first_layer));
    EXPECT_EQ(b.offset + b.num_elements, m.Offset(b.end_layer));
    expect_end = b.first_layer;
    total += b.num_elements;
  }
  EXPECT_EQ(expect_end, 0u);
  EXPECT_EQ(total, m.TotalParams());
}

TEST(MakeBuckets, PerLayerWithoutCap) {
  const DnnModel m = ResNet50();
  const auto b = MakeBuckets(m, 0);
  ASSERT_EQ(b.size(), m.layers.size());
  ExpectPartition(m, b);
  EXPECT_EQ(b.front().first_layer, m.layers.size() - 1);  // fc first: its gradient is ready first
}

TEST(MakeBuckets, DdpStyleCap) {
  const uint64_t cap = 25u << 20;
  for (const std::string& name : DnnModelNames()) {
    const DnnModel m = *MakeDnnModel(name);
    const auto b = MakeBuckets(m, cap);
    ExpectPartition(m, b);
    for (size_t i = 0; i < b.size(); ++i) {
      const uint64_t bytes = b[i].num_elements * 4;
      const uint64_t last = m.layers[b[i].first_layer].num_params * 4;  // added last (backward order)
      // Closed as soon as it reached the cap: without its last layer it was below the cap.
      EXPECT_LT(bytes - last, cap) << name << " bucket " << i;
      if (i + 1 < b.size()) {
        EXPECT_GE(bytes, cap) << name << " bucket " << i;
      }
    }
  }
  // VGG-19: classifier.6 + classifier.3 (20.9 M floats = 84 MB) pass 25 MiB together, and
  // classifier.0 (411 MB) is a bucket of its own.
  const auto v = MakeBuckets(Vgg19(), cap);
  EXPECT_EQ(v[0].first_layer, 17u);
  EXPECT_EQ(v[1].first_layer, 16u);
  EXPECT_EQ(v[1].end_layer, 17u);
}

}  // namespace
}  // namespace switchml::bench
