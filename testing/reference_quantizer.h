// The reference blockwise FP8 quantizer, written plainly (tile by tile, and
// e4m3 by searching every code for the nearest value) to check refit's own
// (exec/quantize.h, exec/cuda/convert_kernels.h) against.
#ifndef REFIT_TESTING_REFERENCE_QUANTIZER_H_
#define REFIT_TESTING_REFERENCE_QUANTIZER_H_

#include <cstdint>
#include <vector>

namespace refit::testing {

// The e4m3 code nearest to x after clamping to [-448, 448] (ties to the
// even code), by search over all codes.
uint8_t ReferenceE4M3(float x);

struct Quantized {
  std::vector<uint8_t> values;  // row-major, the tensor's shape
  std::vector<float> scales;    // row-major, the tile grid
};

// Quantizes a whole tensor of `shape` (f32 values, row-major; tiles of
// `block` x `block` on the last two dims, 1 on the others).
Quantized ReferenceQuantize(const std::vector<float>& values,
                            const std::vector<int64_t>& shape, int64_t block,
                            bool ue8m0);

}  // namespace refit::testing

#endif  // REFIT_TESTING_REFERENCE_QUANTIZER_H_
