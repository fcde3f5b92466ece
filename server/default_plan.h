// DefaultPlanFunction: refitd's production plan function (mapping tables +
// planner). Until the planner library lands it fails every plan with
// UNIMPLEMENTED, which refitd reports to every member.
#ifndef REFIT_SERVER_DEFAULT_PLAN_H_
#define REFIT_SERVER_DEFAULT_PLAN_H_

#include "server/refit_server.h"

namespace refit {

// Returns the plan function refitd uses when none is injected.
PlanFunction DefaultPlanFunction();

}  // namespace refit

#endif  // REFIT_SERVER_DEFAULT_PLAN_H_
