#include "mapping/gtp.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace refit {
namespace {

// Which GTP group slices a weight: none (kept whole on every GTP rank),
// the dense GTP group, or the routed experts' EGTP group.
enum class GtpGroup { kNone, kDense, kExpert };

struct GtpRow {
  Role role;
  GtpGroup group;
};

// The weights Megatron shards over GTP_remat: every TE linear
// (_gtp_pre_init), the embedding and output layer (wrap_module_params_gtp
// in tensor_parallel/layers.py), routed experts over EGTP (TEGroupedLinear).
// Norms, biases, the router and Mamba's conv / A / D / dt stay whole.
constexpr GtpRow kGtpRoles[] = {
    {Role::kEmbed, GtpGroup::kDense},       {Role::kLmHead, GtpGroup::kDense},
    {Role::kQ, GtpGroup::kDense},           {Role::kK, GtpGroup::kDense},
    {Role::kV, GtpGroup::kDense},           {Role::kO, GtpGroup::kDense},
    {Role::kMlaQA, GtpGroup::kDense},       {Role::kMlaQB, GtpGroup::kDense},
    {Role::kMlaQ, GtpGroup::kDense},        {Role::kMlaKVA, GtpGroup::kDense},
    {Role::kMlaKVB, GtpGroup::kDense},      {Role::kGate, GtpGroup::kDense},
    {Role::kUp, GtpGroup::kDense},          {Role::kDown, GtpGroup::kDense},
    {Role::kSharedGate, GtpGroup::kDense},  {Role::kSharedUp, GtpGroup::kDense},
    {Role::kSharedDown, GtpGroup::kDense},  {Role::kMambaInProj, GtpGroup::kDense},
    {Role::kMambaOutProj, GtpGroup::kDense}, {Role::kExpertGate, GtpGroup::kExpert},
    {Role::kExpertUp, GtpGroup::kExpert},   {Role::kExpertDown, GtpGroup::kExpert},
};

GtpGroup GroupOfRole(int role) {
  for (const GtpRow& row : kGtpRoles) {
    if (static_cast<int>(row.role) == role) return row.group;
  }
  return GtpGroup::kNone;
}

// Per tensor of `model`: its GTP group (a scale tensor its weight's).
std::vector<GtpGroup> TensorGroups(const ModelTensors& model) {
  std::vector<GtpGroup> out(model.tensors.size(), GtpGroup::kNone);
  auto mark = [&](const ModelTensors::RoleIndex& ix) {
    for (int role = 0; role < ModelTensors::kNumRoles; ++role) {
      const int32_t t = ix[role];
      if (t < 0) continue;
      out[t] = GroupOfRole(role);
      if (model.scale_of[t] >= 0) out[model.scale_of[t]] = out[t];
    }
  };
  mark(model.global);
  for (const ModelTensors::RoleIndex& ix : model.layers) mark(ix);
  return out;
}

// The rows [r0, r1) of a 2-dim buffer of `cols` elements a row, moved to
// a buffer of `new_cols` a row starting at row r0.
struct Window {
  bool active = false;
  int64_t r0 = 0, r1 = 0;
  int64_t cols = 0, new_rows = 0, new_cols = 0;
  int64_t esize = 1;
};

// Appends to `out` the parts of `r` in w's rows, rebased. INTERNAL when the
// record's rows are not one monotone dim of whole rows (the Megatron rules
// only make such records).
absl::Status SliceRecord(const Record& r, const Window& w, const std::string& buffer,
                         std::vector<Record>* out) {
  auto bad = [&](absl::string_view why) {
    return absl::InternalError(absl::StrCat("GTP: record of buffer ", buffer, " on rank ",
                                            r.rank, ": ", why));
  };
  if (r.byte_offset % w.esize != 0) return bad("offset is not a whole element");
  const int64_t off = r.byte_offset / w.esize;
  const int64_t row_at = off / w.cols, col_at = off % w.cols;
  int rd = -1;
  for (int d = 0; d < r.box.rank(); ++d) {
    if (r.box.shape(d) <= 1 || r.dims[d].splits.empty()) continue;
    if (r.dims[d].splits[0].stride < w.cols) continue;
    if (rd >= 0) return bad("two dims run over rows");
    rd = d;
  }
  auto rebase = [&](int64_t row) { return ((row - w.r0) * w.new_cols + col_at) * w.esize; };
  if (rd < 0) {  // one row
    if (row_at >= w.r0 && row_at < w.r1) {
      Record q = r;
      q.byte_offset = rebase(row_at);
      out->push_back(std::move(q));
    }
    return absl::OkStatus();
  }
  const DimMap& m = r.dims[rd];
  for (size_t k = 0; k < m.splits.size(); ++k) {
    const DimSplit& s = m.splits[k];
    if (s.size > 1 && (s.stride <= 0 || s.stride % w.cols != 0)) {
      return bad("a row split is not whole rows");
    }
    if (k + 1 < m.splits.size() &&
        s.stride < m.splits[k + 1].size * m.splits[k + 1].stride && s.size > 1) {
      return bad("row splits overlap");
    }
  }
  const int64_t n = r.box.shape(rd);
  auto row_of = [&](int64_t i) { return row_at + DimOffset(m, i) / w.cols; };
  auto first_at_least = [&](int64_t row) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (row_of(mid) < row) lo = mid + 1; else hi = mid;
    }
    return lo;
  };
  const int64_t lo = first_at_least(w.r0), hi = first_at_least(w.r1);
  if (lo >= hi) return absl::OkStatus();
  for (DimPiece& p : DecomposeRange(m, lo, hi - lo)) {
    Record q = r;
    Box::Indices origin(r.box.origin().begin(), r.box.origin().end());
    Box::Indices shape(r.box.shape().begin(), r.box.shape().end());
    origin[rd] += lo + p.index_begin;
    shape[rd] = p.count;
    q.box = Box::UncheckedMove(std::move(origin), std::move(shape));
    q.dims[rd].splits.clear();
    for (const DimSplit& s : p.splits) {
      q.dims[rd].splits.push_back({s.size, s.stride / w.cols * w.new_cols});
    }
    q.byte_offset = rebase(row_at + p.offset / w.cols);
    out->push_back(std::move(q));
  }
  return absl::OkStatus();
}

// weights=nvfp4: every NVFP4 parameter of the trainer holds all the parts
// of one engine parameter (so its amax is the one vLLM's global scale
// covers), and, under amax=gtp, whole weights (no TP cut).
absl::Status CheckNvfp4Parameters(const ModelTensors& model, const TrainerSpec& spec,
                                  const std::string& side_name, const MappedSide& side) {
  const SideLayout& L = side.layout;
  struct Held {
    int32_t group = -1;
    int32_t part = -1;  // a tensor it holds
    bool leader = false;
    int32_t rank = 0;
  };
  std::map<int32_t, Held> held;  // by buffer, lowest first
  auto name_of_leader = [&](int32_t group) -> std::string {
    for (size_t t = 0; t < model.global_of.size(); ++t) {
      if (model.global_of[t] == group) return model.tensors[t].name;
    }
    return "?";
  };
  for (const Record& r : L.records) {
    const int32_t t = r.tensor;
    if (model.is_scale[t] || model.global_group[t] < 0) continue;
    const TensorSpec& ts = model.tensors[t];
    const std::string& buf = L.buffers[r.buffer].name;
    if (spec.amax == TrainerSpec::AmaxScope::kGtp) {
      const int n = r.box.rank();
      for (int d = std::max(0, n - 2); d < n; ++d) {
        if (r.box.origin(d) == 0 && r.box.shape(d) == ts.shape[d]) continue;
        return absl::InvalidArgumentError(absl::StrCat(
            side_name, ": NVFP4 parameter ", buf, " on rank ", r.rank, " holds ",
            DescribePart(ts, r.box), ": under amax=gtp each tensor-parallel shard "
            "quantizes with its own amax, but the engine (vLLM's ModelOpt NVFP4) keeps "
            "one global scale (weight_scale_2) over the whole weight; set amax=tp if the "
            "trainer reduces weight amaxes over its TP (and expert-TP) group, or use "
            "tp=1 (etp=1 for experts)"));
      }
    }
    Held& h = held[r.buffer];
    if (h.group >= 0 && h.group != model.global_group[t]) {
      return absl::InvalidArgumentError(absl::StrCat(
          side_name, ": NVFP4 parameter ", buf, " on rank ", r.rank, " holds ",
          model.tensors[h.part].name, " and ", ts.name,
          ", which the engine keeps in two parameters with two global scales; "
          "the trainer quantizes them with one amax"));
    }
    h.group = model.global_group[t];
    h.part = t;
    h.rank = r.rank;
    h.leader = h.leader || model.global_of[t] >= 0;
  }
  for (const auto& [b, h] : held) {
    if (h.leader) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        side_name, ": NVFP4 parameter ", L.buffers[b].name, " on rank ", h.rank,
        " holds ", model.tensors[h.part].name, " without ", name_of_leader(h.group),
        ": the engine fuses them into one parameter with one global scale "
        "(weight_scale_2), which the trainer's two amaxes do not give; use "
        "weights=mxfp8 for this model"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyGtp(const ModelTensors& model, const TrainerSpec& spec,
                      const std::string& side_name, MappedSide* side) {
  const bool te = spec.weights.has_value();
  const bool gtp = spec.gtp > 1 || spec.egtp > 1;
  if (!gtp && !te) return absl::OkStatus();
  if (spec.egtp > 1 && spec.grouped_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        side_name, ": egtp=", spec.egtp, " with experts=grouped: TE's GroupedLinear "
        "keeps one parameter per expert (weight0..N), which EGTP slices; use "
        "experts=indexed"));
  }
  const bool fp8_tensor = model.quant == QuantFormat::kFp8Tensor;
  if (gtp && (fp8_tensor || (model.quant && IsFp8Block(*model.quant)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        side_name, ": gtp/egtp on an FP8 model (", fp8_tensor ? "per-tensor" : "block",
        " scales): GTP shards native MXFP8, NVFP4 or BF16 weights; use weights=mxfp8 or "
        "weights=nvfp4 with a BF16 model config"));
  }
  if (model.quant == QuantFormat::kNvfp4) {
    REFIT_RETURN_IF_ERROR(CheckNvfp4Parameters(model, spec, side_name, *side));
  }
  SideLayout& L = side->layout;
  const std::vector<GtpGroup> groups = TensorGroups(model);
  const size_t nbuf = L.buffers.size();
  std::vector<GtpGroup> bgroup(nbuf, GtpGroup::kNone);
  std::vector<bool> bscale(nbuf, false);
  std::vector<bool> placed(nbuf, false);
  for (const Record& r : L.records) {
    placed[r.buffer] = true;
    bgroup[r.buffer] = groups[r.tensor];
    if (model.is_scale[r.tensor]) bscale[r.buffer] = true;
  }
  // A buffer without records (a TP rank's vocabulary rows past the model's)
  // is cut like its namesakes on other ranks.
  std::map<absl::string_view, size_t> placed_by_name;
  for (size_t b = 0; b < nbuf; ++b) {
    if (placed[b]) placed_by_name.emplace(L.buffers[b].name, b);
  }
  for (size_t b = 0; b < nbuf; ++b) {
    if (placed[b]) continue;
    auto it = placed_by_name.find(L.buffers[b].name);
    if (it == placed_by_name.end()) continue;
    bgroup[b] = bgroup[it->second];
    bscale[b] = bscale[it->second];
  }
  // Whole scale blocks along the last dim: 32 (MXFP8), 16 (NVFP4).
  const int64_t align = model.quant == QuantFormat::kMxfp8 || model.quant == QuantFormat::kNvfp4
                            ? QuantFormatTraits(*model.quant).block_cols
                            : 1;
  const int64_t stage = spec.stage_size(), tp = spec.tp;
  const int64_t emesh = int64_t{spec.expert_tp()} * spec.ep;
  std::vector<Window> win(nbuf);
  for (size_t b = 0; b < nbuf; ++b) {
    const std::vector<int64_t>& shape = side->buffer_info[b].shape;
    const int64_t w = L.buffers[b].rank % stage;
    int64_t n = 1, g = 0;
    if (bgroup[b] == GtpGroup::kDense) {
      n = spec.gtp;
      g = (w / tp) % n;
    } else if (bgroup[b] == GtpGroup::kExpert) {
      n = spec.egtp;
      g = (w / emesh) % n;
    }
    const bool te_scale = te && bscale[b] && shape.size() == 2;
    if (n == 1 && !te_scale) continue;
    if (shape.size() != 2) {
      return absl::InternalError(absl::StrCat(
          side_name, ": GTP slices 2-dim buffers; ", L.buffers[b].name, " has [",
          absl::StrJoin(shape, ", "), "]"));
    }
    Window& x = win[b];
    x.active = true;
    x.cols = shape[1];
    x.esize = DTypeSize(side->buffer_info[b].dtype);
    const int64_t s = RoundUp(shape[0], align * n) / n;
    x.r0 = n > 1 ? g * s : 0;
    x.r1 = n > 1 ? x.r0 + s : shape[0];
    x.new_rows = x.r1 - x.r0;
    x.new_cols = x.cols;
    if (te_scale) {
      x.new_rows = RoundUp(x.new_rows, 128);
      x.new_cols = RoundUp(x.cols, 4);
    }
  }
  std::vector<Record> out;
  // A sliced record is at most three (a block cut at each end), mostly one.
  out.reserve(L.records.size() + L.records.size() / 2);
  for (Record& r : L.records) {
    const Window& x = win[r.buffer];
    if (!x.active) {
      out.push_back(std::move(r));
      continue;
    }
    REFIT_RETURN_IF_ERROR(SliceRecord(r, x, L.buffers[r.buffer].name, &out));
  }
  L.records = std::move(out);
  for (size_t b = 0; b < nbuf; ++b) {
    const Window& x = win[b];
    if (!x.active) continue;
    side->buffer_info[b].shape = {x.new_rows, x.new_cols};
    L.buffers[b].byte_size = x.new_rows * x.new_cols * x.esize;
    L.buffers[b].padding.clear();
  }
  return absl::OkStatus();
}

}  // namespace refit
