// FingerprintRegistrations: its values never change (plans cached and
// members' prepared plans are keyed by it), whatever hash code computes it.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "server/registration.h"

namespace refit {
namespace {

// The fingerprint as refitd has always computed it, written out byte by
// byte: FNV-1a steps from 1469598103934665603, a 0xff step after each
// registration's serialization.
std::string Oracle(const std::vector<const v1::Registration*>& regs) {
  uint64_t h = 1469598103934665603ull;
  for (const v1::Registration* r : regs) {
    for (unsigned char c : SerializeRegistration(*r)) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

v1::Registration Member(int rank, const std::string& job) {
  v1::Registration r;
  r.mutable_identity()->set_job(job);
  r.mutable_identity()->set_rank(rank);
  r.mutable_identity()->set_world_size(2);
  r.mutable_identity()->set_host_id("host-a");
  r.set_model_config("qwen3-0.6b");
  r.set_convention("megatron:tp=2");
  v1::LocalBuffer* b = r.add_buffers();
  b->set_name(absl::StrFormat("model.layers.%d.weight", rank));
  return r;
}

TEST(RegistrationFingerprintTest, EmptyListIsTheStartingValue) {
  EXPECT_EQ(FingerprintRegistrations({}), "14650fb0739d0383");
}

TEST(RegistrationFingerprintTest, SameValuesAsTheByteWiseHash) {
  const v1::Registration a = Member(0, "train"), b = Member(1, "train"),
                         c = Member(0, "other");
  const std::vector<std::vector<const v1::Registration*>> lists = {
      {&a}, {&a, &b}, {&b, &a}, {&a, &b, &c}, {&c}};
  for (const auto& l : lists) {
    EXPECT_EQ(FingerprintRegistrations(l), Oracle(l));
  }
  EXPECT_NE(FingerprintRegistrations({&a, &b}), FingerprintRegistrations({&b, &a}));
}

}  // namespace
}  // namespace refit
