// TinyRegistration (see tiny_registration.h).
#include "testing/tiny_registration.h"

#include "mapping/mapping.h"
#include "proto/protocol_version.h"

namespace refit::testing {

v1::Registration TinyRegistration(bool trainer, const std::string& job,
                                  const std::string& engine_id,
                                  const std::string& convention) {
  const std::string conv =
      !convention.empty() ? convention : trainer ? "megatron:tp=1" : "vllm:tp=1";
  v1::Registration r;
  r.set_protocol_version(kProtocolVersion);
  v1::MemberIdentity* id = r.mutable_identity();
  id->set_job(job);
  id->set_side(trainer ? v1::SIDE_TRAINER : v1::SIDE_ENGINE);
  id->set_engine_id(engine_id);
  id->set_rank(0);
  id->set_world_size(1);
  id->set_host_id("h");
  r.set_model_config("tiny-qwen3");
  r.set_convention(conv);
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3");
  if (!model.ok()) return r;
  absl::StatusOr<MappedSide> side = BuildSideLayout(*model, trainer, conv);
  if (!side.ok()) return r;
  for (const LocalBuffer& lb : RankBuffers(*side, 0)) {
    v1::LocalBuffer* b = r.add_buffers();
    b->set_name(lb.name);
    for (int64_t d : lb.shape) b->add_shape(d);
    b->set_dtype(static_cast<int32_t>(lb.dtype));
    b->set_byte_size(lb.byte_size);
  }
  return r;
}

}  // namespace refit::testing
