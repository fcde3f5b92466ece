// The reference for converted plans (plan/conversion.h): scratch buffers
// and expected engine values computed from whole logical tensors with the
// reference quantizer, independently of the data plane's Converter.
#ifndef REFIT_TESTING_REFERENCE_CONVERT_H_
#define REFIT_TESTING_REFERENCE_CONVERT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/dtype.h"
#include "layout/tensor_spec.h"
#include "layout/layout.h"
#include "plan/plan.h"
#include "testing/reference_quantizer.h"

namespace refit::testing {

// Writes every scratch buffer of plan.src (src[b], allocated by the caller)
// from the registered buffers: each converted tensor is read whole from its
// conversions' source records, converted, and cut back into the records'
// boxes. INVALID_ARGUMENT if a converted tensor is not covered or holds a
// NaN or infinity where it is quantized.
absl::Status ReferenceConvert(const Plan& plan, const std::vector<uint8_t*>& src);

// The pattern word with its low DTypeSize(dtype) bytes made a finite value
// of a float dtype (the exponent's top bit cleared where all its bits were
// set); other dtypes unchanged.
uint64_t FiniteWord(DType dtype, uint64_t w);

// The bytes (row-major over the whole tensor) an engine tensor `t` holds
// when the trainer held the pattern of version `seed` in `source_dtype`:
// f32 (-exp) values, e4m3 values of a block-quantized weight, or, for a
// "<w>_scale_inv" tensor (`weight` = w's engine spec), w's scales (for a
// u8 "<w>_scale" tensor, w's MXFP8 E8M0 bytes), in the weight's format
// (TensorSpec::format: ReferenceQuantizeAs, or MXFP8). `block` is the FP8
// tile edge.
std::vector<uint8_t> ExpectedConverted(const TensorSpec& t, DType source_dtype,
                                       const TensorSpec* weight, uint64_t seed,
                                       int64_t block);

// NVFP4 engines (exec/convert/nvfp4.h): when `t` is a u8 NVFP4 weight of `engine`
// (it has an f8e4m3 "<t>_scale" and the trainer holds it in a float dtype),
// its "_scale" or the f32 "<w>_scale_2" global of one, sets *out to the
// bytes it holds for the trainer's pattern of version `seed`
// (ReferenceNvfp4Quantize, the global amax that of every weight sharing an
// engine buffer with w, per expert) and returns true; else false.
bool ExpectedNvfp4(const SideLayout& engine, const TensorSpec& t,
                   const std::map<std::string, DType>& source, uint64_t seed,
                   std::vector<uint8_t>* out);

// ReferenceQuantize of `values` as a weight of FP8 block format `format`:
// kFp8Block (float scales), kFp8BlockUe8m0 (scales rounded up to powers
// of two), kFp8BlockRequantUe8m0 (the float-scale quantization
// requantized as vLLM's DeepGEMM path does, ReferenceRequantUe8m0).
Quantized ReferenceQuantizeAs(const std::vector<float>& values,
                              const std::vector<int64_t>& shape, int64_t block,
                              QuantFormat format);

}  // namespace refit::testing

#endif  // REFIT_TESTING_REFERENCE_CONVERT_H_
