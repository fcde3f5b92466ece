// ChooseRelaySources' pass with `anticipate` (relays.h): every rank's
// bytes reserved at their best link from the start, and tree roots moved
// between the members of their units to even out the ranks' times.
#ifndef REFIT_PLAN_INTERNAL_RELAY_REBALANCE_H_
#define REFIT_PLAN_INTERNAL_RELAY_REBALANCE_H_

#include "plan/internal/relay_choice.h"

namespace refit {
namespace internal_plan {

// Reserves every member's bytes on its rank over the best link it can
// have (from a replica, from another member of its unit or from a member
// of a container), so that each rank's time counts what it will receive
// in all from the start. Never fails.
void ReserveBest(const Setting& s, Choice* c);

// After TreeRoots, where no host is shared by the two sides (every root
// crosses the network): evens out the engine ranks' times by moving roots
// to other members of their units. Pass after pass, ranks slowest first,
// each root goes to the member of its unit that makes the larger of the
// two ranks' times least, where that is under its rank's time now; passes
// stop when one moves nothing (at most 16). Then sets the floor to the
// bound or the slowest rank. TreeRoots places units one by one, largest
// first, and cannot see that the units it places later fall only on ranks
// it already loaded (two engines' holders of one half: the quarters'
// holders take part of it in); moves between any two ranks, not only off
// the slowest, pass load along such sets. Never fails.
void RebalanceRoots(const Setting& s, Choice* c);

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_RELAY_REBALANCE_H_
