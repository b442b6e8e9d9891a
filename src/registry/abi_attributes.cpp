#include "registry/abi_attributes.hpp"

namespace backplane {

AbiAttributes::AbiAttributes(const ir::Node& node) {
  for (const ir::Attribute& a : node.attributes) {
    bp_attribute_t ba{};
    ba.struct_size = BP_STRUCT_SIZE(bp_attribute_t, t);
    ba.name = a.name.c_str();
    ba.type = static_cast<bp_attr_type_t>(a.type);
    ba.i = a.i;
    ba.f = a.f;
    ba.s = a.s.c_str();
    switch (a.type) {
      case ir::AttrType::kInts:
        ba.count = a.ints.size();
        ba.ints = a.ints.data();
        break;
      case ir::AttrType::kFloats:
        ba.count = a.floats.size();
        ba.floats = a.floats.data();
        break;
      case ir::AttrType::kStrings: {
        std::vector<const char*>& strs = strings_.emplace_back();
        for (const std::string& s : a.strings) strs.push_back(s.c_str());
        ba.count = a.strings.size();
        ba.strings = strs.data();
        break;
      }
      case ir::AttrType::kTensor: {
        auto t = std::make_unique<bp_attr_tensor_t>();
        t->struct_size = BP_STRUCT_SIZE(bp_attr_tensor_t, size_bytes);
        t->dtype = static_cast<bp_dtype_t>(a.t.dtype());
        t->rank = a.t.rank();
        t->shape = a.t.shape().data();
        t->data = a.t.data();
        t->size_bytes = a.t.size_bytes();
        ba.t = t.get();
        tensors_.push_back(std::move(t));
        break;
      }
      default:  // graphs (control flow) have no ABI form: backends never see them
        break;
    }
    attrs_.push_back(ba);
  }
}

}  // namespace backplane
