// Reading a refitd child's Prometheus page (--metrics_port=0): the port it
// printed and one scrape. Test-only.
#ifndef REFIT_TESTS_ADVERSARIAL_METRICS_SCRAPE_H_
#define REFIT_TESTS_ADVERSARIAL_METRICS_SCRAPE_H_

#include <string>

namespace refit::testing {

// Returns the /metrics port refitd printed in its log at `log` (waiting up
// to 5 s for the line); 0 when not found.
int MetricsPort(const std::string& log);

// Returns the whole HTTP answer (status line, headers, page) to
// "GET /metrics" on 127.0.0.1:`port`, read until refitd closes or 5 s pass
// without a byte; empty when it could not connect.
std::string ScrapeMetrics(int port);

}  // namespace refit::testing

#endif  // REFIT_TESTS_ADVERSARIAL_METRICS_SCRAPE_H_
