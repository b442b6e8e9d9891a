// patterns.hpp — node patterns CpuOneDnn runs as one primitive: decomposed
// LayerNorm, erf-GELU, SiLU (x * sigmoid(x)) and HardSwish
// (x * relu6(x + 3) / 6), as exporters write them.
#pragma once

#include "onednn/view_info.hpp"

#include <string>
#include <vector>

namespace backplane::onednn {

struct Pattern {
  std::string op;          // "LayerNorm", "GeluErf", "Swish" or "HardSwish"
  std::vector<int> nodes;  // view nodes it replaces
  int x = -1, gamma = -1, beta = -1, out = -1;
  float eps = 0;
  float alpha = 1;  // Swish: y = x * sigmoid(alpha * x)
};

// Every pattern of `g`, in node order; no node is in two of them.
std::vector<Pattern> find_patterns(ViewInfo& g);

}  // namespace backplane::onednn
