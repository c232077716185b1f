# bench/netns_link.sh — sourced by the network benchmarks: two network namespaces ${ns}a
# (10.231.9.1) and ${ns}b (10.231.9.2) joined by a veth pair shaped with tbf to $rate each way,
# removed again on exit. Needs root (ip netns, tc). Sets $ns.
ns=tdbench$$
netns_cleanup() { ip netns del ${ns}a 2>/dev/null || true; ip netns del ${ns}b 2>/dev/null || true; }
trap netns_cleanup EXIT
ip netns add ${ns}a
ip netns add ${ns}b
ip link add ${ns}x netns ${ns}a type veth peer name ${ns}y netns ${ns}b
ip -n ${ns}a addr add 10.231.9.1/24 dev ${ns}x
ip -n ${ns}b addr add 10.231.9.2/24 dev ${ns}y
for side in "a ${ns}x" "b ${ns}y"; do
  set -- $side
  ip -n ${ns}$1 link set $2 up
  ip -n ${ns}$1 link set lo up
  ip netns exec ${ns}$1 tc qdisc add dev $2 root tbf rate "$rate" burst 1mb latency 100ms
done
