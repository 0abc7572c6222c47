// Tokenizing a chat resent whole every turn, as an OpenAI client sends it, on SmolLM2's vocabulary
// (scripts/fetch_models.sh): the prompt of turn N (N user/assistant pairs, ChatML) encoded from
// scratch, and with a FragmentMemo that has seen turn N-1 (what `squeezekv serve` does), where only
// the new messages are encoded. BM_EncodeChat/<turns>/<memo>.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "squeezekv/engine/chat_template.h"
#include "squeezekv/engine/model.h"

namespace squeezekv {
namespace {

const Model* smollm2() {
  static const Model* model = [] {
    const char* dir = std::getenv("SQUEEZEKV_MODELS");
    const char* home = std::getenv("HOME");
    const std::string base = dir != nullptr && *dir != '\0'
                                 ? std::string(dir)
                                 : std::string(home != nullptr ? home : "") + "/.cache/squeezekv/models";
    try {
      return new Model(Model::load(base + "/SmolLM2-135M-Instruct.Q4_1.gguf"));
    } catch (const std::exception&) {
      return static_cast<Model*>(nullptr);
    }
  }();
  return model;
}

std::string chat_prompt(int turns) {
  const char* const questions[] = {"Name a colour.", "Name an animal.", "What is 2 plus 3?",           "Say hello.",
                                   "Name a fruit.",  "Name a city.",    "What day comes after Monday?"};
  std::vector<ChatMessage> messages;
  for (int t = 0; t < turns; ++t) {
    messages.push_back({"user", questions[t % 7]});
    messages.push_back({"assistant", "A short reply number " + std::to_string(t) + "."});
  }
  messages.push_back({"user", "And one more?"});
  return render_chat({ChatFormat::chatml, "You are a helpful AI assistant."}, messages);
}

void BM_EncodeChat(benchmark::State& state) {
  const Model* model = smollm2();
  if (model == nullptr) {
    state.SkipWithError("missing SmolLM2-135M-Instruct.Q4_1.gguf: run scripts/fetch_models.sh");
    return;
  }
  const int turns = int(state.range(0));
  const bool with_memo = state.range(1) != 0;
  const std::string previous = chat_prompt(turns - 1), prompt = chat_prompt(turns);
  size_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    FragmentMemo memo;
    if (with_memo) encode_chat(model->tokenizer(), ChatFormat::chatml, previous, &memo);
    state.ResumeTiming();
    const auto ids = encode_chat(model->tokenizer(), ChatFormat::chatml, prompt, with_memo ? &memo : nullptr);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_EncodeChat)
    ->ArgNames({"turns", "memo"})
    ->ArgsProduct({{100, 1000}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace squeezekv
