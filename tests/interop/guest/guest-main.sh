# guest-main.sh - what the interop guest does after boot (run by the image's boot stub
# from the per-run share /mnt/host; copied there by vm.sh for every run).
#
# 1. Network and RDMA: ethN gets GUEST_IP<N> (from /mnt/host/env); rxe0 on eth0 (the kernel's
#    Soft-RoCE); siw0 on eth1 when SIW=1 and eth1 exists (the kernel's SoftiWARP, for the
#    iWARP pairs; rxe0 and siw0 need separate netdevs so that RDMA CM can choose), loaded
#    with SIW_PARAMS (mpa_crc_required=1 mpa_crc_strict=1: the MPA CRC policy; the exported
#    `siw_reload PARAMS` loads it again with others). SIW_DELAY (e.g. 10ms) delays what eth1
#    sends (netem): see docs/interop.md, "the guest's siw races its own MPA Reply".
# 2. /mnt/host/ready: kernel, rdma-core and perftest versions, rxe0's RoCE v2 GID index,
#    siw0's netdev and MPA CRC parameters.
# 3. A job queue: the host drops jobs/NAME.sh (written as NAME.tmp, then renamed); each runs
#    at once in its own process group as `bash NAME.sh`, output in jobs/NAME.out, exit
#    status in jobs/NAME.rc. jobs/NAME.cancel kills it. A job may call `listening PORT`
#    (below) to create jobs/NAME.listening once a TCP port listens.
# 4. Leaves when /mnt/host/stop appears or MAX_SECONDS pass; the stub powers off.
set -u
. /mnt/host/env
SHARE=/mnt/host
JOBS=$SHARE/jobs
mkdir -p "$JOBS"
MAX_SECONDS=${MAX_SECONDS:-600}
up() { cut -d' ' -f1 /proc/uptime; }
echo "guest-main: start at $(up) s"

ulimit -l unlimited
ip link set lo up
for n in 0 1 2 3; do
  ip link show "eth$n" >/dev/null 2>&1 || continue
  var=GUEST_IP$n
  [ -n "${!var:-}" ] && ip addr add "${!var}" dev "eth$n"
  ip link set "eth$n" up
done
ip -br addr

modprobe -a rdma_rxe ib_uverbs rdma_ucm || echo "guest-main: modprobe failed"
rdma link add rxe0 type rxe netdev eth0 || echo "guest-main: rdma link add rxe0 failed"
# siw_reload [PARAM=VALUE...]: siw0 on eth1 again, siw.ko loaded with these parameters
# (no siw resources may be in use); prints the parameters and the link
siw_reload() {
  rdma link del siw0 2>/dev/null
  modprobe -r siw 2>/dev/null
  modprobe siw "$@" && rdma link add siw0 type siw netdev eth1 || { echo "siw_reload: siw0 failed"; return 1; }
  grep . /sys/module/siw/parameters/*
  rdma link show siw0/1
}
export -f siw_reload
if [ "${SIW:-0}" = 1 ] && ip link show eth1 >/dev/null 2>&1; then
  # shellcheck disable=SC2086  # SIW_PARAMS: e.g. "mpa_crc_required=1 mpa_crc_strict=1"
  siw_reload ${SIW_PARAMS:-} >/dev/null || echo "guest-main: siw0 failed"
  if [ -n "${SIW_DELAY:-}" ]; then
    modprobe sch_netem && tc qdisc replace dev eth1 root netem delay "$SIW_DELAY" ||
      echo "guest-main: netem delay on eth1 failed"
  fi
fi
rdma link show

# index of rxe0's RoCE v2 GID that carries an IPv4-mapped address (::ffff:a.b.c.d)
gid_index() {
  local d=/sys/class/infiniband/rxe0/ports/1 t i
  for t in "$d"/gid_attrs/types/*; do
    i=${t##*/}
    [ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] || continue
    case "$(cat "$d/gids/$i" 2>/dev/null)" in 0000:0000:0000:0000:0000:ffff:*) echo "$i"; return 0 ;; esac
  done
  return 1
}
# the address may take a moment to reach the GID table
for _ in $(seq 50); do G=$(gid_index) && break; sleep 0.2; done
ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
{
  echo "kernel=$(uname -r)"
  echo "kernel_package=linux-image-$(uname -r) $(ver "linux-image-$(uname -r)")"
  echo "rdma_core=$(ver rdma-core)"
  echo "perftest=$(ver perftest)"
  echo "rxe0_gid_index=${G:-}"
  echo "rxe0_gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/"${G:-0}" 2>/dev/null)"
  echo "rxe0_active_mtu=$(ibv_devinfo -d rxe0 2>/dev/null | awk '/active_mtu/ {print $2; exit}')"
  echo "siw0_netdev=$(rdma link show siw0/1 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p')"
  echo "siw_params=$(cd /sys/module/siw/parameters 2>/dev/null && grep . mpa_crc_* | tr '\n:' ' =')"
  echo "eth1_qdisc=$(tc qdisc show dev eth1 2>/dev/null | head -1)"
  echo "uptime=$(up)"
} >"$SHARE/ready.tmp"
mv "$SHARE/ready.tmp" "$SHARE/ready"
cat "$SHARE/ready"

# listening PORT: marks the calling job listening once a TCP port listens (for servers)
listening() {
  local i
  for i in $(seq 600); do
    if [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; then : >"$JOBS/$JOB.listening"; return 0; fi
    sleep 0.1
  done
  return 1
}
export -f listening

# cm_listening PORT: the same for an RDMA CM server (no TCP port: its LISTEN cm_id, as
# iproute2's `rdma resource show cm_id` lists it)
cm_listening() {
  local i
  for i in $(seq 600); do
    if rdma res show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr [^ ]*:$1( |\$)"; then
      : >"$JOBS/$JOB.listening"; return 0
    fi
    sleep 0.1
  done
  return 1
}
export -f cm_listening
export JOBS

declare -A PG
end=$(( $(date +%s) + MAX_SECONDS ))
while [ ! -e "$SHARE/stop" ] && [ "$(date +%s)" -lt "$end" ]; do
  for f in "$JOBS"/*.sh; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .sh)
    [ -n "${PG[$name]:-}" ] && continue
    echo "guest-main: job $name at $(up) s"
    JOB=$name setsid bash -c 'bash "$JOBS/$JOB.sh" >"$JOBS/$JOB.out" 2>&1; echo $? >"$JOBS/$JOB.rc.tmp"; mv "$JOBS/$JOB.rc.tmp" "$JOBS/$JOB.rc"' &
    PG[$name]=$!
  done
  for name in "${!PG[@]}"; do
    if [ -e "$JOBS/$name.cancel" ] && [ ! -e "$JOBS/$name.cancelled" ]; then
      kill -KILL -- "-${PG[$name]}" 2>/dev/null
      : >"$JOBS/$name.cancelled"
      [ -e "$JOBS/$name.rc" ] || echo 137 >"$JOBS/$name.rc"
    fi
  done
  sleep 0.2
done
echo "guest-main: leaving at $(up) s ($( [ -e "$SHARE/stop" ] && echo stop file || echo time up ))"
for name in "${!PG[@]}"; do kill -KILL -- "-${PG[$name]}" 2>/dev/null; done
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "${f##*/}=$(cat "$f")"; done >"$SHARE/rxe0-counters.txt" 2>/dev/null
{ for i in eth0 eth1; do ip -s -s link show $i; tc -s qdisc show dev $i; done; echo; cat /proc/net/snmp; } >"$SHARE/net-stats.txt" 2>&1
dmesg >"$SHARE/dmesg.txt" 2>&1
exit 0
