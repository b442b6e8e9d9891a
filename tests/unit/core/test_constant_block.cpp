// ConstantBlock (core/constant_block.hpp) and the TensorDataMap in front of
// it: a weight's bytes leave memory only when nobody holds them, come back
// from the file identical and at the same address, and a dropped copy is
// never read as zeros.
#include "core/constant_block.hpp"
#include "core/tensor_data_map.hpp"

#include "support/files.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <unordered_map>
#include <vector>

namespace backplane {
namespace {

constexpr size_t kHeader = 13;  // the weight starts at an odd offset, as raw_data does
constexpr size_t kFloats = 50000;

class ConstantBlockTest : public test::TempDirTest {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < kFloats; ++i) weights_.push_back(0.25f * static_cast<float>(i) + 1.f);
    std::vector<unsigned char> bytes(kHeader + kFloats * sizeof(float), 0x5a);
    std::memcpy(bytes.data() + kHeader, weights_.data(), kFloats * sizeof(float));
    test::write_bytes(path("model.bin"), bytes.data(), bytes.size());
    Result<std::shared_ptr<MappedFile>> file = MappedFile::open(path("model.bin"));
    ASSERT_TRUE(file.ok()) << file.status().message();
    file_ = *file;
  }

  bool same_as_file(const void* data) const {
    return std::memcmp(data, weights_.data(), kFloats * sizeof(float)) == 0;
  }

  std::vector<float> weights_;
  std::shared_ptr<MappedFile> file_;
};

TEST_F(ConstantBlockTest, ACopyIsDroppedOnlyWhenNobodyHoldsItAndComesBackTheSame) {
  Result<std::shared_ptr<ConstantBlock>> made =
      ConstantBlock::copy(file_, kHeader, kFloats * sizeof(float));
  ASSERT_TRUE(made.ok()) << made.status().message();
  ConstantBlock& b = **made;
  void* const at = b.data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(at) % 64, 0u);
  EXPECT_TRUE(same_as_file(at));

  ASSERT_TRUE(b.acquire().ok());
  EXPECT_FALSE(b.drop()) << "a held block must stay";
  EXPECT_TRUE(b.resident());
  b.release();
  EXPECT_TRUE(b.drop());
  EXPECT_FALSE(b.resident());

  ASSERT_TRUE(b.acquire().ok());
  EXPECT_TRUE(b.resident());
  EXPECT_EQ(b.data(), at);
  EXPECT_TRUE(same_as_file(at));
  b.release();
  EXPECT_TRUE(b.resident()) << "released without drop_when_free: stays";
}

TEST_F(ConstantBlockTest, TheLastReleaseDropsWhenAsked) {
  Result<std::shared_ptr<ConstantBlock>> made =
      ConstantBlock::copy(file_, kHeader, kFloats * sizeof(float));
  ASSERT_TRUE(made.ok());
  ConstantBlock& b = **made;
  b.set_drop_when_free(true);
  ASSERT_TRUE(b.acquire().ok());
  ASSERT_TRUE(b.acquire().ok());
  b.release();
  EXPECT_TRUE(b.resident()) << "one holder is left";
  b.release();
  EXPECT_FALSE(b.resident());
  ASSERT_TRUE(b.touch().ok());
  EXPECT_TRUE(b.resident());
  EXPECT_TRUE(same_as_file(b.data()));
}

TEST_F(ConstantBlockTest, ADroppedCopyFaultsRatherThanReadingZeros) {
  Result<std::shared_ptr<ConstantBlock>> made =
      ConstantBlock::copy(file_, kHeader, kFloats * sizeof(float));
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->drop());
  const volatile float* p = static_cast<const float*>((*made)->data());
  EXPECT_DEATH({ (void)p[kFloats / 2]; }, "");
}

TEST_F(ConstantBlockTest, AViewStaysReadableWhenDropped) {
  // Aligned for its elements, as external data read in place is.
  std::shared_ptr<ConstantBlock> b = ConstantBlock::view(file_, 16, 4096 * 4);
  EXPECT_EQ(static_cast<const unsigned char*>(b->data()), file_->bytes() + 16);
  std::vector<unsigned char> before(file_->bytes() + 16, file_->bytes() + 16 + 4096 * 4);
  EXPECT_TRUE(b->drop());
  EXPECT_EQ(std::memcmp(b->data(), before.data(), before.size()), 0);
}

TEST_F(ConstantBlockTest, TheMapHoldsTheBlockATensorLiesInWhateverItsKey) {
  Result<std::shared_ptr<ConstantBlock>> made =
      ConstantBlock::copy(file_, kHeader, kFloats * sizeof(float));
  ASSERT_TRUE(made.ok());
  std::shared_ptr<ConstantBlock> block = *made;
  std::unordered_map<std::string, Tensor> tensors;
  tensors["w"] =
      Tensor::view(DType::kFloat32, {static_cast<int64_t>(kFloats)}, block->data(), block);
  // A folded Reshape of "w" views the same bytes under a key of its own.
  tensors["r"] =
      Tensor::view(DType::kFloat32, {2, static_cast<int64_t>(kFloats / 2)}, block->data(), block);
  tensors["other"] = Tensor(DType::kFloat32, {4});
  TensorDataMap::Blocks blocks{{"w", block}};
  TensorDataMap map(&tensors, &blocks);

  map.drop_when_free();
  const void* data = nullptr;
  size_t size = 0;
  std::unique_ptr<NamedDataMap::Hold> w, r;
  ASSERT_TRUE(map.hold("w", &data, &size, &w).ok());
  ASSERT_TRUE(map.hold("r", &data, &size, &r).ok());
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(block->holds(), 2);
  w.reset();
  EXPECT_TRUE(block->resident()) << "'r' still holds the bytes";
  r.reset();
  EXPECT_FALSE(block->resident()) << "the last holder let go";

  std::unique_ptr<NamedDataMap::Hold> other;
  ASSERT_TRUE(map.hold("other", &data, &size, &other).ok());
  EXPECT_EQ(other, nullptr);
  EXPECT_EQ(data, tensors["other"].data());

  // get() reads a dropped block again; settle() keeps what it is told to.
  ASSERT_TRUE(map.get("r", &data, &size).ok());
  EXPECT_TRUE(same_as_file(data));
  Result<size_t> out = map.settle({&tensors["r"]});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, 0u);
  ASSERT_TRUE(map.hold("w", &data, &size, &w).ok());
  w.reset();
  EXPECT_TRUE(block->resident()) << "a kept weight is no longer dropped on release";
  out = map.settle({});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, kFloats * sizeof(float));
  EXPECT_FALSE(block->resident());
}

// Two maps over one block (the stages of one model): what one keeps (and
// reads in place) the other's settle cannot drop, until the first lets it
// go; a map holds no block that none of its tensors lies in.
TEST_F(ConstantBlockTest, WhatOneMapKeepsAnotherSharingTheBlockCannotDrop) {
  Result<std::shared_ptr<ConstantBlock>> made =
      ConstantBlock::copy(file_, kHeader, kFloats * sizeof(float));
  ASSERT_TRUE(made.ok());
  std::shared_ptr<ConstantBlock> block = *made;
  std::unordered_map<std::string, Tensor> a_tensors, b_tensors, none;
  a_tensors["w"] =
      Tensor::view(DType::kFloat32, {static_cast<int64_t>(kFloats)}, block->data(), block);
  b_tensors["w"] = a_tensors["w"];
  none["other"] = Tensor(DType::kFloat32, {4});
  const TensorDataMap::Blocks blocks{{"w", block}};
  auto a = std::make_unique<TensorDataMap>(&a_tensors, &blocks);
  TensorDataMap b(&b_tensors, &blocks);
  TensorDataMap c(&none, &blocks);

  ASSERT_TRUE(a->settle({&a_tensors["w"]}).ok());
  ASSERT_TRUE(a->settle({&a_tensors["w"]}).ok());
  EXPECT_EQ(block->pins(), 1) << "a map pins a block once";
  Result<size_t> out = b.settle({});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, 0u);
  EXPECT_TRUE(block->resident()) << "the other map keeps it";
  ASSERT_TRUE(c.settle({}).ok());
  EXPECT_TRUE(block->resident());
  EXPECT_EQ(c.block_containing(block->data(), 4), nullptr) << "no tensor of c lies in it";

  a.reset();  // its pin goes; b asked for the block to leave when free
  EXPECT_EQ(block->pins(), 0);
  EXPECT_FALSE(block->resident());
  ASSERT_TRUE(b.pin({&b_tensors["w"]}).ok());
  EXPECT_TRUE(block->resident());
  EXPECT_TRUE(same_as_file(block->data()));
}

}  // namespace
}  // namespace backplane
