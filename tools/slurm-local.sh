#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, to try (and test) the SLURM launcher
# presets without a cluster.
#
#   tools/slurm-local.sh start    install if missing, configure, start, wait until idle
#   tools/slurm-local.sh stop     stop slurmd, slurmctld (and munged if we started it)
#   tools/slurm-local.sh status   sinfo/squeue; exit status 0 only when the node is up
#
# start/stop need Debian or Ubuntu and root: they apt-get install Debian's slurmctld,
# slurmd, slurm-client and munge, write /etc/slurm/slurm.conf for this host (its hostname,
# `nproc` CPUs, MemTotal minus headroom) and run the daemons directly, without systemd
# and without cgroups (proctrack/linuxproc, task/none), so it also works in containers.
# No accounting database: `sacct` only says accounting is disabled, which is harmless.
# Jobs can be requeued (`scontrol requeue`, submitit's preemption path).
#
# Environment knobs: SLURM_LOCAL_TIMEOUT (seconds to wait for the node, default 60),
# SLURM_LOCAL_CPUS (CPUs to advertise, default `nproc`), SLURM_LOCAL_MEM_MB (memory to
# advertise), SLURM_LOCAL_PARTITION (default "local"), SLURM_LOCAL_FORCE=1 (overwrite a
# slurm.conf this script did not write).
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
# The first line of every file it writes; recognised wherever the script lives in the checkout.
MARKER="# written by tpo-bench slurm-local.sh"
OURS="^# written by tpo-bench (.*/)?slurm-local\.sh"
STATE=/var/lib/slurm-local
LOGS=/var/log/slurm-local
RUN=/run/slurm-local
CTLD_PID=$RUN/slurmctld.pid
SLURMD_PID=$RUN/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
MUNGE_OURS=$RUN/started-munged
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
PARTITION=${SLURM_LOCAL_PARTITION:-local}
NODE=$(hostname -s 2>/dev/null || hostname)
OS_RELEASE=${SLURM_LOCAL_OS_RELEASE:-/etc/os-release}  # (overridable for the tests)

say() { echo "slurm-local: $*"; }
die() { echo "slurm-local: error: $*" >&2; exit 1; }

usage() {
    echo "usage: $0 start|stop|status" >&2
    exit 2
}

require_root_debian() {
    local id="" like=""
    if [ -r "$OS_RELEASE" ]; then
        # shellcheck source=/dev/null
        id=$(. "$OS_RELEASE" && echo "${ID:-}")
        # shellcheck source=/dev/null
        like=$(. "$OS_RELEASE" && echo "${ID_LIKE:-}")
    fi
    case " $id $like " in
        *" debian "*|*" ubuntu "*) ;;
        *) die "this script supports Debian/Ubuntu only (found '${id:-unknown}'); on other systems install slurmctld, slurmd, the SLURM client tools and munge with your package manager and write slurm.conf yourself (see README, 'Running on SLURM')" ;;
    esac
    [ "$(id -u)" = 0 ] || die "start/stop must run as root (apt-get install and the SLURM daemons); try: sudo $0 $1"
}

# --------------------------------------------------------------------- helpers

alive() {  # alive PIDFILE: the process named in PIDFILE is running
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE
    local pid
    if ! alive "$2"; then rm -f "$2"; return 0; fi
    pid=$(cat "$2")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "$1 (pid $pid) did not stop on TERM; sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$2"
    say "stopped $1"
}

node_state() {  # the node's state as sinfo prints it (idle, mix, alloc, down*, drain, ...)
    timeout 10 sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n 1
}

install_packages() {
    local missing=() cmd policy_rc_d=""
    for cmd in slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client munged:munge; do
        command -v "${cmd%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${cmd%%:*}" ] || missing+=("${cmd#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} (apt-get)"
    # Keep the packages' init scripts from starting daemons during install: we start them
    # ourselves, with our configuration (policy-rc.d exit 101 = "action not allowed").
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_rc_d=yes
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            slurmctld slurmd slurm-client munge
    } || rc=$?
    [ -n "$policy_rc_d" ] && rm -f /usr/sbin/policy-rc.d
    [ $rc -eq 0 ] || die "apt-get install of slurmctld slurmd slurm-client munge failed (exit $rc)"
}

write_conf() {
    local cpus mem_kb mem_mb headroom tmp
    cpus=${SLURM_LOCAL_CPUS:-$(nproc)}
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    mem_mb=$((mem_kb / 1024))
    # Leave 10 % (at least 512 MB, at most 4 GB) to the OS and the daemons.
    headroom=$((mem_mb / 10))
    [ $headroom -lt 512 ] && headroom=512
    [ $headroom -gt 4096 ] && headroom=4096
    mem_mb=${SLURM_LOCAL_MEM_MB:-$((mem_mb - headroom))}
    [ "$mem_mb" -ge 256 ] || die "too little memory for a SLURM node (${mem_mb} MB usable)"

    if [ -e "$CONF" ] && ! grep -qE "$OURS" "$CONF" && [ "${SLURM_LOCAL_FORCE:-0}" != 1 ]; then
        die "$CONF exists and was not written by this script; refusing to overwrite it (SLURM_LOCAL_FORCE=1 overwrites)"
    fi
    mkdir -p "$CONF_DIR"
    tmp=$(mktemp "$CONF_DIR/.slurm.conf.XXXXXX")
    cat > "$tmp" <<EOF
$MARKER
# A one-node cluster on $NODE for trying tpo-bench's SLURM presets. No systemd, no
# cgroups, no accounting; every daemon runs as root.
ClusterName=tpo-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# The advertised CPUs/memory are taken as given (SLURM_LOCAL_CPUS may exceed nproc).
SlurmdParameters=config_overrides
# Jobs may be requeued (scontrol requeue; submitit's preemption/timeout handler).
JobRequeue=1
# A node that was down comes back by itself once slurmd registers.
ReturnToService=2
SlurmctldTimeout=60
SlurmdTimeout=60
MessageTimeout=20
InactiveLimit=0
MinJobAge=300
# submitit ignores SIGTERM and waits for its USR signal or SIGKILL: keep the gap short.
KillWait=5
Waittime=0
MailProg=/bin/true
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    chmod 644 "$tmp"
    if [ -e "$CONF" ] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
        CONF_CHANGED=0
        return 0
    fi
    mv -f "$tmp" "$CONF"
    CONF_CHANGED=1
    say "wrote $CONF ($NODE: $cpus CPUs, $mem_mb MB)"
}

start_munge() {
    local key=/etc/munge/munge.key
    mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge "$RUN"
    if [ ! -s $key ]; then
        say "creating the munge key $key"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile=$key --force
        else
            dd if=/dev/urandom of=$key bs=1024 count=1 status=none
        fi
    fi
    chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
    chmod 0700 /etc/munge /var/log/munge
    chmod 0400 $key
    chmod 0755 /run/munge
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0  # a munged is already answering (ours or the system's)
    fi
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    say "starting munged"
    if command -v runuser >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
    else
        su -s /bin/sh munge -c /usr/sbin/munged
    fi
    touch "$MUNGE_OURS"
    for _ in $(seq 1 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "munged did not come up (see /var/log/munge/munged.log)"
}

start_daemons() {
    mkdir -p "$STATE/ctld" "$STATE/d" "$LOGS" "$RUN"
    if ! alive "$CTLD_PID"; then
        say "starting slurmctld (log: $LOGS/slurmctld.log)"
        /usr/sbin/slurmctld || die "slurmctld failed to start; see $LOGS/slurmctld.log"
    fi
    for _ in $(seq 1 50); do
        timeout 5 scontrol ping 2>/dev/null | grep -q "is UP" && break
        sleep 0.2
    done
    if ! alive "$SLURMD_PID"; then
        say "starting slurmd (log: $LOGS/slurmd.log)"
        /usr/sbin/slurmd || die "slurmd failed to start; see $LOGS/slurmd.log"
    fi
}

wait_idle() {
    local deadline=$((SECONDS + TIMEOUT)) state="" resumed=""
    while [ $SECONDS -lt $deadline ]; do
        state=$(node_state || true)
        case "$state" in
            idle|mixed|allocated|completing)
                say "node $NODE is $state; partition '$PARTITION' is ready"
                return 0 ;;
            down*|drain*|fail*)
                # left over from an earlier run (e.g. "Node unexpectedly rebooted")
                if [ -z "$resumed" ] && timeout 10 scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1; then
                    say "node was '$state'; resumed it"
                fi
                resumed=yes ;;
        esac
        sleep 1
    done
    echo "slurm-local: error: node $NODE not idle after ${TIMEOUT}s (state: '${state:-unknown}')" >&2
    timeout 10 sinfo -N -l >&2 2>&1 || true
    timeout 10 scontrol show node "$NODE" 2>&1 | grep -iE "state|reason" >&2 || true
    echo "--- tail of $LOGS/slurmctld.log" >&2; tail -n 20 "$LOGS/slurmctld.log" >&2 2>/dev/null || true
    echo "--- tail of $LOGS/slurmd.log" >&2; tail -n 20 "$LOGS/slurmd.log" >&2 2>/dev/null || true
    exit 1
}

# --------------------------------------------------------------------- commands

cmd_start() {
    require_root_debian start
    install_packages
    write_conf
    start_munge
    if [ "$CONF_CHANGED" = 1 ] && { alive "$CTLD_PID" || alive "$SLURMD_PID"; }; then
        say "configuration changed; restarting the SLURM daemons"
        stop_pidfile slurmd "$SLURMD_PID"
        stop_pidfile slurmctld "$CTLD_PID"
    fi
    start_daemons
    wait_idle
}

cmd_stop() {
    require_root_debian stop
    stop_pidfile slurmd "$SLURMD_PID"
    stop_pidfile slurmctld "$CTLD_PID"
    if [ -e "$MUNGE_OURS" ]; then
        stop_pidfile munged "$MUNGE_PID"
        rm -f "$MUNGE_OURS"
    fi
}

cmd_status() {
    if ! command -v sinfo >/dev/null 2>&1; then
        echo "slurm-local: SLURM client tools are not installed (no sinfo); run: $0 start" >&2
        exit 1
    fi
    if grep -qE "$OURS" "$CONF" 2>/dev/null && ! { [ -s "$CTLD_PID" ] && [ -d "/proc/$(cat "$CTLD_PID")" ]; }; then
        echo "slurm-local: slurmctld is not running; the cluster is not up (run: $0 start)" >&2
        exit 1
    fi
    local states
    if ! states=$(timeout 8 sinfo -h -N -o '%N %T' 2>&1); then
        echo "slurm-local: sinfo cannot reach slurmctld; the cluster is not up (run: $0 start)" >&2
        [ -n "$states" ] && echo "$states" >&2
        exit 1
    fi
    timeout 8 sinfo || true
    echo
    timeout 8 squeue || true
    echo
    # Up: this script's node (or, on another cluster, any node) can take jobs.
    local mine any
    mine=$(echo "$states" | awk -v n="$NODE" '$1 == n {print $2; exit}')
    any=$(echo "$states" | awk '{print $2}' | grep -xE '(idle|mixed|allocated|completing)' | head -n 1 || true)
    case "${mine:-$any}" in  # ("idle*" etc.: not responding)
        idle|mixed|allocated|completing)
            say "up: node ${mine:+$NODE is }${mine:-of another cluster is $any}"
            return 0 ;;
    esac
    echo "slurm-local: not up: node $NODE is '${mine:-absent}'" >&2
    exit 1
}

[ $# -eq 1 ] || usage
case "$1" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) usage ;;
esac
