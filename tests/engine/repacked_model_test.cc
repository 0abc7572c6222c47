// A model whose Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K matrices are repacked at load
// (LoadOptions::repack, the default) computes the same logits, bit for bit, as the same file read
// in place, tied or untied embeddings, prompt (tiles) and decode (one token) alike, with and
// without a pool, on every SIMD target.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ops/hwy_targets.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/random_model.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/thread_pool.h"
#include "test_util.h"

namespace squeezekv {
namespace {

// The logits of a 21-token prompt (all rows) and of 8 greedy steps after it.
std::vector<std::vector<float>> run(const Model& model, ThreadPool* pool) {
  Engine engine(model, pool);
  KVCacheConfig config;
  config.method = "full";
  auto cache = engine.make_cache(config);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back(3 + (i * 37) % 500);
  std::vector<std::vector<float>> out(1);
  engine.forward(prompt, *cache, Logits::all, out.back());
  for (int step = 0; step < 8; ++step) {
    const std::vector<float>& last = out.back();
    const int vocab = model.config().vocab;
    const auto token = int32_t(argmax(last.data() + last.size() - size_t(vocab), vocab));
    out.emplace_back();
    engine.forward(std::span(&token, 1), *cache, Logits::last, out.back());
  }
  return out;
}

struct Case {
  TensorType type;
  bool k_quant_mix;  // Q4_K_M: Q6_K matrices beside the Q4_K ones
  bool tied;
};

TEST(RepackedModel, SameLogitsAsTheFileReadInPlace) {
  int repacked_cases = 0;
  for (const Case c :
       {Case{TensorType::q8_0, false, false}, Case{TensorType::q8_0, false, true}, Case{TensorType::q4_k, false, false},
        Case{TensorType::q4_k, true, true}, Case{TensorType::q6_k, false, true}, Case{TensorType::q4_0, false, false},
        Case{TensorType::q4_1, false, true}, Case{TensorType::q5_0, false, true}}) {
    SCOPED_TRACE(std::string(tensor_type_name(uint32_t(c.type))) + (c.k_quant_mix ? " mix" : "") +
                 (c.tied ? ", tied embeddings" : ", output.weight"));
    RandomModelSpec spec;
    spec.dim = 256;
    spec.ffn_dim = 512;
    spec.vocab = 520;  // not a multiple of 16: the output matrix's last group is partial
    spec.weight_type = c.type;
    spec.k_quant_mix = c.k_quant_mix;
    spec.tied_embeddings = c.tied;
    const bool tied = c.tied;
    const std::string path = (test::temp_dir() / "squeezekv_repacked_model_test.gguf").string();
    write_random_model(path, spec);
    const Model in_place = Model::load(path, {.repack = false});
    const Model repacked = Model::load(path);
    std::filesystem::remove(path);
    EXPECT_EQ(in_place.repacked_matrices(), 0u);
    if (!can_repack(repacked.layer(0).wq)) continue;  // this CPU does not repack the type
    ++repacked_cases;
    // Every matrix of a repackable type, the embedding once when it is also the output.
    size_t expected = 0;
    for (int l = 0; l < spec.n_layers; ++l) {
      const LayerWeights& w = repacked.layer(l);
      for (const WeightMatrix* m : w.matrices()) {
        EXPECT_EQ(m->repacked != nullptr, can_repack(*m));
        expected += can_repack(*m);
      }
    }
    expected += can_repack(repacked.token_embedding()) + (!tied && can_repack(repacked.output()));
    EXPECT_EQ(repacked.repacked_matrices(), expected);
    EXPECT_GE(repacked.repacked_matrices(), size_t(7 * spec.n_layers));
    EXPECT_EQ(repacked.output().repacked != nullptr, can_repack(repacked.output()));
    EXPECT_GT(repacked.repacked_bytes(), 0u);
    std::vector<float> a(size_t(spec.dim)), b(size_t(spec.dim));
    for (const int32_t token : {0, 17, 519}) {
      in_place.embed(token, a.data());
      repacked.embed(token, b.data());
      ASSERT_EQ(a, b) << "token " << token;
    }
    // On every target: those without AVX-512 VNNI read the layouts by the half-group tiles.
    ThreadPool pool(2);
    testing::for_each_target([&] {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        EXPECT_EQ(run(repacked, p), run(in_place, p));
      }
    });
  }
  if (repacked_cases == 0) GTEST_SKIP() << "this CPU repacks no type (it has neither AVX-512 VNNI nor AVX2)";
}

}  // namespace
}  // namespace squeezekv
