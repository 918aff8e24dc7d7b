#!/usr/bin/env bash
# The GPU-less default node for `make tune`: one container booted with systemd as PID 1, the
# same recipe as the molecule nodes, reached by inventories/sim through the Docker API.
#   tools/sim_node.sh up | down | status
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=${SIM_NODE_NAME:-sglang-sim-node}
case ${1:-up} in
  up)
    image=$(bash "$here/testbed.sh")
    if [[ $(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null) == true ]]; then
      echo "sim-node: $name already running"; exit 0
    fi
    docker rm -f "$name" >/dev/null 2>&1 || true
    docker run -d --name "$name" --hostname "$name" --network none \
      --cap-add SYS_ADMIN --security-opt seccomp=unconfined --cgroupns host \
      --tmpfs /run --tmpfs /run/lock -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
      -e container=docker "$image" /lib/systemd/systemd >/dev/null
    for _ in $(seq 1 60); do
      state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
      [[ $state == running || $state == degraded ]] && break
      sleep 1
    done
    echo "sim-node: $name up (systemd: ${state:-unknown})"
    ;;
  down) docker rm -f "$name" >/dev/null 2>&1 || true; echo "sim-node: $name removed" ;;
  status) docker inspect -f '{{.Name}} running={{.State.Running}}' "$name" ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
