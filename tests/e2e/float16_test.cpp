// A float16 model (weights and values between nodes in float16, as a
// converter to float16 writes it) runs in float32 with the model's own
// interface (ir/float16.hpp): its results are the float32 model's of the same
// weights, on CpuRef and (when built) the default backends.
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <cstring>

namespace backplane::e2e {
namespace {

using test::Dims;
using test::ModelBuilder;
using test::TempDir;

// The float16 bits of `v`, a multiple of 1/64 of magnitude below 16 (every
// one is a float16 exactly).
uint16_t half_bits(float v) {
  if (v == 0.f) return 0;
  uint32_t f;
  std::memcpy(&f, &v, sizeof f);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const int exponent = static_cast<int>((f >> 23) & 0xffu) - 127 + 15;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) |
                               ((f >> 13) & 0x3ffu));
}

// The float16 of bits `h` (normal numbers and zeros, as the outputs here are).
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const double v =
      exponent == 0 ? std::ldexp(h & 0x3ff, -24) : std::ldexp((h & 0x3ff) + 1024, exponent - 25);
  return (h & 0x8000) ? -v : v;
}

// Values k/64 for k drawn from [-64, 64): a seeded, exact set.
std::vector<float> sixty_fourths(size_t n, uint32_t seed) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out[i] = static_cast<float>(static_cast<int>((seed >> 8) % 128) - 64) / 64.f;
  }
  return out;
}

void init(ModelBuilder& b, const std::string& name, const Dims& dims,
          const std::vector<float>& values, bool half) {
  if (!half) {
    b.init_f32(name, dims, values);
    return;
  }
  auto* t = b.graph().add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT16);
  for (int64_t d : dims) t->add_dims(d);
  std::string raw;
  for (float v : values) {
    const uint16_t h = half_bits(v);
    raw.append(reinterpret_cast<const char*>(&h), sizeof h);
  }
  t->set_raw_data(raw);
}

// x[1,3,6,6] -> Conv(4, 3x3, pad 1) + bias -> Relu -> Mul by a Constant 0.5
// -> y, and z = Cast(y, float32); in float16 (`half`: x, y and the weights
// float16, z float32) or all in float32.
std::string write_model(const TempDir& dir, bool half) {
  const int t = half ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
  ModelBuilder b(13);
  b.input("x", {1, 3, 6, 6}, t);
  init(b, "w", {4, 3, 3, 3}, sixty_fourths(108, 7), half);
  init(b, "bias", {4}, sixty_fourths(4, 11), half);
  auto& conv = b.node("Conv", {"x", "w", "bias"}, {"c"});
  test::set_ints(conv, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  auto& k = b.node("Constant", {}, {"half"});
  onnx::TensorProto* value = test::attr(k, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  value->set_data_type(t);
  const uint16_t h = half_bits(0.5f);
  const float f = 0.5f;
  value->set_raw_data(half ? std::string(reinterpret_cast<const char*>(&h), 2)
                           : std::string(reinterpret_cast<const char*>(&f), 4));
  b.node("Mul", {"r", "half"}, {"y"});
  auto& cast = b.node("Cast", {"y"}, {"z"});
  test::set_int(cast, "to", onnx::TensorProto::FLOAT);
  b.output("y", std::nullopt, t).output("z");
  return b.save(dir, half ? "half.onnx" : "float.onnx");
}

std::vector<Tensor> run(Runtime& rt, const std::string& path, const ModelOptions& options,
                        const Tensor& x) {
  auto model = rt.load_model(path, options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  if (!session.ok()) return {};
  EXPECT_TRUE((*session)->set_input("x", x).ok());
  Status st = (*session)->run();
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok()) return {};
  // Copies: the session owns its outputs' bytes.
  std::vector<Tensor> out;
  for (size_t i = 0; i < 2; ++i) {
    const Tensor& t = (*session)->output(i);
    out.push_back(Tensor::copy_of(t.dtype(), t.shape(), t.data()));
  }
  return out;
}

TEST(Float16, AModelInFloat16ComputesInFloat32BehindItsOwnInterface) {
  TempDir dir;
  const std::string half = write_model(dir, true), single = write_model(dir, false);
  const std::vector<float> xs = sixty_fourths(108, 3);
  Tensor x16(DType::kFloat16, {1, 3, 6, 6}), x32(DType::kFloat32, {1, 3, 6, 6});
  for (size_t i = 0; i < xs.size(); ++i) {
    x16.data_as<uint16_t>()[i] = half_bits(xs[i]);
    x32.data_as<float>()[i] = xs[i];
  }
  for (const BackendChoice& b : cpuref_and_default()) {
    SCOPED_TRACE(b.name);
    auto rt = b.runtime();
    ASSERT_NE(rt, nullptr);
    const std::vector<Tensor> got = run(*rt, half, b.options, x16);
    const std::vector<Tensor> want = run(*rt, single, b.options, x32);
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(want.size(), 2u);
    // The model's interface: y float16, z float32.
    EXPECT_EQ(got[0].dtype(), DType::kFloat16);
    EXPECT_EQ(got[1].dtype(), DType::kFloat32);
    // z is the float32 model's result: computed in float32 throughout.
    expect_matches(got[1], want[1], "z");
    // y is that rounded to float16 once, at the output: within half a
    // float16 step (2^-11 of its magnitude) of it.
    ASSERT_EQ(got[0].numel(), want[0].numel());
    double worst = 0;
    for (int64_t i = 0; i < got[0].numel(); ++i) {
      const float ref = want[0].data_as<float>()[i];
      const double err = std::fabs(half_value(got[0].data_as<uint16_t>()[i]) - ref);
      worst = std::max(worst, err / std::max(std::fabs(static_cast<double>(ref)), 1e-3));
    }
    EXPECT_LE(worst, std::ldexp(1.0, -11));
    EXPECT_GT(max_abs(want[0]), 0.5);  // the model computes something
  }
}

#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
// A converter's casts around an operator it kept in float32 become casts
// from float32 to float32: CpuOneDnn runs them as the identity, so nothing
// falls to CpuRef between the operators around them.
TEST(Float16, CastsFromFloat32ToFloat32RunOnCpuOneDnn) {
  TempDir dir;
  ModelBuilder b(13);
  b.input("x", {1, 3, 6, 6});
  b.random_weight("w", {4, 3, 3, 3});
  b.node("Conv", {"x", "w"}, {"c"});
  auto& to_float = b.node("Cast", {"c"}, {"c32"});
  test::set_int(to_float, "to", onnx::TensorProto::FLOAT);
  b.value_info("c32", {1, "C", "H", "W"});
  b.node("Relu", {"c32"}, {"y"});
  b.output("y");
  auto rt = onednn_runtime(1);
  ASSERT_NE(rt, nullptr);
  auto model = rt->load_model(b.save(dir), ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  Tensor x(DType::kFloat32, {1, 3, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i % 7) - 3.f;
  ASSERT_TRUE((*session)->set_input("x", x).ok());
  Status st = (*session)->run();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuOneDnn"});
}
#endif

}  // namespace
}  // namespace backplane::e2e
