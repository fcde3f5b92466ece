#!/usr/bin/env bash
# Runs the network-namespace tests (tests/netns) outside Bazel, as root:
#   testing/netns/run.sh bytes            cross-host bytes = refit plan's
#   testing/netns/run.sh faults [--full]  the fault matrix (--full: 10 s
#                                         outages, 12 rounds)
#   testing/netns/run.sh scale [--full]   64 members with the data plane;
#                                         --full: 1,024 members on 16 hosts
#                                         (control plane) and 128 members on
#                                         16 hosts with the data plane
#   testing/netns/run.sh relay_kill       a relay killed mid-round
#   testing/netns/run.sh fanout           one trainer host feeding 8 engine
#                                         hosts over capped links: relayed,
#                                         direct, one-replica and Gloo
#                                         broadcast rounds, one line
#   testing/netns/run.sh all [--full]     (all but fanout)
# Builds what it needs first. Output under $NETNS_OUT (default
# /tmp/refit-netns); every namespace it makes is removed at the end.
set -u
cd "$(dirname "$0")/../.."
what=${1:-all}
full=${2:-}
bazel build //server:refitd //cli:refit //testing/netns:all >/dev/null 2>&1 ||
  { echo "build failed: bazel build //server:refitd //cli:refit //testing/netns:all"; exit 1; }
B=bazel-bin
export TEST_TMPDIR=${NETNS_OUT:-/tmp/refit-netns}
mkdir -p "$TEST_TMPDIR"
tools=("$B/server/refitd" "$B/cli/refit" "$B/testing/netns/netns_members" testing/netns/netns.sh)
rc=0
if [ "$what" = bytes ] || [ "$what" = all ]; then
  tests/netns/netns_bytes_test.sh "${tools[@]}" || rc=1
fi
if [ "$what" = faults ] || [ "$what" = all ]; then
  tests/netns/netns_faults_test.sh "${tools[@]}" testing/netns/netns_job.sh \
    "$B/testing/netns/frame_relay" $full || rc=1
fi
if [ "$what" = scale ] || [ "$what" = all ]; then
  tests/netns/netns_scale_test.sh "${tools[@]}" "$B/testing/netns/status_probe" $full || rc=1
  if [ "$full" = --full ]; then
    NETNS_SCALE_HOSTS=16 NETNS_SCALE_PER_HOST=8 NETNS_SCALE_MODE="" \
      tests/netns/netns_scale_test.sh "${tools[@]}" "$B/testing/netns/status_probe" || rc=1
  fi
fi
if [ "$what" = relay_kill ] || [ "$what" = all ]; then
  tests/netns/netns_relay_kill_test.sh "${tools[@]}" testing/netns/netns_job.sh || rc=1
fi
if [ "$what" = fanout ]; then
  tests/netns/netns_fanout_test.sh "${tools[@]}" "$B/testing/netns/gloo_broadcast" || rc=1
fi
exit $rc
