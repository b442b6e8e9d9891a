// The header-only backend SDK on its own: element and dtype helpers, arena
// planning, the default configure, and the table a BackendIdentity makes.
// The host table here is a minimal fake (statuses only), so these tests need
// nothing from the runtime.
#include <backplane/backend_sdk.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>

namespace backplane {
namespace {

// ---- a host table with statuses only ---------------------------------------

struct FakeStatus {
  bp_status_code_t code;
  std::string message;
};

bp_status_t* fake_status_create(bp_status_code_t code, const char* message) {
  return reinterpret_cast<bp_status_t*>(new FakeStatus{code, message});
}
bp_status_code_t fake_status_code(const bp_status_t* s) {
  return reinterpret_cast<const FakeStatus*>(s)->code;
}
const char* fake_status_message(const bp_status_t* s) {
  return reinterpret_cast<const FakeStatus*>(s)->message.c_str();
}
void fake_status_release(bp_status_t* s) { delete reinterpret_cast<FakeStatus*>(s); }

const bp_host_api_t* fake_host() {
  static const bp_host_api_t host = [] {
    bp_host_api_t h{};
    h.struct_size = sizeof(h);
    h.api_major = BP_API_VERSION_MAJOR;
    h.api_minor = BP_API_VERSION_MINOR;
    h.status_create = &fake_status_create;
    h.status_code = &fake_status_code;
    h.status_message = &fake_status_message;
    h.status_release = &fake_status_release;
    return h;
  }();
  return &host;
}

// The code of a status a slot returned (BP_STATUS_OK for NULL); releases it.
bp_status_code_t code_of(bp_status_t* s) {
  if (s == nullptr) return BP_STATUS_OK;
  const bp_status_code_t code = fake_status_code(s);
  fake_status_release(s);
  return code;
}

// ---- backends under test -----------------------------------------------------

class Plain : public sdk::Backend {
 public:
  using sdk::Backend::Backend;
  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.description = "plain";
    return i;
  }
  void query_support(const bp_graph_view_t&, sdk::NodeReport&) override {}
  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t&,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    throw sdk::unsupported("nothing");
  }
};

uint32_t score_seven() { return 7; }
uint32_t score_throws() { throw std::runtime_error("no CPUID here"); }

class Declared : public Plain {
 public:
  using Plain::Plain;
  static constexpr sdk::BackendIdentity kIdentity{"Declared", "TestVendor", &score_seven};
};

class OldMinor : public Plain {
 public:
  using Plain::Plain;
  static constexpr sdk::BackendIdentity kIdentity{"OldMinor", "TestVendor", nullptr,
                                                  BP_API_VERSION_MAJOR, 0};
};

class OwnVendor : public Plain {
 public:
  using Plain::Plain;
  static constexpr sdk::BackendIdentity kIdentity{"OwnVendor", "FromIdentity"};
  bp_backend_info_t info() override {
    bp_backend_info_t i = Plain::info();
    i.vendor = "FromInfo";
    return i;
  }
};

// A backend with a key of its own, passing the rest to the default.
class WithKey : public Plain {
 public:
  using Plain::Plain;
  void configure(std::string_view key, std::string_view value) override {
    if (key == "mode") {
      mode = std::string(value);
      return;
    }
    sdk::Backend::configure(key, value);
  }
  std::string mode;
};

// An instance made through the table's create slot, destroyed with it.
struct Instance {
  const bp_backend_api_t* api;
  bp_backend_t* backend = nullptr;
  explicit Instance(const bp_backend_api_t* table) : api(table) {
    EXPECT_EQ(
        code_of(api->create(fake_host(), BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR, &backend)),
        BP_STATUS_OK);
  }
  ~Instance() { api->destroy(backend); }
  bp_status_code_t configure(const char* key, const char* value) {
    return code_of(api->configure(backend, 1, &key, &value));
  }
  template <class B>
  B& as() {
    return *reinterpret_cast<B*>(backend);
  }
};

// ---- element types and sizes ---------------------------------------------------

TEST(BackendSdk, DtypeSizeAndName) {
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_FLOAT32), 4u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_UINT8), 1u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_INT8), 1u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_INT32), 4u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_INT64), 8u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_BOOL), 1u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_FLOAT16), 2u);
  EXPECT_EQ(sdk::dtype_size(BP_DTYPE_UNDEFINED), 0u);
  EXPECT_EQ(sdk::dtype_size(static_cast<bp_dtype_t>(42)), 0u);
  EXPECT_STREQ(sdk::dtype_name(BP_DTYPE_INT64), "int64");
  EXPECT_STREQ(sdk::dtype_name(BP_DTYPE_FLOAT16), "float16");
  EXPECT_STREQ(sdk::dtype_name(static_cast<bp_dtype_t>(42)), "unknown");
  static_assert(sdk::dtype_size(BP_DTYPE_INT32) == 4, "usable in constant expressions");
}

TEST(BackendSdk, ElementCountAndByteSize) {
  const int64_t shape[] = {2, 3, 4};
  bp_value_t v{};
  v.dtype = BP_DTYPE_INT64;
  v.rank = 3;
  v.shape = shape;
  EXPECT_EQ(sdk::element_count(v), 24);
  EXPECT_EQ(sdk::byte_size(v), 24u * 8u);
  bp_tensor_t t{};
  t.rank = 2;
  t.shape = shape;
  EXPECT_EQ(sdk::element_count(t), 6);
  EXPECT_EQ(sdk::element_count(std::vector<int64_t>{}), 1);  // a scalar
  EXPECT_EQ(sdk::element_count(std::vector<int64_t>{5, 0, 7}), 0);
  v.rank = 0;
  EXPECT_EQ(sdk::byte_size(v), 8u);
}

// ---- arena planning ------------------------------------------------------------

TEST(BackendSdk, ArenaReusesFreedBytesAndMergesNeighbours) {
  // a: steps 0-1, b: 0-1, c: 1-2 (64 bytes each); d (128 bytes) starts at
  // step 2, when a and b, side by side, are free again.
  const std::vector<sdk::ArenaTensor> tensors = {{0, 1, 64}, {0, 1, 60}, {1, 2, 64}, {2, 3, 100}};
  const sdk::ArenaPlan plan = sdk::plan_arena(tensors, 64);
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[1], 64u);
  EXPECT_EQ(plan.offsets[2], 128u);
  EXPECT_EQ(plan.offsets[3], 0u);  // a and b merged
  EXPECT_EQ(plan.bytes, 192u);
}

TEST(BackendSdk, ArenaEmptyTensorsTakeOneUnit) {
  const sdk::ArenaPlan plan = sdk::plan_arena({{0, 0, 0}, {0, 0, 0}}, 16);
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[1], 16u);
  EXPECT_EQ(plan.bytes, 32u);
  EXPECT_EQ(sdk::plan_arena({}, 64).bytes, 0u);
}

// Random lifetimes: tensors alive at the same step never share a byte, every
// offset is aligned and inside the arena, and reuse keeps the arena below
// the sum of all sizes.
TEST(BackendSdk, ArenaNeverOverlapsLiveTensors) {
  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    std::vector<sdk::ArenaTensor> tensors(40);
    size_t total = 0;
    for (auto& t : tensors) {
      t.first = rng() % 30;
      t.last = t.first + rng() % 5;
      t.size = 1 + rng() % 500;
      total += (t.size + 63) / 64 * 64;
    }
    const sdk::ArenaPlan plan = sdk::plan_arena(tensors, 64);
    ASSERT_LE(plan.bytes, total);
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(plan.offsets[i] % 64, 0u);
      EXPECT_LE(plan.offsets[i] + tensors[i].size, plan.bytes);
      for (size_t j = i + 1; j < tensors.size(); ++j) {
        const bool same_time =
            tensors[i].first <= tensors[j].last && tensors[j].first <= tensors[i].last;
        const bool same_bytes = plan.offsets[i] < plan.offsets[j] + tensors[j].size &&
                                plan.offsets[j] < plan.offsets[i] + tensors[i].size;
        EXPECT_FALSE(same_time && same_bytes)
            << "round " << round << ": tensors " << i << " and " << j;
      }
    }
  }
}

// ---- the default configure -----------------------------------------------------

TEST(BackendSdk, DefaultConfigureAcceptsNumThreads) {
  Instance b(sdk::backend_table<Plain>());
  EXPECT_EQ(b.as<Plain>().num_threads(), 0u);
  EXPECT_EQ(b.configure("num_threads", "4"), BP_STATUS_OK);
  EXPECT_EQ(b.as<Plain>().num_threads(), 4u);
  bp_compile_options_t options{};
  options.num_threads = 2;
  EXPECT_EQ(b.as<Plain>().num_threads(options), 4u);  // the configured count wins
  EXPECT_EQ(b.configure("num_threads", "0"), BP_STATUS_OK);
  EXPECT_EQ(b.as<Plain>().num_threads(options), 2u);
}

TEST(BackendSdk, DefaultConfigureRejectsBadValuesAndUnknownKeys) {
  Instance b(sdk::backend_table<Plain>());
  for (const char* bad : {"-1", "abc", "", "4x", "99999999999"})
    EXPECT_EQ(b.configure("num_threads", bad), BP_STATUS_INVALID_ARGUMENT) << "'" << bad << "'";
  EXPECT_EQ(b.as<Plain>().num_threads(), 0u);
  EXPECT_EQ(b.configure("num_thread", "4"), BP_STATUS_INVALID_ARGUMENT);
}

TEST(BackendSdk, ConfigValuesAreParsedOrRefusedNamingTheKey) {
  EXPECT_EQ(sdk::config_uint("n", "7", 1, 10), 7u);
  EXPECT_TRUE(sdk::config_on_off("w", "on"));
  EXPECT_FALSE(sdk::config_on_off("w", "0"));
  EXPECT_EQ(sdk::config_choice("layout", "blocked", {"auto", "onednn", "blocked"}), 2u);
  auto message = [](auto&& parse) -> std::string {
    try {
      parse();
    } catch (const sdk::Error& e) {
      return e.code() == BP_STATUS_INVALID_ARGUMENT ? e.what() : "another code";
    }
    return "accepted";
  };
  EXPECT_EQ(message([] { sdk::config_uint("n", "11", 1, 10); }),
            "n: '11' is not a whole number from 1 to 10");
  for (const char* bad : {"0", "-1", "", "3x", " 3"})
    EXPECT_NE(message([&] { sdk::config_uint("n", bad, 1, 10); }), "accepted") << bad;
  EXPECT_EQ(message([] { sdk::config_on_off("w", "yes"); }), "w: 'yes' is not on or off");
  EXPECT_EQ(message([] { sdk::config_choice("layout", "nhwc", {"auto", "onednn", "blocked"}); }),
            "layout: 'nhwc' is not auto, onednn or blocked");
}

TEST(BackendSdk, OwnKeysPassTheRestToTheDefault) {
  Instance b(sdk::backend_table<WithKey>());
  EXPECT_EQ(b.configure("mode", "fast"), BP_STATUS_OK);
  EXPECT_EQ(b.as<WithKey>().mode, "fast");
  EXPECT_EQ(b.configure("num_threads", "3"), BP_STATUS_OK);
  EXPECT_EQ(b.as<WithKey>().num_threads(), 3u);
  EXPECT_EQ(b.configure("speed", "1"), BP_STATUS_INVALID_ARGUMENT);
}

// ---- identity --------------------------------------------------------------------

TEST(BackendSdk, TableWithoutIdentityIsOfThisHeader) {
  const bp_backend_api_t* t = sdk::backend_table<Plain>();
  EXPECT_EQ(t->struct_size, BP_BACKEND_API_SIZE_1_4);
  EXPECT_EQ(t->api_major, BP_API_VERSION_MAJOR);
  EXPECT_EQ(t->api_minor, BP_API_VERSION_MINOR);
  EXPECT_TRUE(BP_TABLE_HAS(t, compile_all));
  EXPECT_TRUE(BP_TABLE_HAS(t, execute_shaped));
  EXPECT_TRUE(BP_TABLE_HAS(t, get_op_schemas));
  Instance b(t);
  bp_backend_info_t info{};
  EXPECT_EQ(code_of(t->get_info(b.backend, &info)), BP_STATUS_OK);
  EXPECT_EQ(info.vendor, nullptr);
}

TEST(BackendSdk, IdentityGivesVendorAndScore) {
  const bp_backend_api_t* t = sdk::backend_table<Declared>();
  Instance b(t);
  bp_backend_info_t info{};
  EXPECT_EQ(code_of(t->get_info(b.backend, &info)), BP_STATUS_OK);
  EXPECT_STREQ(info.vendor, "TestVendor");
  EXPECT_STREQ(info.description, "plain");
  EXPECT_EQ(sdk::detail::score_of(Declared::kIdentity), 7u);
  constexpr sdk::BackendIdentity no_score{"N", "V"};
  EXPECT_EQ(sdk::detail::score_of(no_score), 1u) << "no score function counts as 1";
  constexpr sdk::BackendIdentity throwing{"T", "V", &score_throws};
  EXPECT_EQ(sdk::detail::score_of(throwing), 0u);

  const bp_backend_api_t* own = sdk::backend_table<OwnVendor>();
  Instance o(own);
  EXPECT_EQ(code_of(own->get_info(o.backend, &info)), BP_STATUS_OK);
  EXPECT_STREQ(info.vendor, "FromInfo") << "info() wins over the identity";
}

TEST(BackendSdk, IdentityOfAnOlderMinorLeavesLaterSlotsOut) {
  const bp_backend_api_t* t = sdk::backend_table<OldMinor>();
  EXPECT_EQ(t->api_minor, 0u);
  EXPECT_EQ(t->struct_size, BP_BACKEND_API_SIZE_1_0);
  EXPECT_FALSE(BP_TABLE_HAS(t, compile_all));
  EXPECT_NE(t->execute_node, nullptr);  // a 1.0 slot
}

TEST(BackendSdk, PayloadReadsBackWhatWasWritten) {
  sdk::PayloadWriter w;
  w.pod(uint32_t{7});
  w.str("conv1");
  w.pod(2.5f);
  sdk::PayloadReader r(w.bytes().data(), w.bytes().size(), "P");
  EXPECT_EQ(r.pod<uint32_t>("count"), 7u);
  EXPECT_EQ(r.str("name"), "conv1");
  EXPECT_FALSE(r.done());
  EXPECT_EQ(r.pod<float>("scale"), 2.5f);
  EXPECT_TRUE(r.done());
}

TEST(BackendSdk, PayloadReaderRefusesWhatRunsPastTheEnd) {
  sdk::PayloadWriter w;
  w.str("conv1");
  const std::string& b = w.bytes();
  auto code_and_message = [](auto&& read) {
    try {
      read();
    } catch (const sdk::Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(BP_STATUS_OK, std::string());
  };
  // A string cut short.
  sdk::PayloadReader cut(b.data(), b.size() - 1, "partition 'p'");
  auto [code, message] = code_and_message([&] { cut.str("step name"); });
  EXPECT_EQ(code, BP_STATUS_CORRUPT_DATA);
  EXPECT_EQ(message, "partition 'p': payload ends inside step name (at byte 4)");
  // A count of more items than the bytes left could hold.
  sdk::PayloadWriter many;
  many.pod(uint32_t{1000});
  many.pod(uint64_t{0});
  sdk::PayloadReader r(many.bytes().data(), many.bytes().size(), "P");
  EXPECT_EQ(code_and_message([&] { r.count("steps", 8); }).first, BP_STATUS_CORRUPT_DATA);
  sdk::PayloadReader empty(nullptr, 0, "P");
  EXPECT_EQ(code_and_message([&] { empty.pod<uint8_t>("kind"); }).first, BP_STATUS_CORRUPT_DATA);
}

TEST(BackendSdk, FoldedBatchNormIsTheNormOfTheConvolution) {
  // Two output channels of a 1x1 convolution over three inputs.
  std::vector<float> w = {1, 2, 3, -1, 0.5f, 2}, b = {0.5f, -1};
  const float scale[] = {2, 0.5f}, shift[] = {1, -3}, mean[] = {0.25f, 4}, var[] = {3, 0.75f};
  const float eps = 1e-3f, x[] = {0.3f, -1.2f, 2};
  std::vector<float> fw = w, fb = b;
  sdk::fold_batch_norm(fw, fb, scale, shift, mean, var, eps);
  for (int c = 0; c < 2; ++c) {
    double conv = b[c], folded = fb[c];
    for (int i = 0; i < 3; ++i) {
      conv += double(w[c * 3 + i]) * x[i];
      folded += double(fw[c * 3 + i]) * x[i];
    }
    const double bn = (conv - mean[c]) / std::sqrt(double(var[c]) + eps) * scale[c] + shift[c];
    EXPECT_NEAR(folded, bn, 1e-5) << "channel " << c;
  }
  EXPECT_EQ(sdk::shape_str({1, 3, 32}), "[1,3,32]");
  EXPECT_EQ(sdk::shape_str({}), "[]");
}

TEST(BackendSdk, ShapedViewGivesItsOwnShapesAndKeepsTheRest) {
  int64_t open_dims[2] = {-1, 4};
  bp_value_t values[2] = {};
  values[0].name = "x";
  values[0].rank = 2;
  values[0].shape = open_dims;
  values[1].name = "y";
  bp_graph_view_t view{};
  view.values = values;
  view.num_values = 2;
  sdk::ShapedView shaped(view, {{3, 4}, {}});
  const bp_graph_view_t& v = shaped.view();
  ASSERT_EQ(v.num_values, 2u);
  EXPECT_STREQ(v.values[0].name, "x");
  ASSERT_EQ(v.values[0].rank, 2u);
  EXPECT_EQ(v.values[0].shape[0], 3);
  EXPECT_EQ(open_dims[0], -1) << "the host's view is left as it was";
  EXPECT_EQ(v.values[1].rank, 0u);
  EXPECT_THROW(sdk::ShapedView(view, {{3, 4}}), sdk::Error);
}

}  // namespace
}  // namespace backplane
