// The real model beside the repository, loaded once per test program; a missing file fails the
// test that asks for it, never skips it.
#pragma once

#include "squeezekv/engine/model.h"
#include "test_util.h"

namespace squeezekv::test {

inline const Model& stories() {
  static const Model model = Model::load(kStoriesModel);
  return model;
}

}  // namespace squeezekv::test
