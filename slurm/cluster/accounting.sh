# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): "up --accounting": a MariaDB of
# the cluster's own, slurmdbd, and the cluster, account and test users registered in it.

# Writes slurmdbd.conf for the port block at $1 (owned by SlurmUser, root; mode 0600: it holds
# the database password, made once and kept). Sets DBD_CHANGED when it changed.
write_dbd_config() {
    local pass=""
    [[ -r $DBD_CONF ]] && pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
    [[ -n $pass ]] || pass=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
    put_file "$DBD_CONF" 0600 <<EOF && DBD_CHANGED=1
# Written by slurm/local-cluster.sh up --accounting; edits are overwritten by the next one.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$(dbd_port "$1")
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$(db_port "$1")
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
# Each user sees only their own jobs in sacct (what keeps a stored summary to its job's user).
PrivateData=jobs
EOF
    # MariaDB's own settings: its data, socket and pid file in the state directory, TCP on
    # 127.0.0.1 only, and the lock wait slurmdbd asks for (it warns below 900 s).
    put_file "$DB_CNF" 0644 <<EOF && DB_CHANGED=1
# Written by slurm/local-cluster.sh up --accounting: the MariaDB of slurmdbd.
[mysqld]
user = mysql
datadir = $STATE/mysql
socket = $DB_RUN/mysqld.sock
pid-file = $DB_RUN/mariadbd.pid
log-error = $STATE/log/mariadb.log
bind-address = 127.0.0.1
port = $(db_port "$1")
skip-name-resolve
innodb_buffer_pool_size = 128M
innodb_lock_wait_timeout = 900
[client]
socket = $DB_RUN/mysqld.sock
EOF
    return 0
}

# Runs the MariaDB client as root (unix socket authentication) on slurmdbd's database server.
db_sql() { mariadb --defaults-file="$DB_CNF" -u root "$@"; }

# Starts the MariaDB of slurmdbd (if not running; restarted when its settings changed), creating
# its data directory the first time, and gives slurmdbd's database user its password and rights.
start_mariadb() {
    local i pass
    ((DB_CHANGED)) && stop_daemon "$DB_RUN/mariadbd.pid" mariadbd
    if ! alive "$DB_RUN/mariadbd.pid" mariadbd; then
        install -d -o mysql -g mysql -m 0755 "$DB_RUN"
        install -d -o mysql -g mysql -m 0700 "$STATE/mysql"
        if [[ ! -d $STATE/mysql/mysql ]]; then
            echo "creating slurmdbd's MariaDB data directory ($STATE/mysql) ..."
            mariadb-install-db --defaults-file="$DB_CNF" --user=mysql >"$STATE/log/mariadb-install.log" 2>&1 ||
                fail "mariadb-install-db failed (log: $STATE/log/mariadb-install.log)"
        fi
        # Detached from this shell; it writes its own pid file.
        setsid mariadbd --defaults-file="$DB_CNF" </dev/null >>"$STATE/log/mariadb.log" 2>&1 &
    fi
    for ((i = 0; i < 240; i++)); do
        db_sql -e 'SELECT 1' >/dev/null 2>&1 && break
        ((i < 8)) || pgrep -xf "mariadbd --defaults-file=$DB_CNF" >/dev/null || fail "mariadbd exited"
        sleep 0.5
    done
    ((i < 240)) || fail "MariaDB does not answer in 120 s"
    pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
    # slurmdbd connects over TCP to 127.0.0.1 (skip-name-resolve: the host is the address). The
    # database is made here: slurmdbd 24.11 with MariaDB 11.8 (Debian 13) makes it itself but
    # then dies on its first query ("Number of columns in result (=1) set exceeds maximum
    # allowed number of columns (=0)"), on the connection it opened before creating it.
    db_sql <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

# Starts slurmdbd (if not running; restarted when slurmdbd.conf changed) and waits until it
# answers sacctmgr. It reads slurmdbd.conf from SLURM_CONF's directory.
start_slurmdbd() {
    local i
    ((DBD_CHANGED)) && stop_daemon "$STATE/run/slurmdbd.pid" slurmdbd
    alive "$STATE/run/slurmdbd.pid" slurmdbd || slurmdbd
    # The first start creates the tables: seconds here, longer under emulation.
    for ((i = 0; i < 360; i++)); do
        sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1 && return 0
        alive "$STATE/run/slurmdbd.pid" slurmdbd || ((i < 10)) || fail "slurmdbd exited"
        sleep 0.5
    done
    fail "slurmdbd does not answer in 180 s"
}

# Puts the cluster, the test account and the test users into slurmdbd (what is missing only).
# Sets CLUSTER_ADDED when the cluster was new: a running slurmctld must restart to register.
register_accounting() {
    local u
    if ! sacctmgr -n -P list cluster format=cluster | grep -qxF gputrack; then
        sacctmgr -i add cluster gputrack >/dev/null
        CLUSTER_ADDED=1
    fi
    sacctmgr -n -P list account "$TEST_ACCOUNT" format=account | grep -qxF "$TEST_ACCOUNT" ||
        sacctmgr -i add account "$TEST_ACCOUNT" Cluster=gputrack \
            Description="gpu-tracker test users" Organization=gpu-tracker >/dev/null
    for u in "${TEST_USERS[@]}"; do
        sacctmgr -n -P list association where cluster=gputrack account="$TEST_ACCOUNT" user="$u" format=user |
            grep -qxF "$u" ||
            sacctmgr -i add user "$u" Account="$TEST_ACCOUNT" Cluster=gputrack >/dev/null
    done
    echo "accounting: slurmdbd on port $(sed -n 's/^DbdPort=//p' "$DBD_CONF"), users ${TEST_USERS[*]} in account $TEST_ACCOUNT"
}

# Stops the slurmdbd and the MariaDB this script started.
stop_accounting() {
    stop_daemon "$STATE/run/slurmdbd.pid" slurmdbd
    stop_daemon "$DB_RUN/mariadbd.pid" mariadbd
}
