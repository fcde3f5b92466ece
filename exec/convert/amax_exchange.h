// AmaxExchangeOver: the amax exchange of a trainer rank's conversions
// (FP8 / MXFP8 / NVFP4 tiles cut between trainer ranks) over the data
// plane's transport, one for every runner that converts on a transport
// (the dense executor, the delta runner): the partial amaxes travel as
// one group of sends and receives on lane 0, before any wave, through
// memory of the transport's kind. (The pull path exchanges them over its
// control channel instead.)
#ifndef REFIT_EXEC_CONVERT_AMAX_EXCHANGE_H_
#define REFIT_EXEC_CONVERT_AMAX_EXCHANGE_H_

#include <cstdint>

#include "absl/time/time.h"
#include "exec/convert/conversion_stage.h"
#include "exec/convert/copier.h"
#include "exec/transport/transport.h"

namespace refit {

// Returns the exchange ConversionStage::Run takes for `stage`'s peers: per
// peer, its values copied into memory from `memory`, sent and received on
// `transport`'s lane 0 (nothing may be in flight there), copied back with
// `copier`, the memory released. The exchange fails by `deadline` with the
// transport's or allocator's error, annotated with "trainer rank
// <trainer_rank>: exchanging FP8 tile amaxes". The arguments must outlive
// the exchange.
ConversionStage::AmaxExchange AmaxExchangeOver(const ConversionStage* stage,
                                               Transport* transport, Copier* copier,
                                               const ConversionStage::Memory* memory,
                                               int32_t trainer_rank, absl::Time deadline);

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_AMAX_EXCHANGE_H_
