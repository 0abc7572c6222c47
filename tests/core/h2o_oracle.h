// A plain, obviously-correct H2O (key-proxy) for one head, used as the test oracle: rows kept in
// position order, a softmax in double for every incoming key, eviction by a full scan.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv::test {

struct OracleRow {
  int64_t pos;
  std::vector<float> key;  // as stored (fp16-rounded when the cache stores f16)
  double score;
};

class H2OOracle {
 public:
  H2OOracle(int budget, int n_sink, double recent, KVType type)
      : budget_(budget), n_sink_(n_sink), recent_(recent), type_(type) {}

  void update(const float* keys, int n, int dim) {
    for (int t = 0; t < n; ++t) {
      const float* k = keys + size_t(t) * size_t(dim);
      if (rows_.empty()) {
        rows_.push_back({seen_, stored(k, dim), 1.0});
      } else {
        std::vector<double> logits;
        double mx = -1e300;
        for (const OracleRow& r : rows_) {
          double dot = 0;
          for (int d = 0; d < dim; ++d) dot += double(k[d]) * r.key[size_t(d)];
          logits.push_back(dot / std::sqrt(double(dim)));
          mx = std::max(mx, logits.back());
        }
        double sum = 0;
        for (double& l : logits) sum += (l = std::exp(l - mx));
        for (size_t i = 0; i < rows_.size(); ++i) rows_[i].score += logits[i] / sum;
        rows_.push_back({seen_, stored(k, dim), 0.0});
      }
      ++seen_;
    }
    const auto recent_rows = int64_t(recent_ * std::max(0, budget_ - n_sink_));
    while (int(rows_.size()) > budget_) {
      int victim = -1;
      for (int i = 0; i < int(rows_.size()); ++i) {
        const int64_t p = rows_[size_t(i)].pos;
        if (p < n_sink_ || p >= seen_ - recent_rows) continue;
        if (victim < 0 || rows_[size_t(i)].score < rows_[size_t(victim)].score) victim = i;
      }
      rows_.erase(rows_.begin() + victim);
    }
  }

  std::vector<int64_t> positions() const {
    std::vector<int64_t> out;
    for (const OracleRow& r : rows_) out.push_back(r.pos);
    return out;
  }
  const std::vector<OracleRow>& rows() const { return rows_; }

 private:
  std::vector<float> stored(const float* k, int dim) const {
    std::vector<float> out(k, k + dim);
    if (type_ == KVType::f16) {
      for (float& x : out) x = fp16_to_f32(f32_to_fp16(x));
    }
    return out;
  }

  int budget_, n_sink_;
  double recent_;
  KVType type_;
  int64_t seen_ = 0;
  std::vector<OracleRow> rows_;
};

}  // namespace squeezekv::test
