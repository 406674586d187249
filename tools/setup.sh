#!/usr/bin/env bash
# Prepare this machine for Tenks development, tests and CI.
#
# Debian 12, run as root, no systemd as PID 1 (so nothing starts services for
# us). Idempotent: every step checks first and does nothing when its work is
# already done, printing one line per step. A second run takes well under a
# second.
#
# Steps:
#   packages  install missing Debian packages (DEB_PACKAGES below)
#   kvm       make /dev/kvm usable by libvirt's QEMU user (else every domain
#             define costs ~1 minute of capability re-probing)
#   virtlogd  start it if not running
#   libvirtd  start it if not running, wait until qemu:///system answers
#   rabbitmq  start it on 127.0.0.1:5672 only, if not running
#   openvswitch  start ovsdb-server and ovs-vswitchd (ovs-ctl) if not
#             running, for bridge_type openvswitch
#   postgresql  start PostgreSQL's cluster 15/main on 127.0.0.1:5432 only,
#             with a role tenks (password tenks) that may create databases
#   mariadb   start MariaDB on 127.0.0.1:3306 only, with a user tenks
#             (password tenks) that owns every database named tenks_*
#   redis     start Redis on 127.0.0.1:6379 only, with an append-only file
#             in /var/lib/tenks-redis (the jobboard, locks and membership of
#             several conductors)
#   zookeeper start ZooKeeper (standalone) on 127.0.0.1:2181 only, data in
#             /var/lib/tenks-zookeeper (the same on the second backend)
#   venv      <repo>/.venv with `pip install -e .[test]`, redone only when
#             setup.cfg / setup.py / pyproject.toml or the venv's Python change
#   ovs_json  the venv's ovs library uses Debian's compiled JSON parser
#             (python3-openvswitch's), when built for the venv's Python
#   virtualpdu  <repo>/.venv-virtualpdu: VirtualPDU, which needs older
#             pysnmp and pyasn1 than Tenks ([hostagent] virtualpdu_python's
#             default), redone only when its requirements change
#   ironic_snmp  <repo>/.venv-ironic-snmp: Ironic 29 (2025.1), the last
#             with the snmp hardware type, for its functional test (the
#             test services' newer Ironic has none), pinned by
#             tools/ironic-snmp-constraints.txt; redone when that changes
#   openstack <repo>/.venv-openstack: Ironic, Placement and Nova, and
#             <repo>/.venv-glance: Glance, for the functional tests
#             (tools/openstack_services.py install --full-nova)
#
# With step names as arguments (e.g. `setup.sh postgresql mariadb`), only
# those run.
#
# Environment:
#   TENKS_PYTHON          interpreter for the venv (default: the
#                         distribution's /usr/bin/python3 when it is 3.11 or
#                         newer, else python3 from PATH)
#   TENKS_EXTRA_PACKAGES  extra Debian packages to install (space separated)
#   TENKS_LIBVIRT_TIMEOUT seconds to wait for libvirtd to answer (default: 60)
set -euo pipefail

SCRIPT=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SCRIPT")/.." && pwd -P)

if [[ $EUID -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "setup.sh: must run as root (and sudo is not installed)" >&2
        exit 1
    fi
    # Keep PATH so that `python3` stays the same interpreter under sudo.
    exec sudo env "PATH=$PATH" bash "$SCRIPT" "$@"
fi

# Debian packages the project needs. Add to this list (one per line) as the
# project grows, e.g. rabbitmq-server, openvswitch-switch, redis-server.
DEB_PACKAGES=(
    libvirt-daemon-system   # libvirtd, virtlogd, virsh
    qemu-system-x86         # the VMs (TCG, or KVM where usable)
    qemu-utils              # qemu-img, for volumes
    lvm2                    # logical (LVM) storage pools
    ovmf                    # UEFI and secure boot firmware for the VMs
    libvirt-dev             # to build libvirt-python
    pkg-config              # to build libvirt-python
    gcc                     # to build libvirt-python
    ipmitool                # to talk to the virtualbmc endpoints
    snmp                    # snmpget/snmpset: the VirtualPDUs' outlets
    iproute2                # bridges, veth pairs
    rabbitmq-server         # the message bus of the distributed mode
    openvswitch-switch      # bridge_type openvswitch
    postgresql              # shared state databases ([database] connection)
    mariadb-server          # the same on MariaDB
    redis-server            # several conductors' jobboard, locks, membership
    zookeeper               # the same on ZooKeeper (the second backend)
    default-jre-headless    # ZooKeeper's Java
    graphviz                # dot: the flow graphs of the documentation
    xorriso                 # the virtual media tests build a bootable ISO
    isolinux                # ... with isolinux
    syslinux-common         # ... and its ldlinux.c32
)

# Debian and Ubuntu build their Python with PGO and LTO; a source build
# found first on PATH (pyenv's default) has neither, and runs Tenks' commands
# 10-25 % slower and CPU-bound code more than twice as slow.
default_python() {
    if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c \
            'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo /usr/bin/python3
    else
        echo python3
    fi
}

PYTHON=${TENKS_PYTHON:-$(default_python)}
VENV=$REPO/.venv
STAMP=$VENV/.tenks-setup-stamp
LIBVIRT_URI=qemu:///system
LIBVIRT_TIMEOUT=${TENKS_LIBVIRT_TIMEOUT:-60}

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

LOG=$(mktemp -t tenks-setup.XXXXXX)
trap 'rm -f "$LOG"' EXIT

say() { printf '%s\n' "$*"; }

die() {
    printf 'setup.sh: ERROR: %s\n' "$*" >&2
    exit 1
}

# Run a command with its output in $LOG; on failure show the log and stop.
run_logged() {
    if ! "$@" >"$LOG" 2>&1; then
        printf 'setup.sh: ERROR: command failed: %s\n' "$*" >&2
        tail -n 40 "$LOG" >&2
        exit 1
    fi
}

# Is a process with this (kernel, <= 15 characters) name running?
proc_running() {
    grep -qsx -- "$1" /proc/[0-9]*/comm
}

# Start a daemon with its standard streams and our lock detached, so that it
# holds neither the caller's pipes (CI waits for EOF on them) nor the lock.
start_daemon() {
    "$@" </dev/null >/dev/null 2>&1 9>&-
}

step_packages() {
    local pkgs=("${DEB_PACKAGES[@]}")
    # shellcheck disable=SC2206
    [[ -n ${TENKS_EXTRA_PACKAGES:-} ]] && pkgs+=(${TENKS_EXTRA_PACKAGES})

    # Debian's own Python needs extra packages for venv and to build C
    # extensions; pyenv/self-built ones have both.
    local need
    need=$("$PYTHON" - <<'EOF' 2>/dev/null || true
import os, sysconfig
need = []
try:
    import ensurepip  # noqa: F401
except ImportError:
    need.append("python3-venv")
if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
    need.append("python3-dev")
print(" ".join(need))
EOF
)
    [[ -n $need ]] || command -v "$PYTHON" >/dev/null 2>&1 \
        || need="python3 python3-venv python3-dev"
    # shellcheck disable=SC2206
    pkgs+=($need)

    local missing=() p
    local installed
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null \
        | awk '$NF == "installed" {print $1}' || true)
    for p in "${pkgs[@]}"; do
        grep -qx -- "$p" <<<"$installed" || missing+=("$p")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        say "packages: all ${#pkgs[@]} installed"
        return
    fi
    say "packages: installing ${missing[*]}"
    local t0=$SECONDS
    run_logged apt-get -o DPkg::Lock::Timeout=300 -q update
    run_logged apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 "${missing[@]}"
    say "packages: installed ${#missing[@]} in $((SECONDS - t0)) s"
}

step_kvm() {
    if [[ ! -e /dev/kvm ]]; then
        say "kvm: no /dev/kvm, QEMU will use TCG only"
        return
    fi
    if getent group kvm >/dev/null; then
        if [[ $(stat -c '%G %a' /dev/kvm) == "kvm 660" ]]; then
            say "kvm: /dev/kvm already usable by group kvm"
            return
        fi
        chgrp kvm /dev/kvm
        chmod 0660 /dev/kvm
        say "kvm: /dev/kvm set to group kvm, mode 0660"
    else
        # No kvm group: run QEMU as root instead (the other fix for the
        # slow-define trap). Must be in place before libvirtd starts.
        local conf=/etc/libvirt/qemu.conf
        if grep -qx 'user = "root"' "$conf" && grep -qx 'group = "root"' "$conf"; then
            say "kvm: no kvm group; qemu.conf already runs QEMU as root"
            return
        fi
        sed -i -e '/^#\?user = /d' -e '/^#\?group = /d' "$conf"
        printf 'user = "root"\ngroup = "root"\n' >>"$conf"
        say "kvm: no kvm group; set qemu.conf to run QEMU as root"
        if proc_running libvirtd; then
            say "kvm: WARNING: libvirtd was already running; restart it to apply qemu.conf"
        fi
        return
    fi
    # A libvirtd started before the fix holds QEMU capabilities it now finds
    # stale: have it re-probe once here rather than in the first define.
    if proc_running libvirtd; then
        local t0=$SECONDS
        virsh -c "$LIBVIRT_URI" domcapabilities --virttype qemu >/dev/null 2>&1 || true
        say "kvm: libvirtd was already running; re-probed QEMU in $((SECONDS - t0)) s"
    fi
}

step_virtlogd() {
    if proc_running virtlogd; then
        say "virtlogd: already running"
        return
    fi
    start_daemon virtlogd -d || die "virtlogd -d failed"
    say "virtlogd: started"
}

step_libvirtd() {
    local started=""
    if proc_running libvirtd; then
        started="already running"
    else
        start_daemon libvirtd -d --pid-file /run/libvirtd.pid \
            || die "libvirtd -d --pid-file /run/libvirtd.pid failed"
        started="started"
    fi
    local t0=$SECONDS deadline=$((SECONDS + LIBVIRT_TIMEOUT)) out
    until out=$(virsh -c "$LIBVIRT_URI" version 2>&1 9>&-); do
        if ((SECONDS >= deadline)); then
            printf '%s\n' "$out" >&2
            proc_running libvirtd || echo "(no libvirtd process is running)" >&2
            die "libvirtd did not answer on $LIBVIRT_URI within $LIBVIRT_TIMEOUT s"
        fi
        sleep 0.2
    done
    local hv
    hv=$(sed -n 's/^Running hypervisor: //p' <<<"$out")
    if [[ $started == started ]]; then
        say "libvirtd: started, answering in $((SECONDS - t0)) s (${hv:-?})"
    else
        say "libvirtd: already running (${hv:-?})"
    fi
}

step_rabbitmq() {
    local env_conf=/etc/rabbitmq/rabbitmq-env.conf
    local want
    want=$(printf '%s\n' 'NODENAME=rabbit@localhost' \
        'NODE_IP_ADDRESS=127.0.0.1' \
        'SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"')
    # Loopback only: the broker, its node name and Erlang distribution.
    if [[ ! -f $env_conf || $(<"$env_conf") != "$want" ]]; then
        printf '%s\n' "$want" >"$env_conf"
    fi
    export ERL_EPMD_ADDRESS=127.0.0.1
    if (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
        say "rabbitmq: already running"
        return
    fi
    local t0=$SECONDS deadline=$((SECONDS + 120))
    # A server that stays in the foreground: detach it entirely, so that
    # no shell of ours waits for it while holding the set-up lock.
    (exec setsid rabbitmq-server </dev/null >/dev/null 2>&1 9>&-) &
    until rabbitmqctl -n rabbit@localhost -q await_startup >"$LOG" 2>&1 9>&-; do
        if ((SECONDS >= deadline)); then
            tail -n 20 "$LOG" >&2
            die "rabbitmq did not start within 120 s (see /var/log/rabbitmq)"
        fi
        sleep 0.5
    done
    say "rabbitmq: started on 127.0.0.1:5672 in $((SECONDS - t0)) s"
}

step_openvswitch() {
    if proc_running ovsdb-server && proc_running ovs-vswitchd; then
        say "openvswitch: already running"
        return
    fi
    # No systemd: ovs-ctl starts both daemons (detached, with monitors).
    # The kernel may have no openvswitch module; Tenks' bridges use the
    # userspace datapath then, which needs none.
    local t0=$SECONDS
    if ! /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random \
            --no-mlockall </dev/null >"$LOG" 2>&1 9>&-; then
        tail -n 20 "$LOG" >&2
        die "ovs-ctl start failed"
    fi
    proc_running ovs-vswitchd || die "ovs-vswitchd did not start (see /var/log/openvswitch)"
    say "openvswitch: started in $((SECONDS - t0)) s"
}

# Is something listening on this loopback TCP port?
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Wait until a command succeeds (its output in $LOG), or die naming $1.
wait_for() {
    local what=$1 timeout=$2 deadline=$((SECONDS + $2))
    shift 2
    until "$@" >"$LOG" 2>&1 9>&-; do
        if ((SECONDS >= deadline)); then
            tail -n 20 "$LOG" >&2
            die "$what did not answer within $timeout s"
        fi
        sleep 0.2
    done
}

# " in N s" after a daemon that was (re)started at $2 ($SECONDS).
took() {
    [[ $1 == "already running" ]] || echo " in $((SECONDS - $2)) s"
}

# The test databases' account, on both servers: loopback only, so a
# password in the clear here opens nothing to anyone else.
DB_USER=tenks
DB_PASSWORD=tenks

step_postgresql() {
    local version name status datadir logfile
    read -r version name _ status _ datadir logfile < <(pg_lsclusters -h | head -n1)
    [[ -n ${name:-} ]] || die "no PostgreSQL cluster (pg_lsclusters lists none)"
    local etc=/etc/postgresql/$version/$name
    local want="listen_addresses = '127.0.0.1'"
    local changed=""
    if [[ ! -f $etc/conf.d/tenks.conf || $(<"$etc/conf.d/tenks.conf") != "$want" ]]; then
        printf '%s\n' "$want" >"$etc/conf.d/tenks.conf"
        changed=1
    fi
    # pg_ctl itself: pg_ctlcluster takes 2 s more to start the same server.
    local action="" state="already running"
    if [[ $status != online ]]; then
        action=start state=started
    elif [[ -n $changed ]]; then
        action="restart -m fast" state="restarted (listen_addresses)"
    fi
    local t0=$SECONDS
    if [[ -n $action ]]; then
        install -d -o postgres -g postgres -m 2775 /run/postgresql
        # shellcheck disable=SC2086
        start_daemon runuser -u postgres -- \
            "/usr/lib/postgresql/$version/bin/pg_ctl" -D "$datadir" -l "$logfile" \
            -o "-c config_file=$etc/postgresql.conf" -w -s $action \
            || die "PostgreSQL $version/$name did not start (see $logfile)"
    fi
    wait_for "PostgreSQL on 127.0.0.1:5432" 60 port_open 5432
    # A role that may create (and so drop) a database per test.
    run_logged runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -c "
        DO \$\$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
                CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASSWORD';
            END IF;
        END \$\$;"
    say "postgresql: $version/$name $state on 127.0.0.1:5432$(took "$state" "$t0")"
}

step_mariadb() {
    local conf=/etc/mysql/mariadb.conf.d/99-tenks.cnf
    local want
    want=$(printf '%s\n' '[mysqld]' 'bind-address = 127.0.0.1')
    local changed=""
    if [[ ! -f $conf || $(<"$conf") != "$want" ]]; then
        printf '%s\n' "$want" >"$conf"
        changed=1
    fi
    local t0=$SECONDS state="already running"
    if [[ -n $changed ]] && port_open 3306; then
        run_logged mariadb-admin shutdown
        wait_for "MariaDB's shutdown" 60 bash -c '! (exec 3<>/dev/tcp/127.0.0.1/3306)'
        state="restarted (bind-address)"
    fi
    if ! port_open 3306; then
        install -d -o mysql -g mysql /run/mysqld
        # mysqld_safe stays in the foreground (and restarts a crashed
        # server): detach it entirely.
        (exec setsid mysqld_safe </dev/null >/dev/null 2>&1 9>&-) &
        [[ $state == "already running" ]] && state="started"
    fi
    wait_for "MariaDB on 127.0.0.1:3306" 60 port_open 3306
    # Root logs in over the socket (unix_socket authentication).
    run_logged mariadb -e "
        CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
        GRANT ALL PRIVILEGES ON \`${DB_USER}\\_%\`.* TO '$DB_USER'@'127.0.0.1';"
    say "mariadb: $state on 127.0.0.1:3306$(took "$state" "$t0")"
}

# Is nothing listening on this loopback TCP port?
port_closed() {
    ! port_open "$1"
}

# Write $2 (and a newline) to file $1 unless it holds that already; succeed
# only when it changed.
write_if_changed() {
    [[ -f $1 && $(<"$1") == "$2" ]] && return 1
    printf '%s\n' "$2" >"$1"
}

# Redis and ZooKeeper run with configuration, data and log directories of
# their own, not the packages' defaults.
REDIS_CONF=/etc/tenks-redis/redis.conf
REDIS_DIR=/var/lib/tenks-redis
REDIS_LOG=/var/log/tenks-redis/redis.log

redis_cli() {
    redis-cli -h 127.0.0.1 -p 6379 "$@" 9>&-
}

redis_ping() {
    [[ $(redis_cli ping 2>&1) == PONG ]]
}

step_redis() {
    local want changed=""
    # The append-only file alone keeps the data (fsync'd every second): a
    # jobboard's jobs survive a restart, even a kill -9.
    want=$(printf '%s\n' 'bind 127.0.0.1' 'port 6379' 'protected-mode yes' \
        'daemonize yes' 'pidfile /run/tenks-redis/redis.pid' \
        "logfile $REDIS_LOG" "dir $REDIS_DIR" \
        'appendonly yes' 'appendfsync everysec' 'save ""')
    install -d "${REDIS_CONF%/*}"
    write_if_changed "$REDIS_CONF" "$want" && changed=1
    local t0=$SECONDS state="already running"
    # A server of another configuration (or the package's) gives way.
    if port_open 6379 && [[ -n $changed || \
            $(redis_cli config get dir 2>&1 | tail -n1) != "$REDIS_DIR" ]]; then
        redis_cli shutdown >/dev/null 2>&1 || true
        wait_for "Redis's shutdown" 60 port_closed 6379
        state="restarted (configuration)"
    fi
    if port_closed 6379; then
        install -d -o redis -g redis "$REDIS_DIR" "${REDIS_LOG%/*}" /run/tenks-redis
        start_daemon runuser -u redis -- redis-server "$REDIS_CONF" \
            || die "redis-server $REDIS_CONF did not start (see $REDIS_LOG)"
        [[ $state == "already running" ]] && state="started"
    fi
    wait_for "Redis on 127.0.0.1:6379" 60 redis_ping
    say "redis: $state on 127.0.0.1:6379$(took "$state" "$t0")"
}

ZK_CONF=/etc/tenks-zookeeper
ZK_DIR=/var/lib/tenks-zookeeper
ZK_LOG=/var/log/tenks-zookeeper
ZK_PIDFILE=/run/tenks-zookeeper.pid
# Debian's zookeeper.jar names its other jars; log4j writes its log.
ZK_CLASSPATH=$ZK_CONF:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar

zk_ok() {
    [[ $( (exec 3<>/dev/tcp/127.0.0.1/2181 && printf ruok >&3 \
        && timeout 5 cat <&3) 2>/dev/null) == imok ]]
}

# The pid of the ZooKeeper this step started, if it still runs.
zk_pid() {
    local pid
    pid=$(cat "$ZK_PIDFILE" 2>/dev/null) \
        && grep -qsF "$ZK_CONF/zoo.cfg" "/proc/$pid/cmdline" && echo "$pid"
}

step_zookeeper() {
    local changed=""
    install -d "$ZK_CONF"
    # Standalone; envi among the four-letter words: kazoo asks it for the
    # server's version. No admin server (it would take port 8080).
    write_if_changed "$ZK_CONF/zoo.cfg" "$(printf '%s\n' 'tickTime=2000' \
        "dataDir=$ZK_DIR" 'clientPort=2181' 'clientPortAddress=127.0.0.1' \
        '4lw.commands.whitelist=ruok,srvr,stat,envi' \
        'admin.enableServer=false' \
        'autopurge.snapRetainCount=3' 'autopurge.purgeInterval=1')" \
        && changed=1
    write_if_changed "$ZK_CONF/log4j.properties" "$(printf '%s\n' \
        'log4j.rootLogger=INFO, FILE' \
        'log4j.appender.FILE=org.apache.log4j.RollingFileAppender' \
        "log4j.appender.FILE.File=$ZK_LOG/zookeeper.log" \
        'log4j.appender.FILE.MaxFileSize=10MB' \
        'log4j.appender.FILE.MaxBackupIndex=2' \
        'log4j.appender.FILE.layout=org.apache.log4j.PatternLayout' \
        'log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n')" \
        && changed=1
    local t0=$SECONDS state="already running" pid
    if [[ -n $changed ]] && port_open 2181; then
        pid=$(zk_pid) || die "a ZooKeeper not started by this step answers on 127.0.0.1:2181"
        kill "$pid"
        wait_for "ZooKeeper's shutdown" 60 port_closed 2181
        state="restarted (configuration)"
    fi
    # ruok first: a bare connect makes ZooKeeper log a stack trace.
    if ! zk_ok && port_closed 2181; then
        install -d -o zookeeper -g zookeeper "$ZK_DIR" "$ZK_LOG"
        # Stays in the foreground: detach it entirely (see rabbitmq).
        (exec setsid setpriv --reuid zookeeper --regid zookeeper --init-groups \
            java -Xmx512m -cp "$ZK_CLASSPATH" \
            org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_CONF/zoo.cfg" \
            </dev/null >>"$ZK_LOG/zookeeper.out" 2>&1 9>&-) &
        # $! is java itself: setsid and setpriv each exec the next.
        echo $! >"$ZK_PIDFILE"
        [[ $state == "already running" ]] && state="started"
    fi
    wait_for "ZooKeeper on 127.0.0.1:2181 (see $ZK_LOG)" 120 zk_ok
    say "zookeeper: $state on 127.0.0.1:2181$(took "$state" "$t0")"
}

venv_fingerprint() {
    local f
    for f in setup.cfg setup.py pyproject.toml; do
        [[ -e $REPO/$f ]] && cat "$REPO/$f"
    done
    cat "$VENV/pyvenv.cfg"
}

# The real interpreter behind a command or a venv's python.
base_python() {
    "$1" -c 'import os, sys; print(os.path.realpath(sys._base_executable))' \
        2>/dev/null
}

step_venv() {
    local created="" base
    base=$(base_python "$VENV/bin/python" || true)
    if [[ -n $base && $base == "$(base_python "$PYTHON")" ]]; then
        :
    else
        if [[ -n $base ]]; then
            say "venv: $VENV runs on $base, not $PYTHON: recreating"
        elif [[ -e $VENV ]]; then
            say "venv: $VENV is broken, recreating"
        fi
        command -v "$PYTHON" >/dev/null 2>&1 || die "no '$PYTHON' on PATH"
        run_logged "$PYTHON" -m venv --clear "$VENV"
        created=1
    fi
    local want
    want=$(venv_fingerprint | sha256sum | cut -d' ' -f1)
    if [[ -z $created && -f $STAMP && $(<"$STAMP") == "$want" ]]; then
        say "venv: up to date ($VENV)"
        return
    fi
    say "venv: ${created:+created, }installing tenks[test] (pip install -e)"
    local t0=$SECONDS
    rm -f "$STAMP"
    run_logged "$VENV/bin/python" -m pip install -q -e "${REPO}[test]"
    # stevedore caches the entry points it finds, per sys.path, and does
    # not always see an editable install's new ones (a scheduler filter
    # added to setup.cfg, say): start afresh.
    rm -rf "${XDG_CACHE_HOME:-$HOME/.cache}/python-entrypoints"
    echo "$want" >"$STAMP"
    say "venv: installed in $((SECONDS - t0)) s"
}

# Debian's Open vSwitch Python library (python3-openvswitch, which
# openvswitch-switch depends on) comes with its compiled JSON parser.
OVS_SYSTEM_PACKAGE=/usr/lib/python3/dist-packages/ovs

step_ovs_json() {
    # pip's ovs parses OVSDB's JSON in pure Python: it builds its C parser
    # only against libopenvswitch's headers, which Debian does not ship.
    # The first read of a thousand nodes' ports then took a third of a
    # second of a re-run. Debian's parser, built for the system Python,
    # is what the venv's ovs loads when the venv runs on that Python.
    local dir suffix ext
    dir=$("$VENV/bin/python" -c 'import os, ovs; print(os.path.dirname(ovs.__file__))') \
        || die "the venv has no ovs package (pip install failed?)"
    suffix=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    ext=$OVS_SYSTEM_PACKAGE/_json$suffix
    local link=$dir/_json$suffix
    if [[ -e $link && ! -L $link ]]; then
        say "ovs_json: the venv's ovs has its own ($link)"
        return
    fi
    if [[ ! -e $ext ]]; then
        [[ ! -L $link ]] || rm -f "$link"   # ours, from an earlier run
        say "ovs_json: none built for this Python in $OVS_SYSTEM_PACKAGE (ovs parses JSON in Python)"
        return
    fi
    [[ $(readlink "$link" || true) == "$ext" ]] || ln -sfn "$ext" "$link"
    if "$VENV/bin/python" -c 'import sys, ovs.json; sys.exit(ovs.json.PARSER != ovs.json.PARSER_C)' 2>/dev/null; then
        say "ovs_json: the venv's ovs uses $ext"
    else
        rm -f "$link"
        say "ovs_json: $ext does not load here (ovs parses JSON in Python)"
    fi
}

VIRTUALPDU_VENV=$REPO/.venv-virtualpdu
VIRTUALPDU_REQUIREMENTS=(virtualpdu==2.2.0 'pysnmp-lextudio<6' 'pyasn1<0.6'
    pbr setuptools)

step_virtualpdu() {
    local stamp=$VIRTUALPDU_VENV/.tenks-setup-stamp want
    want="${VIRTUALPDU_REQUIREMENTS[*]}"
    if [[ -x $VIRTUALPDU_VENV/bin/python && $(cat "$stamp" 2>/dev/null) == "$want" ]]; then
        say "virtualpdu: up to date ($VIRTUALPDU_VENV)"
        return
    fi
    say "virtualpdu: installing ${want} into $VIRTUALPDU_VENV"
    run_logged "$PYTHON" -m venv --clear "$VIRTUALPDU_VENV"
    run_logged "$VIRTUALPDU_VENV/bin/python" -m pip install -q \
        "${VIRTUALPDU_REQUIREMENTS[@]}"
    echo "$want" >"$stamp"
}

IRONIC_SNMP_VENV=$REPO/.venv-ironic-snmp
IRONIC_SNMP_CONSTRAINTS=$REPO/tools/ironic-snmp-constraints.txt
IRONIC_SNMP_REQUIREMENTS=(ironic==29.0.0 pysnmp-lextudio pyasn1)

step_ironic_snmp() {
    local stamp=$IRONIC_SNMP_VENV/.tenks-setup-stamp want
    want="${IRONIC_SNMP_REQUIREMENTS[*]} $(sha256sum <"$IRONIC_SNMP_CONSTRAINTS")"
    if [[ -x $IRONIC_SNMP_VENV/bin/ironic && $(cat "$stamp" 2>/dev/null) == "$want" ]]; then
        say "ironic_snmp: up to date ($IRONIC_SNMP_VENV)"
        return
    fi
    say "ironic_snmp: installing ${IRONIC_SNMP_REQUIREMENTS[*]} into $IRONIC_SNMP_VENV"
    local t0=$SECONDS
    run_logged "$PYTHON" -m venv --clear "$IRONIC_SNMP_VENV"
    run_logged "$IRONIC_SNMP_VENV/bin/python" -m pip install -q \
        -c "$IRONIC_SNMP_CONSTRAINTS" "${IRONIC_SNMP_REQUIREMENTS[@]}"
    echo "$want" >"$stamp"
    say "ironic_snmp: installed in $((SECONDS - t0)) s"
}

step_openstack() {
    local out
    out=$("$VENV/bin/python" "$REPO/tools/openstack_services.py" install \
        --full-nova 2>&1) \
        || { printf '%s\n' "$out" >&2; die "openstack services install failed"; }
    say "openstack: $(tail -n1 <<<"$out" | sed 's/^openstack-services: //')"
}

main() {
    # One set-up at a time on this machine (apt, daemons, the venv).
    exec 9>/run/tenks-setup.lock
    flock -w 900 9 || die "another tools/setup.sh holds /run/tenks-setup.lock"

    local steps=("$@") step
    [[ ${#steps[@]} -gt 0 ]] || steps=(packages kvm virtlogd libvirtd rabbitmq
        openvswitch postgresql mariadb redis zookeeper venv ovs_json
        virtualpdu ironic_snmp openstack)
    for step in "${steps[@]}"; do
        declare -F "step_$step" >/dev/null || die "no step '$step'"
        "step_$step"
    done
}

main "$@"
