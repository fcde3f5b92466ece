// Plan codec: ToProto and FromProto (see plan_codec.h; slices in
// plan_slice.cc).
#include "plan/plan_codec.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "plan/one_pass.h"
#include "plan/plan_stats.h"
#include "plan/wave_bytes.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/dtype.h"

namespace refit {
namespace {

void RecordToProto(const Record& r, refit::v1::RecordProto* rp);

void SideToProto(const SideLayout& s, refit::v1::SideLayoutProto* p) {
  p->set_world_size(s.world_size);
  for (const TensorSpec& t : s.tensors) {
    auto* tp = p->add_tensors();
    tp->set_name(t.name);
    for (int64_t x : t.shape) tp->add_shape(x);
    tp->set_dtype(static_cast<int32_t>(t.dtype));
    tp->set_stacked(t.stacked);
    tp->set_transform(static_cast<int32_t>(t.transform));
    tp->set_format(t.format ? static_cast<int32_t>(*t.format) : 0);
    tp->set_quant_role(static_cast<int32_t>(t.quant_role));
  }
  for (const BufferSpec& b : s.buffers) {
    auto* bp = p->add_buffers();
    bp->set_rank(b.rank);
    bp->set_name(b.name);
    bp->set_byte_size(b.byte_size);
    bp->set_scratch(b.scratch);
    for (const ByteRange& r : b.padding) {
      auto* rp = bp->add_padding();
      rp->set_begin(r.begin);
      rp->set_size(r.size);
    }
  }
  for (const Record& r : s.records) RecordToProto(r, p->add_records());
  for (int32_t h : s.host_of_rank) p->add_host_of_rank(h);
  for (int32_t h : s.stage_of_rank) p->add_stage_of_rank(h);
  for (int32_t g : s.gpu_of_rank) p->add_gpu_of_rank(g);
}

void RecordToProto(const Record& r, refit::v1::RecordProto* rp) {
    rp->set_tensor(r.tensor);
    rp->set_rank(r.rank);
    rp->set_buffer(r.buffer);
    for (int d = 0; d < r.box.rank(); ++d) {
      rp->add_origin(r.box.origin(d));
      rp->add_shape(r.box.shape(d));
    }
    rp->set_byte_offset(r.byte_offset);
    rp->set_buffer_step(r.buffer_step);
    for (const DimMap& m : r.dims) {
      auto* mp = rp->add_dims();
      for (const DimSplit& sp : m.splits) {
        mp->add_sizes(sp.size);
        mp->add_strides(sp.stride);
      }
    }
}

absl::StatusOr<Box> BoxOf(const google::protobuf::RepeatedField<int64_t>& o,
                          const google::protobuf::RepeatedField<int64_t>& s) {
  std::vector<int64_t> ov(o.begin(), o.end()), sv(s.begin(), s.end());
  return Box::Make(ov, sv);
}

absl::StatusOr<Record> RecordFromProto(const refit::v1::RecordProto& rp);

absl::Status SideFromProto(const refit::v1::SideLayoutProto& p,
                           const char* side, SideLayout* s) {
  auto bad = [&](const std::string& m) {
    return absl::InvalidArgumentError(absl::StrCat(side, ": ", m));
  };
  if (p.world_size() < 0) return bad("negative world size");
  s->world_size = p.world_size();
  for (const auto& tp : p.tensors()) {
    TensorSpec t;
    t.name = tp.name();
    t.shape.assign(tp.shape().begin(), tp.shape().end());
    if (!IsValidDType(tp.dtype())) {
      return bad(absl::StrCat("tensor ", t.name, " has dtype ", tp.dtype()));
    }
    t.dtype = static_cast<DType>(tp.dtype());
    t.stacked = tp.stacked();
    t.transform = static_cast<Transform>(tp.transform());
    if (tp.format() != 0) t.format = static_cast<QuantFormat>(tp.format());
    t.quant_role = static_cast<QuantRole>(tp.quant_role());
    REFIT_RETURN_IF_ERROR(AnnotateStatus(ValidateTensorSpec(t), side));
    s->tensors.push_back(std::move(t));
  }
  for (const auto& bp : p.buffers()) {
    BufferSpec b;
    b.rank = bp.rank();
    b.name = bp.name();
    b.byte_size = bp.byte_size();
    b.scratch = bp.scratch();
    if (b.rank < 0 || b.rank >= s->world_size || b.byte_size < 0) {
      return bad(absl::StrCat("buffer ", b.name, " on rank ", b.rank,
                              " has a bad rank or size"));
    }
    for (const auto& rp : bp.padding()) {
      if (rp.begin() < 0 || rp.size() < 0 || rp.begin() > b.byte_size ||
          rp.size() > b.byte_size - rp.begin()) {
        return bad(absl::StrCat("buffer ", b.name, " has bad padding"));
      }
      b.padding.push_back(ByteRange{rp.begin(), rp.size()});
    }
    s->buffers.push_back(std::move(b));
  }
  for (const auto& rp : p.records()) {
    REFIT_ASSIGN_OR_RETURN(Record r, AnnotateStatus(RecordFromProto(rp), side));
    REFIT_RETURN_IF_ERROR(AnnotateStatus(ValidateRecord(*s, r), side));
    s->records.push_back(std::move(r));
  }
  if (p.host_of_rank_size() != 0 && p.host_of_rank_size() != s->world_size) {
    return bad("host_of_rank has the wrong length");
  }
  if (p.stage_of_rank_size() != 0 && p.stage_of_rank_size() != s->world_size) {
    return bad("stage_of_rank has the wrong length");
  }
  if (p.gpu_of_rank_size() != 0 && p.gpu_of_rank_size() != s->world_size) {
    return bad("gpu_of_rank has the wrong length");
  }
  s->gpu_of_rank.assign(p.gpu_of_rank().begin(), p.gpu_of_rank().end());
  for (int32_t g : s->gpu_of_rank) {
    if (g < -1) return bad("gpu_of_rank below -1");
  }
  s->host_of_rank.assign(p.host_of_rank().begin(), p.host_of_rank().end());
  s->stage_of_rank.assign(p.stage_of_rank().begin(), p.stage_of_rank().end());
  for (int32_t st : s->stage_of_rank) {
    if (st < 0) return bad("negative stage");
  }
  return absl::OkStatus();
}

absl::StatusOr<Record> RecordFromProto(const refit::v1::RecordProto& rp) {
    Record r;
    r.tensor = rp.tensor();
    r.rank = rp.rank();
    r.buffer = rp.buffer();
    REFIT_ASSIGN_OR_RETURN(r.box, BoxOf(rp.origin(), rp.shape()));
    r.byte_offset = rp.byte_offset();
    r.buffer_step = rp.buffer_step();
    for (const auto& mp : rp.dims()) {
      if (mp.sizes_size() != mp.strides_size()) {
        return absl::InvalidArgumentError("dim map sizes/strides differ");
      }
      DimMap m;
      for (int i = 0; i < mp.sizes_size(); ++i) {
        m.splits.push_back(DimSplit{mp.sizes(i), mp.strides(i)});
      }
      r.dims.push_back(std::move(m));
    }
    return r;
}

}  // namespace

refit::v1::PlanProto ToProto(const Plan& plan) {
  refit::v1::PlanProto p;
  SideToProto(plan.src, p.mutable_src());
  SideToProto(plan.dst, p.mutable_dst());
  for (int32_t x : plan.dst_to_src_tensor) p.add_dst_to_src_tensor(x);
  for (const Segment& s : plan.segments) {
    auto* sp = p.add_segments();
    sp->set_src_record(s.src_record);
    sp->set_dst_record(s.dst_record);
    for (int d = 0; d < s.box.rank(); ++d) {
      sp->add_origin(s.box.origin(d));
      sp->add_shape(s.box.shape(d));
    }
    sp->set_bytes(s.bytes);
  }
  for (const Message& m : plan.messages) {
    auto* mp = p.add_messages();
    mp->set_src_rank(m.src_rank);
    mp->set_dst_rank(m.dst_rank);
    mp->set_wave(m.wave);
    mp->set_first_segment(m.first_segment);
    mp->set_num_segments(m.num_segments);
    mp->set_bytes(m.bytes);
    mp->set_src_contiguous(m.src_contiguous);
    mp->set_src_buffer(m.src_buffer);
    mp->set_src_offset(m.src_offset);
    mp->set_dst_contiguous(m.dst_contiguous);
    mp->set_dst_buffer(m.dst_buffer);
    mp->set_dst_offset(m.dst_offset);
    mp->set_relay(m.relay);
  }
  for (const Wave& r : plan.waves) {
    auto* rp = p.add_waves();
    rp->set_lane(r.lane);
    rp->set_stage(r.stage);
    rp->set_first_message(r.first_message);
    rp->set_num_messages(r.num_messages);
    rp->set_plan_bytes(r.plan_bytes);
    rp->set_lane_offset(r.lane_offset);
  }
  auto* o = p.mutable_options();
  o->set_staging_budget_bytes(plan.options.staging_budget_bytes);
  o->set_num_lanes(plan.options.num_lanes);
  o->set_prefer_same_host(plan.options.prefer_same_host);
  o->set_max_message_bytes(plan.options.max_message_bytes);
  o->set_direct_min_bytes(plan.options.direct_min_bytes);
  o->set_max_wave_bytes(plan.options.max_wave_bytes);
  o->set_fp8_block(plan.options.fp8_block);
  o->set_relay(plan.options.relay);
  p.set_fingerprint(plan.fingerprint);
  for (const Conversion& c : plan.conversions) {
    auto* cp = p.add_conversions();
    cp->set_kind(static_cast<int32_t>(c.kind));
    if (IsBlockQuantized(c.kind)) {
      cp->set_format(static_cast<int32_t>(c.format));
      cp->set_swizzle(static_cast<int32_t>(c.swizzle));
    }
    cp->set_from_dtype(static_cast<int32_t>(c.from_dtype));
    RecordToProto(c.from, cp->mutable_from());
    cp->set_to_buffer(c.to_buffer);
    cp->set_scale_buffer(c.scale_buffer);
    for (int64_t t : c.tile) cp->add_tile(t);
    cp->set_global_tensor(c.global_tensor);
    cp->set_global_buffer(c.global_buffer);
    cp->set_nvfp4_recipe(static_cast<int32_t>(c.recipe));
    cp->set_one_pass(c.one_pass);
    cp->set_one_pass_cell_rows(c.one_pass_cell_rows);
    cp->set_one_pass_cell_cols(c.one_pass_cell_cols);
  }
  for (const CutTileGroup& g : plan.cut_tiles) {
    auto* gp = p.add_cut_tiles();
    gp->set_tensor(g.tensor);
    for (int d = 0; d < g.tiles.rank(); ++d) {
      gp->add_origin(g.tiles.origin(d));
      gp->add_shape(g.tiles.shape(d));
    }
    for (int32_t r : g.ranks) gp->add_ranks(r);
  }
  return p;
}

namespace {

// A scratch buffer of `rank` of exactly `bytes`.
bool IsScratchOf(const SideLayout& s, int32_t b, int32_t rank, int64_t bytes) {
  return b >= 0 && b < static_cast<int32_t>(s.buffers.size()) &&
         s.buffers[b].scratch && s.buffers[b].rank == rank &&
         s.buffers[b].byte_size == bytes;
}

// c's one-pass decision (plan/one_pass.h): a cell of whole tiles within
// 128 x 128 on a block kind whose tiles the one-pass kernels run, or none.
absl::Status OnePassFromProto(const refit::v1::ConversionProto& cp, const std::string& who,
                              Conversion* c) {
  c->one_pass = cp.one_pass();
  c->one_pass_cell_rows = cp.one_pass_cell_rows();
  c->one_pass_cell_cols = cp.one_pass_cell_cols();
  const int32_t r = c->one_pass_cell_rows, k = c->one_pass_cell_cols;
  if (!c->one_pass) {
    if (r == 0 && k == 0) return absl::OkStatus();
  } else if (IsBlockQuantized(c->kind) && IsOnePassTile(c->tile) && r >= 1 && r <= 128 &&
             k >= 1 && k <= 128) {
    const int64_t tr = c->tile[c->tile.size() - 2], tc = c->tile.back();
    if (r % tr == 0 && k % tc == 0) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": bad one-pass cell ", r, " x ", k, c->one_pass ? "" : " (two passes)"));
}

absl::Status ConversionsFromProto(const refit::v1::PlanProto& p, Plan* plan) {
  SideLayout& src = plan->src;
  const int32_t ntensors = static_cast<int32_t>(src.tensors.size());
  for (const auto& cp : p.conversions()) {
    Conversion c;
    c.kind = static_cast<ConversionKind>(cp.kind());
    REFIT_ASSIGN_OR_RETURN(c.from, RecordFromProto(cp.from()));
    c.to_buffer = cp.to_buffer();
    c.scale_buffer = cp.scale_buffer();
    c.tile.assign(cp.tile().begin(), cp.tile().end());
    const bool block = IsBlockQuantized(c.kind);
    const bool cast = c.kind == ConversionKind::kCastF32 ||
                      c.kind == ConversionKind::kNegExpF32;
    // A block-quantizing row of the table (refit quantizes no per-tensor
    // scale), or none for a cast.
    absl::StatusOr<QuantFormatRow> fr = FindQuantFormat(
        static_cast<QuantFormat>(cp.format()), static_cast<ScaleSwizzle>(cp.swizzle()));
    const bool row = block ? fr.ok() && fr->block_cols > 0 : cp.format() == 0 && cp.swizzle() == 0;
    if ((!block && !cast) || !row || !IsValidDType(cp.from_dtype()) || c.from.tensor < 0 ||
        c.from.tensor >= ntensors) {
      return absl::InvalidArgumentError("a conversion has a bad kind, format, dtype or tensor");
    }
    if (block) {
      c.format = static_cast<QuantFormat>(cp.format());
      c.swizzle = static_cast<ScaleSwizzle>(cp.swizzle());
    }
    c.from_dtype = static_cast<DType>(cp.from_dtype());
    TensorSpec& t = src.tensors[c.from.tensor];
    const std::string who = absl::StrCat("conversion of tensor ", t.name, " on trainer rank ",
                                         c.from.rank);
    const bool nv = QuantizesTo(c, QuantFormat::kNvfp4);
    if (t.dtype != (block ? fr->code_dtype : DType::kF32) ||
        DTypeSize(c.from_dtype) < 2 || (nv && t.shape.empty())) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": dtypes do not fit"));
    }
    // The registered record is checked in its own dtype (and, NVFP4, its
    // unpacked shape).
    const DType converted = t.dtype;
    t.dtype = c.from_dtype;
    if (nv) t.shape.back() *= 2;
    absl::Status valid = ValidateRecord(src, c.from);
    t.dtype = converted;
    if (nv) t.shape.back() /= 2;
    REFIT_RETURN_IF_ERROR(AnnotateStatus(valid, who));
    const int64_t n = UncheckedNumElements(c.from.box);
    if (!IsScratchOf(src, c.to_buffer, c.from.rank,
                     nv ? n / 2 : n * DTypeSize(converted))) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": bad scratch buffer"));
    }
    c.global_tensor = nv ? cp.global_tensor() : -1;
    c.global_buffer = nv ? cp.global_buffer() : -1;
    if (cp.nvfp4_recipe() != static_cast<int32_t>(Nvfp4Recipe::kModelopt) &&
        (!nv || cp.nvfp4_recipe() != static_cast<int32_t>(Nvfp4Recipe::kVllm))) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": bad NVFP4 recipe ",
                                                     cp.nvfp4_recipe()));
    }
    c.recipe = static_cast<Nvfp4Recipe>(cp.nvfp4_recipe());
    if (nv) {
      const Box lead = LeadingBox(c.from.box);
      const bool tensor_ok =
          c.global_tensor >= 0 && c.global_tensor < ntensors &&
          src.tensors[c.global_tensor].dtype == DType::kF32 &&
          static_cast<int>(src.tensors[c.global_tensor].shape.size()) == lead.rank();
      if (!tensor_ok || (c.global_buffer != -1 &&
                         !IsScratchOf(src, c.global_buffer, c.from.rank,
                                      UncheckedNumElements(lead) * 4))) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": bad NVFP4 global scale"));
      }
    }
    if (block) {
      if (static_cast<int>(c.tile.size()) != c.from.box.rank() ||
          std::any_of(c.tile.begin(), c.tile.end(), [](int64_t x) { return x < 1; })) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": bad tiles"));
      }
      const Box owned = OwnedTiles(c.from.box, c.tile);
      if (c.scale_buffer != -1 &&
          !IsScratchOf(src, c.scale_buffer, c.from.rank,
                       UncheckedNumElements(owned) * ScaleElementBytes(c))) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": bad scale buffer"));
      }
    } else if (c.scale_buffer != -1 || !c.tile.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": scales on a cast"));
    }
    REFIT_RETURN_IF_ERROR(OnePassFromProto(cp, who, &c));
    plan->conversions.push_back(std::move(c));
  }
  for (const auto& gp : p.cut_tiles()) {
    CutTileGroup g;
    g.tensor = gp.tensor();
    REFIT_ASSIGN_OR_RETURN(g.tiles, BoxOf(gp.origin(), gp.shape()));
    g.ranks.assign(gp.ranks().begin(), gp.ranks().end());
    bool ok = g.tensor >= 0 && g.tensor < ntensors && !g.ranks.empty() &&
              g.tiles.rank() == static_cast<int>(src.tensors[g.tensor].shape.size());
    for (size_t i = 0; ok && i < g.ranks.size(); ++i) {
      ok = g.ranks[i] >= 0 && g.ranks[i] < src.world_size &&
           (i == 0 || g.ranks[i - 1] < g.ranks[i]);
    }
    int64_t n = 0;
    if (!ok || !NumElements(g.tiles).ok() || (n = *NumElements(g.tiles)) > (int64_t{1} << 26)) {
      return absl::InvalidArgumentError("a cut-tile group is invalid");
    }
    plan->cut_tiles.push_back(std::move(g));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> FromProto(const refit::v1::PlanProto& p) {
  Plan plan;
  REFIT_RETURN_IF_ERROR(SideFromProto(p.src(), "trainer", &plan.src));
  REFIT_RETURN_IF_ERROR(SideFromProto(p.dst(), "engine", &plan.dst));
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  const auto& o = p.options();
  plan.options.staging_budget_bytes = o.staging_budget_bytes();
  plan.options.num_lanes = o.num_lanes();
  plan.options.prefer_same_host = o.prefer_same_host();
  plan.options.max_message_bytes = o.max_message_bytes();
  plan.options.direct_min_bytes = o.direct_min_bytes();
  plan.options.max_wave_bytes = o.max_wave_bytes();
  plan.options.fp8_block = o.fp8_block();
  plan.options.relay = o.relay();
  if (o.num_lanes() < 1 || o.staging_budget_bytes() < 1 ||
      o.max_message_bytes() < 0 || o.direct_min_bytes() < 0 ||
      o.max_wave_bytes() < 0) {
    return bad("plan options are invalid");
  }
  for (const TensorSpec& t : plan.src.tensors) {
    if (t.transform != Transform::kNone) {
      return bad(absl::StrCat("trainer tensor ", t.name, " has transform ",
                              TransformName(t.transform),
                              "; only the engine side may transform"));
    }
  }
  if (p.dst_to_src_tensor_size() != static_cast<int>(plan.dst.tensors.size())) {
    return bad("dst_to_src_tensor has the wrong length");
  }
  for (int i = 0; i < p.dst_to_src_tensor_size(); ++i) {
    const int32_t s = p.dst_to_src_tensor(i);
    // Matched as the planner matches: ignoring the engine's transform.
    TensorSpec untransformed = plan.dst.tensors[i];
    untransformed.transform = Transform::kNone;
    if (s < 0 || s >= static_cast<int32_t>(plan.src.tensors.size()) ||
        !(plan.src.tensors[s] == untransformed)) {
      return bad(absl::StrCat("engine tensor ", plan.dst.tensors[i].name,
                              " maps to a different trainer tensor"));
    }
    plan.dst_to_src_tensor.push_back(s);
  }
  // The segments relay messages carry: their source records are the
  // engine's (a segment in no message, or out of range, is checked as
  // the trainer's; the messages' checks catch the rest).
  std::vector<char> seg_relay(p.segments_size(), 0);
  for (const auto& mp : p.messages()) {
    if (!mp.relay()) continue;
    const int64_t first = mp.first_segment(), n = mp.num_segments();
    for (int64_t i = std::max<int64_t>(first, 0); i < first + n && i < p.segments_size(); ++i) {
      seg_relay[i] = 1;
    }
  }
  const int32_t ndr = static_cast<int32_t>(plan.dst.records.size());
  for (int si = 0; si < p.segments_size(); ++si) {
    const auto& sp = p.segments(si);
    const SideLayout& from = seg_relay[si] ? plan.dst : plan.src;
    const int32_t nsr = static_cast<int32_t>(from.records.size());
    Segment s;
    s.src_record = sp.src_record();
    s.dst_record = sp.dst_record();
    if (s.src_record < 0 || s.src_record >= nsr || s.dst_record < 0 ||
        s.dst_record >= ndr) {
      return bad("segment names a record out of range");
    }
    REFIT_ASSIGN_OR_RETURN(s.box, BoxOf(sp.origin(), sp.shape()));
    const Record& sr = from.records[s.src_record];
    const Record& dr = plan.dst.records[s.dst_record];
    const TensorSpec& t = plan.dst.tensors[dr.tensor];
    const int32_t want = seg_relay[si] ? dr.tensor : plan.dst_to_src_tensor[dr.tensor];
    if (want != sr.tensor ||
        s.box.rank() != dr.box.rank() || !Contains(sr.box, s.box) ||
        !Contains(dr.box, s.box)) {
      return bad(absl::StrCat("segment ", DescribePart(t, s.box),
                              " is outside its records or tensors differ"));
    }
    if (UncheckedNumElements(s.box) * DTypeSize(t.dtype) != sp.bytes()) {
      return bad(absl::StrCat("segment ", DescribePart(t, s.box),
                              " has the wrong byte count"));
    }
    s.bytes = sp.bytes();
    plan.segments.push_back(std::move(s));
  }
  const int64_t nseg = static_cast<int64_t>(plan.segments.size());
  const int32_t nwaves = p.waves_size();
  for (const auto& mp : p.messages()) {
    Message m;
    m.src_rank = mp.src_rank();
    m.dst_rank = mp.dst_rank();
    m.wave = mp.wave();
    m.first_segment = mp.first_segment();
    m.num_segments = mp.num_segments();
    m.bytes = mp.bytes();
    m.src_contiguous = mp.src_contiguous();
    m.src_buffer = mp.src_buffer();
    m.src_offset = mp.src_offset();
    m.dst_contiguous = mp.dst_contiguous();
    m.dst_buffer = mp.dst_buffer();
    m.dst_offset = mp.dst_offset();
    m.relay = mp.relay();
    // A relay's sender is an engine rank, its source records the engine's.
    const SideLayout& from = m.relay ? plan.dst : plan.src;
    const std::string who = absl::StrCat("message ", m.relay ? "engine" : "trainer", " rank ",
                                         m.src_rank, " -> engine rank ", m.dst_rank);
    if (m.src_rank < 0 || m.src_rank >= from.world_size || m.dst_rank < 0 ||
        m.dst_rank >= plan.dst.world_size || m.wave < 0 || m.wave >= nwaves ||
        m.first_segment < 0 || m.num_segments < 0 ||
        int64_t{m.first_segment} + m.num_segments > nseg) {
      return bad(absl::StrCat(who, ": ranks, wave or segments out of range"));
    }
    int64_t bytes = 0;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = plan.segments[i];
      if (from.records[s.src_record].rank != m.src_rank ||
          plan.dst.records[s.dst_record].rank != m.dst_rank) {
        return bad(absl::StrCat(who, ": a segment's records are on other ranks"));
      }
      bytes += s.bytes;
    }
    if (bytes != m.bytes) return bad(absl::StrCat(who, ": wrong byte count"));
    auto check_buf = [&](const SideLayout& side, bool on, int32_t b, int64_t off,
                         int32_t rank) {
      if (!on) return true;
      return b >= 0 && b < static_cast<int32_t>(side.buffers.size()) &&
             side.buffers[b].rank == rank && off >= 0 &&
             off <= side.buffers[b].byte_size &&
             m.bytes <= side.buffers[b].byte_size - off;
    };
    if (!check_buf(from, m.src_contiguous, m.src_buffer, m.src_offset,
                   m.src_rank) ||
        !check_buf(plan.dst, m.dst_contiguous, m.dst_buffer, m.dst_offset,
                   m.dst_rank)) {
      return bad(absl::StrCat(who, ": contiguous buffer range is invalid"));
    }
    plan.messages.push_back(m);
  }
  const int64_t nmsg = static_cast<int64_t>(plan.messages.size());
  for (int32_t ri = 0; ri < nwaves; ++ri) {
    const auto& rp = p.waves(ri);
    Wave r;
    r.lane = rp.lane();
    r.stage = rp.stage();
    r.first_message = rp.first_message();
    r.num_messages = rp.num_messages();
    r.plan_bytes = rp.plan_bytes();
    r.lane_offset = rp.lane_offset();
    if (r.lane < 0 || r.lane >= plan.options.num_lanes || r.stage < 0 ||
        r.first_message < 0 || r.num_messages < 0 ||
        int64_t{r.first_message} + r.num_messages > nmsg) {
      return bad(absl::StrCat("wave ", ri, ": lane or messages out of range"));
    }
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      if (plan.messages[i].wave != ri) {
        return bad(absl::StrCat("wave ", ri, ": message ", i,
                                " names wave ", plan.messages[i].wave));
      }
    }
    plan.waves.push_back(r);
  }
  REFIT_RETURN_IF_ERROR(CheckWaveBytes(plan));
  REFIT_RETURN_IF_ERROR(ConversionsFromProto(p, &plan));
  plan.fingerprint = p.fingerprint();
  plan.stats = ComputePlanStats(plan);
  return plan;
}

}  // namespace refit
