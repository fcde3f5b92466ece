// Coordinator under hostile or faulty input: a plan function that throws,
// and the bounds on what one peer can make refitd hold.
#include <new>
#include <stdexcept>

#include "server/coordinator.h"
#include "server/coordinator_testing.h"

namespace refit {
namespace {

using namespace coordinator_testing;  // NOLINT: test helpers

TEST(CoordinatorLimitsTest, APlanFunctionThatThrowsIsAPlanErrorNotACrash) {
  for (int kind = 0; kind < 2; ++kind) {
    Coordinator::Options o = TestOptions();
    o.plan_function = [kind](const std::vector<v1::Registration>&,
                             const std::vector<v1::Registration>&)
        -> absl::StatusOr<BuiltPlan> {
      if (kind == 0) throw std::bad_alloc();
      throw std::runtime_error("boom");
    };
    auto c = Make(std::move(o));
    const std::string t = Register(*c, Reg(v1::SIDE_TRAINER, "", 0, 1));
    Register(*c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
    auto p = AwaitPlan(*c, t);
    EXPECT_EQ(p.status().code(), kind == 0 ? absl::StatusCode::kResourceExhausted
                                           : absl::StatusCode::kInternal)
        << p.status();
    // refitd goes on: it still answers.
    EXPECT_EQ(c->GetStatus().members_size(), 2);
  }
}

}  // namespace
}  // namespace refit
