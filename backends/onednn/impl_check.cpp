// impl_check.cpp — reference-implementation check and plan report.
#include "onednn/impl_check.hpp"

#include "onednn/plan_builder.hpp"

#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <numeric>

namespace backplane::onednn {

bool is_reference_impl(const std::string& impl) {
  // "ref:any", "ref_fused:any", "gemm:ref" (and "ref_int8", ...): the names
  // oneDNN 2.x gives the kernels it runs when nothing else applies.
  return impl.rfind("ref", 0) == 0 || impl.find(":ref") != std::string::npos;
}

std::string layout_name(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind == dnnl_format_kind_any) return "any";
  if (d.format_kind != dnnl_blocked || d.ndims == 0) return "undef";
  const auto& blk = d.format_desc.blocking;
  std::vector<int> order(static_cast<size_t>(d.ndims));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return blk.strides[a] > blk.strides[b]; });
  std::vector<bool> blocked(static_cast<size_t>(d.ndims), false);
  for (int i = 0; i < blk.inner_nblks; ++i) blocked[blk.inner_idxs[i]] = true;
  std::string s;
  for (int i : order) s.push_back(static_cast<char>((blocked[i] ? 'A' : 'a') + i));
  for (int i = 0; i < blk.inner_nblks; ++i)
    s += std::to_string(blk.inner_blks[i]) + static_cast<char>('a' + blk.inner_idxs[i]);
  return s;
}

std::string layouts_of(const dnnl::primitive_desc_base& pd) {
  std::string s;
  auto add = [&](const char* name, dnnl::query q, int index) {
    const dnnl::memory::desc md = pd.query_md(q, index);
    if (md.data.ndims == 0) return;
    if (!s.empty()) s.push_back(' ');
    s += name + std::string(":") + layout_name(md);
  };
  for (int i = 0; i < 3; ++i)
    add(i == 0 ? "src" : i == 1 ? "src1" : "src2", dnnl::query::src_md, i);
  add("wei", dnnl::query::weights_md, 0);
  add("dst", dnnl::query::dst_md, 0);
  return s;
}

void reject_reference(const dnnl::primitive_desc_base& pd) {
  const std::string impl = pd.impl_info_str();
  if (!is_reference_impl(impl)) return;
  // oneDNN's recurrent primitive is named "ref:any" wherever it has no
  // brgemm kernels (every CPU without AVX-512): it is still its GEMM-based
  // implementation with JIT cell kernels, not an element-by-element one.
  if (pd.get_kind() == dnnl::primitive::kind::rnn) return;
  throw ReferenceImpl(std::string("oneDNN has only its reference implementation '") + impl +
                      "' of " +
                      dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(pd.get_kind())) +
                      " for these shapes and layouts (" + layouts_of(pd) + ")");
}

dnnl::algorithm binary_algorithm(const std::string& op) {
  using dnnl::algorithm;
  return op == "Add"   ? algorithm::binary_add
         : op == "Sub" ? algorithm::binary_sub
         : op == "Mul" ? algorithm::binary_mul
         : op == "Div" ? algorithm::binary_div
         : op == "Max" ? algorithm::binary_max
                       : algorithm::binary_min;
}

std::vector<std::pair<Dims, Dims>> binary_shapes(const Dims& full, const Dims& bcast) {
  Dims f, b;
  int last = -1;  // 0: the run broadcasts, 1: it does not
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i] == 1) continue;
    const int kind = bcast[i] == full[i] ? 1 : 0;
    if (kind == last) {
      f.back() *= full[i];
      b.back() *= bcast[i];
    } else {
      f.push_back(full[i]);
      b.push_back(bcast[i]);
      last = kind;
    }
  }
  if (f.empty() || f.size() == full.size() || f.size() > 5) return {};
  std::vector<std::pair<Dims, Dims>> out = {{f, b}};
  f.insert(f.begin(), 1);
  b.insert(b.begin(), 1);
  if (f.size() != full.size()) out.push_back({f, b});
  return out;
}

dnnl::memory::desc channels_last_md(const Dims& shape, dnnl::memory::data_type dt) {
  using tag = dnnl::memory::format_tag;
  const tag t = shape.size() == 3 ? tag::nwc : shape.size() == 4 ? tag::nhwc : tag::ndhwc;
  return dnnl::memory::desc(to_dims(shape), dt, t);
}

std::string binary_kernel_problem(const std::string& op, const Dims& full, const Dims& bcast) {
  std::vector<std::pair<Dims, Dims>> shapes = {{full, bcast}};
  for (auto& s : binary_shapes(full, bcast)) shapes.push_back(s);
  std::string impl;
  for (const auto& [f, b] : shapes) {
    if (f.empty() || f.size() > 12) continue;
    try {
      dnnl::binary::desc d(binary_algorithm(op), plain_md(f), plain_md(b), plain_md(f));
      dnnl::binary::primitive_desc pd(d, engine());
      impl = pd.impl_info_str();
      if (!is_reference_impl(impl)) return "";
    } catch (const dnnl::error&) {
    }
  }
  return "oneDNN has no optimised kernel for " + op + " of " + sdk::shape_str(full) + " by " +
         sdk::shape_str(bcast) +
         (impl.empty() ? std::string() : " (only its reference one, '" + impl + "')");
}

void report_plan(const Compiled& c) {
  if (c.tuning.plan_report.empty()) return;
  // One writer at a time: the sessions of a process may share the file.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::ofstream out(c.tuning.plan_report, std::ios::app);
  for (const Step& s : c.steps) {
    const bool copy = s.as<steps::CopyConcat>() || s.as<steps::ConcatNorm>();
    out << c.name << '\t'
        << (s.as<steps::ConcatNorm>() ? "concat_norm"
            : copy                    ? "copy_concat"
                                      : s.kind)
        << '\t' << (copy ? "backplane" : s.impl) << '\t' << s.layouts << '\t' << s.what << '\n';
  }
}

}  // namespace backplane::onednn
