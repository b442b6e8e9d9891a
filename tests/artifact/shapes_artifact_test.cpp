// Artifacts with several specialisations (issue 13, item 6): one model with
// symbolic dims compiled at several signatures into one .bpk, each loaded
// back bit for bit what the ONNX model computes just in time at that
// signature; the weights stored once; a signature the artifact does not
// store compiled from its portable graph, with a note; the format 1.0 file
// checked in before format 1.1 (and what a 1.0 reader sees of a 1.1 file);
// damaged specialisation tables.
#include "artifact/artifact.hpp"
#include "artifact_generated.h"
#include "artifact_util.hpp"
#include "shape_models.hpp"

#include <gtest/gtest.h>

namespace backplane::artifact_test {
namespace {

const std::vector<Shape> kStored = {{1, 4, 16}, {1, 9, 16}, {2, 5, 16}};
const Shape kNotStored = {3, 3, 16};

// Deterministic inputs of `shape`, different for every shape.
Tensor input_of(const Shape& shape) {
  Tensor t(DType::kFloat32, shape);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>((i * 7919 + shape[1] * 31 + shape[0]) % 1000) / 250.0f - 2.0f;
  return t;
}

// CpuRef at `signatures`; `polymorphic`: CompileOptions::shape_polymorphic
// (CpuRef compiles shape-polymorphic).
CompileOptions at(const std::vector<Shape>& signatures, bool polymorphic = true) {
  CompileOptions co = cpuref_compile();
  for (const Shape& s : signatures) co.shapes.push_back({{"x", s}});
  co.shape_polymorphic = polymorphic;
  return co;
}

// One session of `model` run at `shape`: its outputs.
std::vector<Tensor> run_at(Session& session, const Shape& shape) {
  std::vector<Tensor> out;
  Status s = session.set_input("x", input_of(shape));
  if (s.ok()) s = session.run();
  EXPECT_TRUE(s.ok()) << shape_to_string(shape) << ": " << s.to_string();
  if (s.ok())
    for (size_t i = 0; i < session.num_outputs(); ++i) out.push_back(session.output(i).clone());
  return out;
}

bool has_note(const Model& model, const std::string& a, const std::string& b) {
  for (const std::string& n : model.notes())
    if (contains(n, a) && contains(n, b)) return true;
  return false;
}

// Address of a scalar field of a table inside `bytes` (it must be stored,
// i.e. differ from its default).
template <class T>
uint8_t* field(std::vector<uint8_t>& bytes, const T* table, flatbuffers::voffset_t vt) {
  const auto* t = reinterpret_cast<const flatbuffers::Table*>(table);
  flatbuffers::voffset_t off = t->GetOptionalFieldOffset(vt);
  EXPECT_NE(off, 0) << "field not stored";
  return bytes.data() + (reinterpret_cast<const uint8_t*>(table) - bytes.data()) + off;
}

// Where `p` (a pointer into the FlatBuffer of `bytes`) is, writable.
template <class T>
uint8_t* at_in(std::vector<uint8_t>& bytes, const T* p) {
  return bytes.data() + (reinterpret_cast<const uint8_t*>(p) - bytes.data());
}

class ShapesArtifact : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    rt_ = make_runtime();
    ASSERT_NE(rt_, nullptr);
    write_seq_model(path("seq.onnx"));
  }

  // seq.onnx compiled at kStored into seq.bpk.
  CompileReport compile_three(bool polymorphic = true) {
    auto report =
        rt_->compile({{"seq", path("seq.onnx")}}, path("seq.bpk"), at(kStored, polymorphic));
    EXPECT_TRUE(report.ok()) << report.status().to_string();
    return report.ok() ? *report : CompileReport{};
  }

  // What the ONNX model computes just in time at `shape`, on CpuRef.
  std::vector<Tensor> jit_at(const Shape& shape) {
    auto model = rt_->load_model(path("seq.onnx"), cpuref_only());
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (!model.ok()) return {};
    auto session = (*model)->create_session();
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    return session.ok() ? run_at(**session, shape) : std::vector<Tensor>{};
  }

  std::shared_ptr<Runtime> rt_;
};

// Both ways of storing a signature: shape-polymorphic partitions (compiled
// at load once for all, as for the ONNX model) and concrete ones (each
// signature's payload deserialized).
class StoredSignatures : public ShapesArtifact, public ::testing::WithParamInterface<bool> {};

TEST_P(StoredSignatures, EveryOneIsBitIdenticalToTheJitModel) {
  const bool polymorphic = GetParam();
  const CompileReport report = compile_three(polymorphic);
  EXPECT_EQ(report.specializations, 3u);
  EXPECT_EQ(report.partitions, 3u);  // CpuRef takes the whole graph at every signature
  EXPECT_EQ(report.payload_bytes > 0, !polymorphic);

  auto model = rt_->load_model(path("seq.bpk"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  // Ready at once for the first signature it stores, without a note.
  EXPECT_EQ((*model)->specialization_stats().builds, 1u);
  ASSERT_EQ((*model)->partitions().size(), 1u);
  EXPECT_EQ((*model)->partitions()[0].polymorphic, polymorphic)
      << "compiled shape-polymorphic, or its stored payload loaded";
  EXPECT_TRUE((*model)->notes().empty()) << (*model)->notes().front();
  EXPECT_EQ((*model)->inputs()[0].shape, (Shape{-1, -1, 16})) << "the portable graph's input";
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  for (const Shape& shape : kStored) {
    SCOPED_TRACE(shape_to_string(shape));
    const std::vector<Tensor> jit = jit_at(shape);
    const std::vector<Tensor> loaded = run_at(**session, shape);
    ASSERT_EQ(loaded.size(), 1u);
    EXPECT_EQ(loaded[0].shape(), (Shape{shape[0], shape[1] * 16}));
    EXPECT_TRUE(bitwise_equal(loaded, jit)) << "the artifact differs from the JIT model";
  }
  // The stored ones: no note, one build each, one polymorphic compile for all.
  EXPECT_TRUE((*model)->notes().empty()) << (*model)->notes().front();
  EXPECT_EQ((*model)->specialization_stats().builds, 3u);
  EXPECT_EQ((*model)->specialization_stats().polymorphic_partitions, polymorphic ? 1u : 0u);

  // A fourth signature is compiled from the portable graph, says so, and
  // computes what the JIT model does.
  const std::vector<Tensor> jit = jit_at(kNotStored);
  const std::vector<Tensor> fourth = run_at(**session, kNotStored);
  EXPECT_TRUE(bitwise_equal(fourth, jit));
  EXPECT_TRUE(has_note(**model, "no specialisation stored for x=[3,3,16]",
                       "compiled from the portable graph"))
      << ::testing::PrintToString((*model)->notes());
  EXPECT_EQ((*model)->notes().size(), 1u) << ::testing::PrintToString((*model)->notes());
  // Running it again neither rebuilds it nor repeats the note.
  EXPECT_TRUE(bitwise_equal(run_at(**session, kNotStored), jit));
  EXPECT_EQ((*model)->specialization_stats().builds, 4u);
  EXPECT_EQ((*model)->notes().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Stored, StoredSignatures, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "ShapePolymorphic" : "Concrete");
});

TEST_F(ShapesArtifact, InputShapesPickTheSignatureBuiltAtLoad) {
  compile_three();
  ModelOptions second;
  second.input_shapes = {{"x", kStored[1]}};
  auto model = rt_->load_model(path("seq.bpk"), second);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->notes().empty()) << (*model)->notes().front();
  ASSERT_EQ((*model)->outputs().size(), 1u);

  ModelOptions other;
  other.input_shapes = {{"x", kNotStored}};
  auto jit = rt_->load_model(path("seq.bpk"), other);
  ASSERT_TRUE(jit.ok()) << jit.status().to_string();
  EXPECT_TRUE(has_note(**jit, "no specialisation stored for x=[3,3,16]", "portable graph"))
      << ::testing::PrintToString((*jit)->notes());
  auto session = (*jit)->create_session();
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(bitwise_equal(run_at(**session, kNotStored), jit_at(kNotStored)));

  // A shape the model cannot take is an error naming the input, as for ONNX.
  ModelOptions wrong;
  wrong.input_shapes = {{"x", {1, 4, 17}}};
  auto bad = rt_->load_model(path("seq.bpk"), wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
  EXPECT_TRUE(contains(bad.status().message(), "'x'")) << bad.status().message();
  wrong.input_shapes = {{"nope", {1}}};
  EXPECT_EQ(rt_->load_model(path("seq.bpk"), wrong).status().code(), StatusCode::kNotFound);
}

TEST_F(ShapesArtifact, WeightsAreStoredOnce) {
  auto one = rt_->compile({{"seq", path("seq.onnx")}}, path("one.bpk"), at({kStored[0]}, false));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  const CompileReport three = compile_three(false);
  // The weights (~4.3 KB) once; each further signature adds only the two
  // Reshape targets it folded (16 bytes each).
  EXPECT_GT(one->stored_bytes, 4000u);
  EXPECT_LE(three.stored_bytes, one->stored_bytes + 2 * 2 * 16);
  EXPECT_LT(3 * one->stored_bytes, 3 * three.stored_bytes);  // (not 0: guards the line above)

  nlohmann::json j = inspect_json(path("seq.bpk"));
  EXPECT_EQ(j["format"], "1.2");
  EXPECT_EQ(j["named_data_bytes"]["stored"], three.stored_bytes);
  size_t w1 = 0, folded = 0;
  for (const auto& d : j["named_data"]) {
    const std::string key = d["key"];
    w1 += key == "seq/w1";
    folded += key.find('@') != std::string::npos;
    EXPECT_EQ(key.rfind("seq/", 0), 0u) << key << ": keys carry the method";
  }
  EXPECT_EQ(w1, 1u) << "one key for the weight, whatever the signatures";
  EXPECT_EQ(folded, 2u * 3u) << "two folded Reshape targets per signature";

  // inspect lists every specialisation: signature, partitions, payload bytes.
  ASSERT_EQ(j["methods"].size(), 1u);
  const auto& m = j["methods"][0];
  EXPECT_EQ(m["inputs"][0]["shape"], (Shape{-1, -1, 16}));
  EXPECT_EQ(m["inputs"][0]["declared"], "[batch,seq,16]");
  ASSERT_EQ(m["specializations"].size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const auto& s = m["specializations"][k];
    EXPECT_EQ(s["signature"][0]["name"], "x");
    EXPECT_EQ(s["signature"][0]["shape"], kStored[k]);
    ASSERT_EQ(s["partitions"].size(), 1u);
    EXPECT_EQ(s["partitions"][0]["backend"], "CpuRef");
    EXPECT_EQ(s["partitions"][0]["polymorphic"], false);
    EXPECT_GT(s["payload_bytes"].get<size_t>(), 0u);
    EXPECT_EQ(s["payload_bytes"], s["partitions"][0]["payload_bytes"]);
    EXPECT_LT(s["nodes"].get<size_t>(), m["portable_nodes"].get<size_t>())
        << "the shape arithmetic is folded per signature";
  }
  EXPECT_EQ(m["partitions"], m["specializations"][0]["partitions"]);
  auto text = inspect_artifact(path("seq.bpk"), false);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  for (const char* want :
       {"inputs x[batch,seq,16], 3 specialisations", "specialisation x=[1,4,16]: ",
        "specialisation x=[1,9,16]: ", "specialisation x=[2,5,16]: "})
    EXPECT_TRUE(contains(*text, want)) << want << " not in\n" << *text;

  // Stored shape-polymorphic: the same signatures and keys, no payloads.
  const CompileReport poly = compile_three(true);
  EXPECT_EQ(poly.stored_bytes, three.stored_bytes);
  EXPECT_EQ(poly.payload_bytes, 0u);
  nlohmann::json jp = inspect_json(path("seq.bpk"));
  for (const auto& s : jp["methods"][0]["specializations"]) {
    EXPECT_EQ(s["partitions"][0]["polymorphic"], true) << s.dump();
    EXPECT_EQ(s["payload_bytes"], 0);
  }
  text = inspect_artifact(path("seq.bpk"), false);
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(contains(*text, "payload 0 bytes, shape-polymorphic (compiled at load)")) << *text;
}

TEST_F(ShapesArtifact, SameSignatureTwiceIsCompiledOnce) {
  CompileOptions co = at({kStored[0], kStored[1], kStored[0]});
  auto report = rt_->compile({{"seq", path("seq.onnx")}}, path("dup.bpk"), co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->specializations, 2u);
  // A shape for an input no method has is a mistake, not ignored.
  co.shapes.push_back({{"y", {1}}});
  auto typo = rt_->compile({{"seq", path("seq.onnx")}}, path("typo.bpk"), co);
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(typo.status().message(), "'y'")) << typo.status().message();
  // An open input without a shape in some set is the front end's error.
  co.shapes = {{{"x", kStored[0]}}, {}};
  auto open = rt_->compile({{"seq", path("seq.onnx")}}, path("open.bpk"), co);
  ASSERT_FALSE(open.ok());
  EXPECT_TRUE(contains(open.status().message(), "symbolic")) << open.status().message();
}

// The file was written by the format 1.0 writer (before 1.1 existed) from
// write_v10_model: its one graph is specialised already, and its shape
// arithmetic folded under the 1.0 key.
TEST_F(ShapesArtifact, FormatOneZeroFileLoadsAndRuns) {
  const std::string v10 = std::string(BACKPLANE_ARTIFACT_DATA_DIR) + "/small_1_0.bpk";
  ASSERT_TRUE(fs::exists(v10)) << v10;
  EXPECT_LT(fs::file_size(v10), 64u * 1024);
  nlohmann::json j = inspect_json(v10);
  EXPECT_EQ(j["format"], "1.0");
  ASSERT_EQ(j["methods"].size(), 1u);
  const auto& m = j["methods"][0];
  ASSERT_EQ(m["specializations"].size(), 1u);
  EXPECT_EQ(m["specializations"][0]["signature"][0]["shape"], (Shape{1, 3, 8, 8}));
  EXPECT_EQ(m["specializations"][0]["nodes"], m["portable_nodes"]);
  EXPECT_GT(m["specializations"][0]["payload_bytes"].get<size_t>(), 0u);

  write_v10_model(path("v10.onnx"));
  const Tensor input = input_of({1, 3, 8, 8});
  RunResult jit = run_model(*rt_, path("v10.onnx"), cpuref_only(), input);
  ASSERT_TRUE(jit.status.ok()) << jit.status.to_string();
  for (bool lazy : {false, true}) {
    ModelOptions mo;
    mo.lazy_checksums = lazy;
    RunResult loaded = run_model(*rt_, v10, mo, input);
    ASSERT_TRUE(loaded.status.ok()) << loaded.status.to_string();
    // Its stored payload is used: the graph specialised again is the one stored.
    EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();
    EXPECT_TRUE(bitwise_equal(loaded.outputs, jit.outputs));
  }
  // Its inputs are fixed: another shape is an error, as for the ONNX model.
  ModelOptions other;
  other.input_shapes = {{"x", {2, 3, 8, 8}}};
  auto bad = rt_->load_model(v10, other);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
}

// Gives `table` (inside the FlatBuffer of `bytes`) a copy of its vtable
// without the fields `hidden`, appended to the FlatBuffer in the padding
// before the data area (vtables are shared between tables of the same
// layout: Method's with Graph's). False if there is no room.
bool hide_fields(std::vector<uint8_t>& bytes, const flatbuffers::Table* table,
                 std::initializer_list<flatbuffers::voffset_t> hidden) {
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  const uint8_t* vtable = table->GetVTable();
  const auto vt_size = flatbuffers::ReadScalar<flatbuffers::voffset_t>(vtable);
  const size_t at = (4 + size_t{fb_size} + 7) / 8 * 8;
  const uint32_t grown = static_cast<uint32_t>((at + vt_size + 7) / 8 * 8 - 4);
  if (artifact_data_start(grown) != artifact_data_start(fb_size)) return false;
  std::vector<uint8_t> copy(vtable, vtable + vt_size);
  for (flatbuffers::voffset_t vt : hidden)
    if (vt < vt_size) flatbuffers::WriteScalar<flatbuffers::voffset_t>(copy.data() + vt, 0);
  std::fill(bytes.begin() + 4 + fb_size, bytes.begin() + 4 + grown + 8, 0);
  std::memcpy(bytes.data() + at, copy.data(), copy.size());
  const size_t table_at =
      static_cast<size_t>(reinterpret_cast<const uint8_t*>(table) - bytes.data());
  flatbuffers::WriteScalar<flatbuffers::soffset_t>(
      bytes.data() + table_at,
      static_cast<flatbuffers::soffset_t>(table_at) - static_cast<flatbuffers::soffset_t>(at));
  std::memcpy(bytes.data(), &grown, 4);
  reseal(bytes);
  return true;
}

// What a format 1.0 reader sees of a 1.1 file: the fields it does not know
// (Method.portable, Method.specializations) absent. Hiding them makes this
// reader see the same, and load what a 1.0 reader loads: the first
// specialisation, as 1.0 stores a method.
TEST_F(ShapesArtifact, AFormatOneZeroReaderLoadsTheFirstSpecialisation) {
  compile_three();
  auto bytes = read_bytes(path("seq.bpk"));
  const fb::Method* m = fb::GetSizePrefixedArtifact(bytes.data())->methods()->Get(0);
  ASSERT_NE(m->portable(), nullptr);
  ASSERT_TRUE(hide_fields(bytes, reinterpret_cast<const flatbuffers::Table*>(m),
                          {fb::Method::VT_PORTABLE, fb::Method::VT_SPECIALIZATIONS}));
  m = fb::GetSizePrefixedArtifact(bytes.data())->methods()->Get(0);
  ASSERT_EQ(m->portable(), nullptr);
  ASSERT_EQ(m->specializations(), nullptr);
  ASSERT_NE(m->graph()->inputs(), nullptr) << "only the method's fields are hidden";
  write_bytes(path("old_view.bpk"), bytes.data(), bytes.size());

  nlohmann::json j = inspect_json(path("old_view.bpk"));
  ASSERT_EQ(j["methods"][0]["specializations"].size(), 1u);
  EXPECT_EQ(j["methods"][0]["inputs"][0]["shape"], kStored[0]);
  auto model = rt_->load_model(path("old_view.bpk"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->notes().empty()) << (*model)->notes().front();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(bitwise_equal(run_at(**session, kStored[0]), jit_at(kStored[0])));
  // Its input is fixed now, as the 1.0 graph declares it.
  EXPECT_FALSE((*session)->set_input("x", input_of(kStored[1])).ok());
}

// Damaged specialisation tables (checksums made right again: what a
// producer's bug would write): a clear error naming the file, or, when the
// table is consistent but its partitions do not fit the graph its
// signature gives, that signature compiled from the portable graph.
TEST_F(ShapesArtifact, DamagedSpecialisationTable) {
  compile_three();
  const auto pristine = read_bytes(path("seq.bpk"));
  auto spec = [](std::vector<uint8_t>& bytes, size_t k) {
    return fb::GetSizePrefixedArtifact(bytes.data())
        ->methods()
        ->Get(0)
        ->specializations()
        ->Get(static_cast<flatbuffers::uoffset_t>(k));
  };
  auto expect_corrupt = [&](std::vector<uint8_t>& bytes, const std::string& what,
                            const std::string& says) {
    SCOPED_TRACE(what);
    reseal(bytes);
    write_bytes(path("bad.bpk"), bytes.data(), bytes.size());
    for (bool lazy : {false, true}) {
      ModelOptions mo;
      mo.lazy_checksums = lazy;
      auto model = rt_->load_model(path("bad.bpk"), mo);
      ASSERT_FALSE(model.ok());
      EXPECT_EQ(model.status().code(), StatusCode::kCorruptData) << model.status().to_string();
      EXPECT_TRUE(contains(model.status().message(), "bad.bpk")) << model.status().message();
      EXPECT_TRUE(contains(model.status().message(), says)) << model.status().message();
    }
    auto text = inspect_artifact(path("bad.bpk"), false);
    EXPECT_EQ(text.status().code(), StatusCode::kCorruptData) << text.status().to_string();
  };

  {  // a node id past the specialised graph's nodes
    auto bytes = pristine;
    const auto* nodes = spec(bytes, 1)->partitions()->Get(0)->nodes();
    flatbuffers::WriteScalar<int32_t>(at_in(bytes, nodes->Data()), 9999);
    expect_corrupt(bytes, "node id 9999", "specialisation 1: partition node index invalid");
  }
  {  // more nodes than the portable graph has
    auto bytes = pristine;
    const fb::Specialization* s = spec(bytes, 2);
    flatbuffers::WriteScalar<uint32_t>(field(bytes, s, fb::Specialization::VT_NUM_NODES), 500);
    expect_corrupt(bytes, "num_nodes 500", "more than the portable graph");
  }
  {  // a signature the graph cannot take
    auto bytes = pristine;
    const auto* dims = spec(bytes, 2)->signature()->Get(0)->dims();
    flatbuffers::WriteScalar<int64_t>(at_in(bytes, dims->Data()) + 8, -3);
    expect_corrupt(bytes, "dim -3", "specialisation 2 gives input 'x' the shape [2,?,16]");
    bytes = pristine;
    flatbuffers::WriteScalar<int64_t>(at_in(bytes, dims->Data()) + 16, 17);
    expect_corrupt(bytes, "fixed dim 17", "[batch,seq,16]");
  }
  {  // a specialisation's signature changed to another valid one: its
     // partitions were compiled for the graph of [2,5,16], not [2,6,16]
    auto bytes = pristine;
    const auto* dims = spec(bytes, 2)->signature()->Get(0)->dims();
    flatbuffers::WriteScalar<int64_t>(at_in(bytes, dims->Data()) + 8, 6);
    reseal(bytes);
    write_bytes(path("moved.bpk"), bytes.data(), bytes.size());
    ModelOptions mo;
    mo.input_shapes = {{"x", {2, 6, 16}}};
    auto model = rt_->load_model(path("moved.bpk"), mo);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_TRUE(has_note(**model, "the specialisation stored for x=[2,6,16]",
                         "compiled from the portable graph"))
        << ::testing::PrintToString((*model)->notes());
    auto session = (*model)->create_session();
    ASSERT_TRUE(session.ok());
    EXPECT_TRUE(bitwise_equal(run_at(**session, {2, 6, 16}), jit_at({2, 6, 16})));
  }
  {  // a digest that no graph has: the same
    auto bytes = pristine;
    uint8_t* digest = field(bytes, spec(bytes, 0), fb::Specialization::VT_DIGEST);
    digest[3] ^= 0x40;
    reseal(bytes);
    write_bytes(path("digest.bpk"), bytes.data(), bytes.size());
    RunResult r = run_model(*rt_, path("digest.bpk"), {}, input_of(kStored[0]));
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    ASSERT_EQ(r.notes.size(), 1u) << ::testing::PrintToString(r.notes);
    EXPECT_TRUE(contains(r.notes[0], "stored for x=[1,4,16] was compiled for a graph other"))
        << r.notes[0];
    EXPECT_TRUE(bitwise_equal(r.outputs, jit_at(kStored[0])));
  }
}

// With lazy checksums, the constants only shape inference reads (the
// Gather indices and Concat operands the signature folds away) are read by
// no backend: their damage is still reported as such at load.
TEST_F(ShapesArtifact, LazyChecksumsCoverConstantsFoldedAway) {
  compile_three();
  const auto bytes = read_bytes(path("seq.bpk"));
  auto art = ArtifactFile::open(path("seq.bpk"), {}, false);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  int damaged = 0;
  for (const ArtifactNamedData& d : (*art)->named_data()) {
    if (d.key != "seq/c32" && d.key != "seq/i1") continue;
    ++damaged;
    const ArtifactSegment& s = (*art)->segments()[d.segment];
    auto copy = bytes;
    copy[artifact_data_start(fb_size) + s.offset] ^= 0x01;
    write_bytes(path("w.bpk"), copy.data(), copy.size());
    ModelOptions lazy;
    lazy.lazy_checksums = true;
    RunResult r = run_model(*rt_, path("w.bpk"), lazy, input_of(kStored[0]));
    ASSERT_FALSE(r.status.ok()) << d.key << ": damage went unnoticed";
    EXPECT_EQ(r.status.code(), StatusCode::kCorruptData) << r.status.to_string();
    EXPECT_TRUE(contains(r.status.message(), "checksum")) << r.status.to_string();
  }
  EXPECT_EQ(damaged, 2);
}

}  // namespace
}  // namespace backplane::artifact_test
