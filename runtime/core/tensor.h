// runtime/core/tensor.h — a non-owning, typed, shaped view of contiguous memory.
//
// Tensors never own: memory comes from an Arena (memory.h) or a caller's buffer, and a Tensor
// is only valid while that memory is. Shapes are row-major and contiguous. Cheap to copy.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/dtype.h"

namespace tessera {

enum class Device : uint8_t { kCpu, kCuda };

// Up to kMaxDims dimensions, stored inline (no allocation).
class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    TESSERA_CHECK(dims.size() <= kMaxDims);
    for (int64_t d : dims) dims_[rank_++] = d;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  void push_back(int64_t d) { TESSERA_CHECK(rank_ < kMaxDims); dims_[rank_++] = d; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i) if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  std::vector<int64_t> dims() const { return std::vector<int64_t>(dims_.begin(), dims_.begin() + rank_); }
  // "[768, 2304]"
  std::string ToString() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  void* data() const { return data_; }
  float* f32() const { TESSERA_CHECK(dtype_ == DType::kF32); return static_cast<float*>(data_); }
  int32_t* i32() const { TESSERA_CHECK(dtype_ == DType::kI32); return static_cast<int32_t*>(data_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool empty() const { return data_ == nullptr; }
  // Same memory, another shape with the same number of elements.
  Tensor View(Shape s) const {
    TESSERA_CHECK(s.numel() == numel());
    return Tensor(data_, dtype_, s, device_);
  }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
};

}  // namespace tessera
