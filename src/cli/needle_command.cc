// `squeezekv needle`: RULER-style retrieval (eval/needle.h) over methods x budgets x cache options x
// lengths x depths; a table on stdout, one JSON line per cell written as each cell ends (so that
// --resume loses at most the cell in progress), a CSV at the end, a progress bar on stderr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "cli/cache_file_options.h"
#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/model_options.h"
#include "cli/output_file.h"
#include "cli/progress.h"
#include "cli/sweep_axes.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/base/utf8.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/eval/needle.h"
#include "squeezekv/eval/sweep.h"
#include "squeezekv/eval/text_file.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {
namespace {

constexpr const char* kDefaultHaystack = "../shared/data/tinystories_val.txt";

struct NeedleArgs {
  ModelOptions model;
  CacheOptions cache;
  SweepSpec spec;
  SweepAxisOptions axes;
  std::string task = "passkey";
  std::vector<int64_t> lengths = {1024, 2048};
  std::vector<double> depths = {0.1, 0.5, 0.9};
  std::vector<double> budget_shares;  // budgets as shares of each length's rows (instead of --budgets)
  CLI::Option* budgets_option = nullptr;
  int samples = 5;
  uint64_t seed = 0;
  std::string haystack = kDefaultHaystack;
  CLI::Option* haystack_option = nullptr;
  bool question_in_prompt = false;
  int n_predict = 0;
  int questions = 1;
  std::string json_path, csv_path;
  bool resume = false;
  CacheFileOptions files;
};

// What must agree between a run and the rows of the file it resumes.
nlohmann::json run_identity(const NeedleArgs& a, const std::string& model_name) {
  nlohmann::json identity = {
      {"task", a.task},
      {"model", model_name},
      {"seed", a.seed},
      {"samples", a.samples},
      {"question_in_prompt", a.question_in_prompt},
      {"n_batch", a.model.n_batch},
      {"haystack", a.task == "passkey" ? "" : std::filesystem::path(a.haystack).filename().string()}};
  if (a.questions > 1) identity["questions"] = a.questions;  // files of one question stay resumable
  return identity;
}

// A cell's identity within a run: the variant, budget, length and depth.
std::string cell_key(const std::string& variant, int64_t budget, int64_t length, double depth) {
  std::ostringstream out;
  out.precision(17);
  out << variant << '|' << budget << '|' << length << '|' << depth;
  return out.str();
}

std::string cell_key(const nlohmann::json& row) {
  return cell_key(row.at("variant").get<std::string>(), row.at("budget").get<int64_t>(),
                  row.at("length").get<int64_t>(), row.at("depth").get<double>());
}

// --resume: the rows already in the file, each checked to come from the same run. Only the last
// line may be cut short (an interrupted run: no newline after it, a row's beginning); it is dropped
// and `clean` set false. Any other line that is not a cell of a needle run refuses the file,
// naming it and the line, before anything is written to it.
std::vector<nlohmann::json> read_done(const std::string& path, const nlohmann::json& identity, bool& clean) {
  std::vector<nlohmann::json> rows;
  clean = true;
  std::ifstream in(path, std::ios::binary);
  if (!in) return rows;  // nothing yet: a fresh run
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw InvalidArgument(invalid_value("--json", path, "cannot be read"));
  const bool ends_with_newline = text.empty() || text.back() == '\n';
  int64_t number = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++number;
    if (line.empty()) continue;
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    const bool cell = !row.is_discarded() && row.is_object() && row.contains("variant") && row["variant"].is_string() &&
                      row.contains("budget") && row["budget"].is_number_integer() && row.contains("length") &&
                      row["length"].is_number_integer() && row.contains("depth") && row["depth"].is_number();
    if (!cell) {
      const bool cut_short = row.is_discarded() && at >= text.size() && !ends_with_newline && line.starts_with("{\"");
      if (cut_short) {
        clean = false;
        continue;
      }
      throw InvalidArgument(invalid_value("--json", path,
                                          "line " + std::to_string(number) +
                                              " is not a cell of a needle run (only the last line may be cut "
                                              "short); --resume leaves the file as it is"));
    }
    for (const auto& [name, value] : identity.items()) {
      if (row.value(name, nlohmann::json()) != value) {
        throw InvalidArgument(invalid_value("--json", path,
                                            "holds a cell of another run (" + name + " " +
                                                row.value(name, nlohmann::json()).dump() + ", this run " +
                                                value.dump() + "); --resume needs the same run"));
      }
    }
    rows.push_back(std::move(row));
  }
  // A last line without its newline (cut short after its brace) would join the next one appended.
  if (!ends_with_newline) clean = false;
  return rows;
}

void write_csv(OutputFile& out, const std::vector<nlohmann::json>& rows) {
  const std::vector<std::string> columns = {"task",     "method",        "variant", "budget",    "kv_type",
                                            "length",   "depth",         "samples", "accuracy",  "full_accuracy",
                                            "kv_bytes", "full_kv_bytes", "kv_rows", "full_rows", "question_in_prompt",
                                            "seconds"};
  std::string text;
  for (size_t i = 0; i < columns.size(); ++i) text += (i ? "," : "") + columns[i];
  text += "\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      const auto& v = r.contains(columns[i]) ? r[columns[i]] : nlohmann::json();
      if (i) text += ',';
      if (v.is_string()) text += '"' + v.get<std::string>() + '"';
      else if (!v.is_null()) text += v.dump();
    }
    text += "\n";
  }
  out.write(text);
  out.close();
}

void print_table(const std::vector<nlohmann::json>& rows) {
  int width = 7;
  for (const auto& r : rows) width = std::max(width, int(r["variant"].get<std::string>().size()));
  std::printf("%-*s %6s %6s %6s %7s %8s %8s %9s %10s\n", width, "variant", "budget", "length", "depth", "samples",
              "accuracy", "full acc", "KV KiB", "full KiB");
  for (const auto& r : rows) {
    const auto& full = r["full_accuracy"];
    const std::string full_text =
        full.is_number() ? std::to_string(int(std::lround(100.0 * full.get<double>()))) + "%" : std::string("-");
    std::printf("%-*s %6s %6lld %6.2f %7d %7.0f%% %8s %9.1f %10.1f\n", width, r["variant"].get<std::string>().c_str(),
                r["budget"].get<int64_t>() == 0 ? "-" : std::to_string(r["budget"].get<int64_t>()).c_str(),
                static_cast<long long>(r["length"].get<int64_t>()), r["depth"].get<double>(), r["samples"].get<int>(),
                100.0 * r["accuracy"].get<double>(), full_text.c_str(), r["kv_bytes"].get<double>() / 1024.0,
                r["full_kv_bytes"].get<double>() / 1024.0);
  }
}

void check_shares(const NeedleArgs& a) {
  if (a.budget_shares.empty()) return;
  if (a.budgets_option->count() > 0) {
    throw InvalidArgument(invalid_value("--budget-shares", a.budget_shares.front(),
                                        "and --budgets are two ways to give the budgets: give one"));
  }
  std::set<double> seen;
  for (double share : a.budget_shares) {
    require(share > 0.0 && share < 1.0, "--budget-shares", share, "must lie in (0, 1) (a share of the prompt's rows)");
    require(seen.insert(share).second, "--budget-shares", share, "is given twice");
  }
}

// The cache configurations of one length, the full cache first in each (length, depth) so that the
// other cells can name its accuracy. With --budget-shares a budget is its share of the length's
// rows (at least one row more than the sinks, so that every method can hold a recent row).
std::vector<KVCacheConfig> length_configs(const NeedleArgs& a, int64_t length) {
  SweepSpec spec = a.spec;
  if (!a.budget_shares.empty()) {
    spec.budgets.clear();
    const int64_t floor = spec.base.n_sink + 1;
    for (double share : a.budget_shares) {
      const int64_t budget = std::max<int64_t>(floor, std::llround(share * double(length)));
      require(budget <= (int64_t(1) << 30), "--budget-shares", share, "gives too large a budget");
      if (std::find(spec.budgets.begin(), spec.budgets.end(), int(budget)) == spec.budgets.end()) {
        spec.budgets.push_back(int(budget));
      }
    }
  }
  std::vector<KVCacheConfig> configs = expand_sweep(spec);
  std::stable_partition(configs.begin(), configs.end(), [](const KVCacheConfig& c) { return keeps_every_row(c); });
  return configs;
}

void check_grid(const NeedleArgs& a, int context_length) {
  require(a.samples >= 1, "--samples", a.samples, "must be >= 1");
  require(!a.lengths.empty(), "--lengths", "(none)", "needs at least one length");
  std::set<int64_t> lengths;
  for (int64_t n : a.lengths) {
    require(n >= 1 && n <= context_length, "--lengths", n,
            "must lie in [1, " + std::to_string(context_length) + "] (the model's context length)");
    require(lengths.insert(n).second, "--lengths", n, "is given twice");
  }
  std::set<double> depths;
  for (double d : a.depths) {
    require(d >= 0.0 && d <= 1.0, "--depths", d, "must lie in [0, 1]");
    require(depths.insert(d).second, "--depths", d, "is given twice");
  }
  if (a.task == "passkey" && a.haystack_option->count() > 0) {
    throw InvalidArgument(invalid_value("--haystack", a.haystack, "has no effect with --task passkey (filler text)"));
  }
}

NeedleTask parse_task(const std::string& text) {
  try {
    return parse_needle_task(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(invalid_value("--task", text, "unknown (passkey, single, multikey, multivalue)"));
  }
}

void run(NeedleArgs& a) {
  const NeedleTask task = parse_task(a.task);
  a.axes.apply(a.spec);
  a.spec.base = a.cache.resolve();
  check_shares(a);
  const Model model = Model::load(a.model.model_path, a.model.load_options());
  check_grid(a, model.config().context_length);
  const std::string haystack = task == NeedleTask::passkey ? std::string() : read_text_file(a.haystack, "--haystack");
  const std::string model_name = std::filesystem::path(a.model.model_path).filename().string();
  const nlohmann::json identity = run_identity(a, model_name);
  std::map<int64_t, std::vector<KVCacheConfig>> configs;  // per length (budget shares differ)
  for (int64_t length : a.lengths) configs[length] = length_configs(a, length);

  // Every length must fit the task's needles; checked before any model work.
  for (int64_t length : a.lengths) {
    try {
      make_needle_sample(model.tokenizer(), {task, length, 0.5, a.seed, a.questions}, haystack);
    } catch (const InvalidArgument& e) {
      // The library names its own field ("length = N: why"): the command line names its option
      // instead of both. Any other field's message (the haystack's) stands as it is.
      const std::string_view why = e.what();
      const std::string field = invalid_value("length", length, "");
      const std::string asked = invalid_value("questions", a.questions, "");
      if (why.starts_with(asked))
        throw InvalidArgument(invalid_value("--questions", a.questions, why.substr(asked.size())));
      if (!why.starts_with(field)) throw;
      throw InvalidArgument(invalid_value("--lengths", length, why.substr(field.size())));
    }
  }
  std::vector<nlohmann::json> rows;  // every cell of the grid, resumed ones included
  std::map<std::string, nlohmann::json> done;
  bool clean = true;
  if (a.resume) {
    require(!a.json_path.empty(), "--resume", "true", "needs --json FILE (the cells done so far)");
    for (nlohmann::json& row : read_done(a.json_path, identity, clean)) {
      const std::string key = cell_key(row);  // before the move: the right side is evaluated first
      done[key] = std::move(row);
    }
  }
  // A full cache holds the whole prompt and every decoded token: within the model's context, as
  // generate's (the library checks each sample too; this names the options before any work).
  const int n_predict = a.n_predict > 0 ? a.n_predict : needle_answer_tokens(task);
  const int context = model.config().context_length;
  for (int64_t length : a.lengths) {
    if (length + n_predict <= context) continue;
    for (const KVCacheConfig& c : configs[length]) {
      if (!keeps_every_row(c)) continue;
      const std::string past = " a full cache would hold " + std::to_string(length + n_predict) +
                               " rows, past the model's context of " + std::to_string(context) +
                               " tokens (lower -n or the length, or leave full out of --methods)";
      if (a.n_predict > 0) {
        throw InvalidArgument(invalid_value("-n", n_predict, "with --lengths " + std::to_string(length) + past));
      }
      throw InvalidArgument(
          invalid_value("--lengths", length, "with the task's " + std::to_string(n_predict) + " answer tokens" + past));
    }
  }
  // A resumed file is appended to; one with a line cut short is written again without it.
  OutputFile json_out("--json", a.json_path, a.resume && clean);
  OutputFile csv_out("--csv", a.csv_path);
  if (a.resume && !clean) {
    for (const auto& [key, row] : done) json_out.write(row.dump() + "\n");
    json_out.flush();
  }

  int64_t total = 0;
  for (int64_t length : a.lengths) {
    for (double depth : a.depths) {
      for (const KVCacheConfig& c : configs[length]) {
        const int64_t budget = keeps_every_row(c) ? 0 : c.budget;
        total += done.contains(cell_key(sweep_variant(c), budget, length, depth)) ? 0 : a.samples;
      }
    }
  }
  std::fprintf(stderr,
               "needle %s: %zu configurations x %zu lengths x %zu depths, %d samples each; %lld samples to run%s\n",
               a.task.c_str(), configs.begin()->second.size(), a.lengths.size(), a.depths.size(), a.samples,
               static_cast<long long>(total), done.empty() ? "" : " (the rest resumed)");
  auto pool = a.model.make_pool();
  Engine engine(model, pool.get());
  NeedleRunOptions options;
  options.n_batch = a.model.n_batch;
  options.n_predict = a.n_predict;
  options.question_in_prompt = a.question_in_prompt;
  // --save-cache / --load-cache: one cell of one sample, its context saved or loaded.
  std::unique_ptr<ModelCache> loaded;
  if (a.files.saves() || a.files.loads()) {
    const std::string option = a.files.loads() ? "--load-cache" : "--save-cache";
    const std::string path = a.files.loads() ? a.files.load_path : a.files.save_path;
    require(a.lengths.size() == 1 && a.depths.size() == 1 && a.samples == 1 && configs.begin()->second.size() == 1,
            option, path,
            "needs a grid of one cell and one sample (one method, budget, length and depth; --samples 1)");
    require(!a.question_in_prompt, option, path, "needs the question apart from the context (no --question-in-prompt)");
    check_cache_file_options(a.files);
  }
  // The grid's one sample when a cache file is saved or loaded (the same as the loop builds).
  const NeedleSample only =
      a.files.saves() || a.files.loads()
          ? make_needle_sample(model.tokenizer(),
                               {task, a.lengths.front(), a.depths.front(), needle_sample_seed(a.seed, 0)}, haystack)
          : NeedleSample{};
  if (a.files.loads()) {
    LoadedCache file = load_cache_file(a.files.load_path, model);
    const KVCacheConfig cell = engine.resolved_config(configs.begin()->second.front());
    if (!(file.contents.config == cell)) {
      throw InvalidArgument(invalid_value("--load-cache", a.files.load_path,
                                          "holds a cache of " + cache_label(file.contents.config) + " at budget " +
                                              std::to_string(file.contents.config.budget) + ", not the cell's " +
                                              cache_label(cell) + " at budget " + std::to_string(cell.budget)));
    }
    require(file.contents.tokens == only.context, "--load-cache", a.files.load_path,
            "holds another context than this sample's (its task, length, depth and seed)");
    loaded = std::move(file.cache);
    options.context_in_cache = true;
  }
  if (a.files.saves()) {
    options.after_context = [&](const ModelCache& cache) { save_cache(a.files, engine, cache, only.context); };
  }
  Progress progress("needle: samples");
  int64_t finished = 0;
  for (int64_t length : a.lengths) {
    for (double depth : a.depths) {
      std::vector<NeedleSample> samples;
      for (const KVCacheConfig& c : configs[length]) {
        const std::string variant = sweep_variant(c);
        const int64_t budget = keeps_every_row(c) ? 0 : c.budget;
        const std::string key = cell_key(variant, budget, length, depth);
        if (auto it = done.find(key); it != done.end()) {
          rows.push_back(it->second);
          continue;
        }
        if (samples.empty()) {
          for (int i = 0; i < a.samples; ++i) {
            samples.push_back(make_needle_sample(
                model.tokenizer(), {task, length, depth, needle_sample_seed(a.seed, i), a.questions}, haystack));
          }
        }
        const auto count = [&] {
          progress(int(std::min<int64_t>(++finished, 1 << 30)), int(std::min<int64_t>(total, 1 << 30)));
        };
        const NeedleCell cell = loaded ? run_needle_cell_on(engine, *loaded, samples.front(), task, options, count)
                                       : run_needle_cell(engine, c, samples, task, options, count);
        nlohmann::json correct = nlohmann::json::array(), outputs = nlohmann::json::array(),
                       answers = nlohmann::json::array();
        for (size_t i = 0; i < samples.size(); ++i) {
          const NeedleOutcome& o = cell.outcomes[i];
          if (o.more_correct.empty()) {
            correct.push_back(o.correct);
            outputs.push_back(valid_utf8(o.text));
            answers.push_back(samples[i].answers);
            continue;
          }
          // Several questions: per sample, one entry per question.
          nlohmann::json rights = {o.correct}, texts = {valid_utf8(o.text)}, wanted = {samples[i].answers};
          for (size_t q = 0; q < o.more_correct.size(); ++q) {
            rights.push_back(bool(o.more_correct[q]));
            texts.push_back(valid_utf8(o.more_texts[q]));
            wanted.push_back(samples[i].more[q].answers);
          }
          correct.push_back(rights);
          outputs.push_back(texts);
          answers.push_back(wanted);
        }
        nlohmann::json row = identity;
        const std::string kv_type = to_string(c.kv_type);
        row.update({{"method", c.method},
                    {"variant", variant},
                    {"budget", budget},
                    {"budget_share", double(budget) / double(length)},
                    {"kv_type", kv_type},
                    {"length", length},
                    {"depth", depth},
                    {"accuracy", cell.accuracy},
                    {"correct", correct},
                    {"answers", answers},
                    {"outputs", outputs},
                    {"kv_bytes", cell.kv_bytes},
                    {"full_kv_bytes", cell.full_kv_bytes},
                    {"kv_rows", cell.kv_rows},
                    {"full_rows", length},
                    {"seconds", cell.seconds}});
        if (a.questions > 1) row["question_accuracy"] = cell.question_accuracy;
        done[key] = row;
        rows.push_back(row);
        json_out.write(row.dump() + "\n");
        json_out.flush();
      }
    }
  }
  // The full cache's accuracy beside each cell (shown, and in the CSV; the JSON lines were written
  // as the cells ended).
  auto reference_key = [](const nlohmann::json& row) {
    return cell_key(row["kv_type"].get<std::string>(), 0, row["length"].get<int64_t>(), row["depth"].get<double>());
  };
  std::map<std::string, nlohmann::json> reference;  // the full cache's accuracy at a storage, length, depth
  for (const nlohmann::json& row : rows) {
    if (row["budget"] == 0 && !reference.contains(reference_key(row))) reference[reference_key(row)] = row["accuracy"];
  }
  for (nlohmann::json& row : rows) {
    const auto ref = reference.find(reference_key(row));
    row["full_accuracy"] = ref != reference.end() ? ref->second : nlohmann::json();
  }
  json_out.close();
  if (csv_out.is_open()) write_csv(csv_out, rows);
  print_table(rows);
}

void add_needle_command(CLI::App& app) {
  auto args = std::make_shared<NeedleArgs>();
  auto* cmd = app.add_subcommand("needle",
                                 "needle in a haystack (RULER-style retrieval): accuracy of every method "
                                 "against its K/V memory over prompt lengths and needle depths");
  add_model_options(*cmd, args->model);
  cmd->add_option("--task", args->task,
                  "passkey (a 5-digit key in filler sentences), single (a key's 7-digit "
                  "magic number in real text), multikey (the asked key among 3 others), multivalue (4 numbers "
                  "for one key, all to recall)")
      ->capture_default_str();
  cmd->add_option("--lengths", args->lengths,
                  "prompt lengths in the model's tokens, BOS and question included "
                  "(at most the model's context length)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--depths", args->depths,
                  "where the asked needle starts, 0 (after the intro) to 1 (just "
                  "before the question), in tokens")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--samples", args->samples, "samples per cell (different keys, values and haystack places)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));  // every sample of a cell is held at once
  cmd->add_option("--seed", args->seed,
                  "seed of the samples (sample i has the same needle at every length and "
                  "depth)")
      ->capture_default_str();
  args->haystack_option = cmd->add_option("--haystack", args->haystack,
                                          "real text the needles hide in (tasks "
                                          "single, multikey, multivalue)")
                              ->capture_default_str();
  cmd->add_flag("--question-in-prompt", args->question_in_prompt,
                "query-aware: the question is part of the one prefilled prompt, so that snapkv's observation "
                "window sees it (default: query-agnostic, the cache chooses its rows before the question "
                "arrives as a chunk of its own)");
  cmd->add_option("--questions", args->questions,
                  "task single: this many needles with different keys, each asked in turn (after the answer to "
                  "the one before) against one cache compressed from the context; accuracy counts every question, "
                  "and question_accuracy in --json gives each")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxNeedleQuestions));
  cmd->add_option("-n,--n-predict", args->n_predict,
                  "tokens decoded for the answer (0 = the task's: passkey 12, "
                  "single and multikey 16, multivalue 64)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  SweepSpec& s = args->spec;
  s.methods = {"full", "squeeze", "h2o", "snapkv", "window"};
  s.budgets = {128, 256};
  cmd->add_option("--methods", s.methods, "method ids (`squeezekv methods`)")->delimiter(',')->capture_default_str();
  args->budgets_option = cmd->add_option("--budgets", s.budgets, "average budgets (rows per layer and KV head)")
                             ->delimiter(',')
                             ->capture_default_str();
  cmd->add_option("--budget-shares", args->budget_shares,
                  "budgets as shares of each prompt length's rows, e.g. 0.02,0.1,0.4 (instead of --budgets: "
                  "the same share of the context at every length)")
      ->delimiter(',');
  add_sweep_axis_options(*cmd, args->axes);
  cmd->add_option("--json", args->json_path, "write one JSON object per cell, a line each, as each cell ends");
  cmd->add_flag("--resume", args->resume, "skip the cells already in the --json file (same run) and append the rest");
  cmd->add_option("--csv", args->csv_path, "write one row per cell to this CSV file at the end");
  args->cache.command_defaults["score"] = "attention";  // the engine feeds real attention back
  add_cache_options(*cmd, args->cache, {"budget"});
  add_cache_file_options(*cmd, args->files, /*save_after=*/false);
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kNeedleCommand{"needle", 90, add_needle_command};

}  // namespace
}  // namespace squeezekv::cli
