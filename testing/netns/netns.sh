# netns.sh: many hosts on one machine, for refit's network tests. Sourced
# by bash scripts (tests/netns); needs root and iproute2 (`ip`, `tc`).
#
# netns_up N makes N hosts h0..h(N-1), each a network namespace with two
# links to a switch namespace: `ctl` (the control network, 10.213.0.0/24,
# where refitd listens) and `data` (the data network, 10.214.0.0/24, where
# Gloo binds), each a veth pair whose other end (c<i>, d<i>) sits on a
# bridge in the switch. Host i has 10.213.0.<i+1> and 10.214.0.<i+1>. No
# namespace has a route beyond these two subnets, and nothing is added to
# the namespace this script runs in: traffic stays inside the namespaces
# made here. Everything is named NETNS_PREFIX... (rfn-<pid>-), removed by
# netns_down (installed as an EXIT trap by netns_up), and leftovers of an
# earlier run whose process is gone are removed by netns_up first.
#
#   source testing/netns/netns.sh
#   netns_require || exit 0          # prints why it skips
#   netns_up 5
#   netns_spawn 0 refitd.log refitd --address=10.213.0.1:0 ...
#   netns_link 3 data down; ...; netns_link 3 data up
#   echo "$(netns_bytes 2 data tx)"

NETNS_PREFIX="rfn-$$-"
NETNS_HOSTS=0
NETNS_PIDS=()

# The namespace of host $1 (or "sw" for the switch).
netns_name() { echo "${NETNS_PREFIX}$1"; }
netns_ctl_ip() { echo "10.213.0.$(($1 + 1))"; }
netns_data_ip() { echo "10.214.0.$(($1 + 1))"; }

# Returns 0 when namespaces can be made here; else prints the reason (a
# line starting "SKIP netns:") and returns 1.
netns_require() {
  if [ "${EUID:-$(id -u)}" != 0 ]; then echo "SKIP netns: not root"; return 1; fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "SKIP netns: no ip/tc (iproute2)"; return 1
  fi
  local probe="rfn-$$-probe"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "SKIP netns: cannot create a network namespace (sandboxed?)"; return 1
  fi
  ip netns del "$probe"
  return 0
}

# Kills every process in namespace $1 (SIGKILL) and waits up to 5 s.
netns_kill_ns() {
  local ns=$1 pids i
  for i in $(seq 1 50); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -z "$pids" ] && return 0
    kill -9 $pids 2>/dev/null
    sleep 0.1
  done
  echo "netns: processes left in $ns: $pids" >&2
  return 1
}

# Removes namespaces of earlier runs (rfn-<pid>-*) whose process is gone.
netns_reap_leftovers() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^rfn-[0-9]*-'); do
    pid=${ns#rfn-}; pid=${pid%%-*}
    if [ "$pid" != "$$" ] && ! kill -0 "$pid" 2>/dev/null; then
      netns_kill_ns "$ns"
      ip netns del "$ns" 2>/dev/null && echo "netns: removed leftover $ns" >&2
    fi
  done
}

# Removes everything this run made: its processes, its namespaces (with them
# their veths, bridges and qdiscs).
netns_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${NETNS_PREFIX}"); do
    netns_kill_ns "$ns"
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${NETNS_PREFIX}"); do
    ip netns del "$ns"
  done
  NETNS_HOSTS=0
  NETNS_PIDS=()
}

# Makes $1 hosts (see the file comment). Returns 1 (after cleaning up) when
# a command fails.
netns_up() {
  local n=$1 i sw ns
  trap netns_down EXIT
  trap 'exit 130' INT TERM
  netns_reap_leftovers
  sw=$(netns_name sw)
  ip netns add "$sw" || return 1
  ip -n "$sw" link set lo up
  ip -n "$sw" link add bc type bridge && ip -n "$sw" link set bc up || return 1
  ip -n "$sw" link add bd type bridge && ip -n "$sw" link set bd up || return 1
  for i in $(seq 0 $((n - 1))); do
    ns=$(netns_name "h$i")
    ip netns add "$ns" || { netns_down; return 1; }
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "c$i" type veth peer name ctl netns "$ns" &&
      ip -n "$sw" link add "d$i" type veth peer name data netns "$ns" &&
      ip -n "$sw" link set "c$i" master bc up &&
      ip -n "$sw" link set "d$i" master bd up &&
      ip -n "$ns" addr add "$(netns_ctl_ip "$i")/24" dev ctl &&
      ip -n "$ns" addr add "$(netns_data_ip "$i")/24" dev data &&
      ip -n "$ns" link set ctl up && ip -n "$ns" link set data up ||
      { netns_down; return 1; }
  done
  NETNS_HOSTS=$n
}

# Runs "$3..." in host $1's namespace in the background, output to file $2;
# prints its pid (also kept in NETNS_PIDS).
netns_spawn() {
  local host=$1 log=$2
  shift 2
  ip netns exec "$(netns_name "h$host")" "$@" >"$log" 2>&1 &
  NETNS_PIDS+=($!)
  disown $!  # killed by netns_down without a "Killed" line
  echo $!
}

# Runs "$2..." in host $1's namespace, in the foreground.
netns_exec() {
  local host=$1
  shift
  ip netns exec "$(netns_name "h$host")" "$@"
}

# Bytes host $1 sent (tx) or received (rx) on its link $2 (ctl|data).
netns_bytes() {
  ip netns exec "$(netns_name "h$1")" cat "/sys/class/net/$2/statistics/$3_bytes"
}

# Takes host $1's link $2 (ctl|data|both) $3 (down|up) at the switch end,
# as a pulled cable: the host's packets are dropped, its sockets stay open.
netns_link() {
  local sw l
  sw=$(netns_name sw)
  for l in $( [ "$2" = both ] && echo "c d" || echo "${2:0:1}"); do
    ip -n "$sw" link set "$l$1" "$3" || return 1
  done
}

# Cuts (add) or heals (del) the control network between hosts $2 and $3:
# each drops the other's packets (blackhole routes); both reach every
# other host.
netns_partition() {
  local op=$1 a=$2 b=$3
  ip -n "$(netns_name "h$a")" route "$op" blackhole "$(netns_ctl_ip "$b")/32" &&
    ip -n "$(netns_name "h$b")" route "$op" blackhole "$(netns_ctl_ip "$a")/32"
}

# Caps what host $1 sends and receives on link $2 at $3 (a tc rate, e.g.
# 20mbit) with token-bucket filters on both ends; "off" removes the caps.
netns_cap() {
  local host=$1 link=$2 rate=$3 sw
  sw=$(netns_name sw)
  if [ "$rate" = off ]; then
    tc -n "$(netns_name "h$host")" qdisc del dev "$link" root 2>/dev/null
    tc -n "$sw" qdisc del dev "${link:0:1}$host" root 2>/dev/null
    return 0
  fi
  tc -n "$(netns_name "h$host")" qdisc replace dev "$link" root tbf rate "$rate" \
    burst 32kb latency 1s &&
    tc -n "$sw" qdisc replace dev "${link:0:1}$host" root tbf rate "$rate" \
      burst 32kb latency 1s
}

# Kills every process in host $1's namespace.
netns_kill_host() { netns_kill_ns "$(netns_name "h$1")"; }

# Waits until file $1 has $2 lines matching regex $3, up to $4 seconds.
# Returns 1 on timeout (printing what it saw).
netns_wait_lines() {
  local file=$1 want=$2 re=$3 secs=$4 end got
  end=$(($(date +%s) + secs))
  while [ "$(date +%s)" -lt "$end" ]; do
    got=$(cat $file 2>/dev/null | grep -cE "$re")
    [ "$got" -ge "$want" ] && return 0
    sleep 0.2
  done
  echo "netns: timed out after ${secs}s waiting for $want lines /$re/ in $file (saw $got)" >&2
  return 1
}

# Starts refitd ($1, then flags) on host 0's control address; sets
# NETNS_REFITD (HOST:PORT) and NETNS_REFITD_PID. Returns 1 when it printed
# no port within 20 s.
netns_start_refitd() {
  local bin=$1 log=$2 port=""
  shift 2
  NETNS_REFITD_PID=$(netns_spawn 0 "$log" "$bin" --address="$(netns_ctl_ip 0):0" \
    --allow_insecure_non_loopback "$@")
  for _ in $(seq 1 100); do
    port=$(sed -n 's/^refitd listening on port \([0-9]*\)$/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.2
  done
  [ -n "$port" ] || { echo "refitd did not start:"; tail -20 "$log"; return 1; }
  NETNS_REFITD="$(netns_ctl_ip 0):$port"
}

# Puts frame relay $1 (the frame_relay binary) on host $2's link $3
# (ctl|data): the switch end leaves the bridge, a new veth pair x<l><i> /
# y<l><i> joins it, and the relay forwards frames between the two with "$4..."
# (--delay_ms=D --loss=P ...), its output in $NETNS_RELAY_LOG (default
# /dev/null). Every host's segmentation offload on that link is turned off
# (gso_max_segs 1), so frames fit the MTU. Prints the relay's pid.
netns_relay_on() {
  local bin=$1 host=$2 link=$3 sw l pid i
  shift 3
  sw=$(netns_name sw)
  l=${link:0:1}
  for i in $(seq 0 $((NETNS_HOSTS - 1))); do
    ip -n "$(netns_name "h$i")" link set "$link" gso_max_segs 1 || return 1
  done
  ip -n "$sw" link add "x$l$host" type veth peer name "y$l$host" &&
    ip -n "$sw" link set "$l$host" nomaster &&
    ip -n "$sw" link set "y$l$host" master "b$l" up &&
    ip -n "$sw" link set "x$l$host" promisc on up &&
    ip -n "$sw" link set "$l$host" promisc on || return 1
  ip netns exec "$sw" "$bin" --a="$l$host" --b="x$l$host" "$@" \
    >"${NETNS_RELAY_LOG:-/dev/null}" 2>&1 &
  pid=$!
  NETNS_PIDS+=("$pid")
  disown "$pid"
  echo "$pid"
}

# Takes the relay (pid $1) off host $2's link $3: stops it (its counts go to
# its log) and puts the switch end back on the bridge.
netns_relay_off() {
  local pid=$1 host=$2 link=$3 sw l
  sw=$(netns_name sw)
  l=${link:0:1}
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ip -n "$sw" link del "x$l$host" 2>/dev/null
  ip -n "$sw" link set "$l$host" promisc off master "b$l"
}
