// The data plane of a member whose rank is a thread on one GPU, as a
// member builds it (exec/member_runner.h: DataPlaneParts) with the
// in-process device transport in NCCL's place: CudaInProcTransport over a
// shared fabric, the CUDA copier on its lane streams, the GPU wave ops.
// And a MemberKit (member_rounds.h) of every rank on GPU 0.
#ifndef REFIT_TESTING_CUDA_INPROC_PARTS_H_
#define REFIT_TESTING_CUDA_INPROC_PARTS_H_

#include <memory>

#include "exec/member_runner.h"
#include "testing/cuda_inproc_transport.h"
#include "testing/member_rounds.h"

namespace refit {
namespace testing {

// The parts of one rank over `fabric` (its rank is the transport
// factory's), on GPU 0.
DataPlaneParts CudaInProcParts(std::shared_ptr<CudaInProcFabric> fabric);

// Every rank on GPU 0 over one new fabric per data plane, its buffers
// device memory (cudaMalloc). A delta member over L lanes takes 3L + 3
// CUDA streams (L of the transport, the rest the GPU wave ops'): a check
// keeps every rank's streams together within CUDA_DEVICE_MAX_CONNECTIONS
// (32, cuda_inproc_transport.h), so that no stream queues behind another
// rank's transport gate.
MemberKit OneGpuKit();

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_CUDA_INPROC_PARTS_H_
