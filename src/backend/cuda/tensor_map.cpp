#include "backend/cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

namespace graft::cuda {

namespace {

// The driver's encoder, fetched once (null where the driver has none).
PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

Status EncodeSwizzled128(CUtensorMap* map, const void* data, int elem_bytes, int64_t rows, int64_t cols, int box_cols,
                         int box_rows, const char* who) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr) return Internal(std::string("cuda ") + who + ": the driver has no cuTensorMapEncodeTiled");
  if ((elem_bytes != 1 && elem_bytes != 2) || box_cols * elem_bytes != 128 || box_rows < 1 || box_rows > 256 ||
      rows < 1 || cols < 1 || cols * elem_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    return InvalidArgument(std::string("cuda ") + who +
                           ": a tensor map needs 1- or 2-byte elements, 128-byte box rows, rows a multiple of 16 bytes "
                           "and 16-byte aligned data");
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols * elem_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)}, elem[2] = {1, 1};
  const CUtensorMapDataType type = elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = encode(map, type, 2, const_cast<void*>(data), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return Internal(std::string("cuda ") + who + ": cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return Status::Ok();
}

Status EncodeSwizzled128Heads(CUtensorMap* map, const void* data, int64_t rows, int heads, int col_boxes, int box_rows,
                              const char* who) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr) return Internal(std::string("cuda ") + who + ": the driver has no cuTensorMapEncodeTiled");
  if (rows < 1 || rows > (int64_t{1} << 31) || heads < 1 || col_boxes < 1 || box_rows < 1 || box_rows > 256 ||
      reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    return InvalidArgument(std::string("cuda ") + who +
                           ": a head-split tensor map needs 1 to 2^31 rows, at least one head and 64-column box, "
                           "box rows 1..256 and 16-byte aligned data");
  }
  const int64_t cols = int64_t{64} * col_boxes;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols * 2), static_cast<cuuint64_t>(cols * 2 * heads)};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)}, elem[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(data), dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return Internal(std::string("cuda ") + who + ": cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return Status::Ok();
}

}  // namespace graft::cuda
