# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): "up --mail": gpu-tracker-mail as
# slurmctld's MailProg (docs/MAIL.md), and Debian's own mail server, exim4, in the configuration
# its package installs without questions: local delivery only (to /var/mail/USER), no relay,
# listening on the loopback addresses alone. The tests read the test users' mailboxes.

# Installs gpu-tracker-mail (this tree's release build, or the package's with FROM_PACKAGES)
# and the wrapper slurm.conf's MailProg names: slurmctld gives MailProg neither SLURM_CONF nor
# our settings' path, and keeps nothing it says (log/mail.log does).
install_mail_tools() {
    local bin=${GPU_TRACKER_MAIL_BIN:-$REPO/target/release/gpu-tracker-mail}
    [[ $FROM_PACKAGES == 1 ]] && bin=/usr/bin/gpu-tracker-mail
    [[ -f $bin ]] || fail "gpu-tracker-mail not built ($bin): cargo build --release --bin gpu-tracker-mail"
    install_copy "$bin" "$STATE/lib/gpu-tracker-mail" 0755
    put_file "$STATE/bin/gpu-tracker-mail" 0755 <<EOF2 || true
#!/bin/sh
# Written by slurm/local-cluster.sh: the MailProg of the local cluster (up --mail).
export SLURM_CONF='$CONF'
export GPU_TRACKER_CONFIG='$TRACKER_CONF'
exec '$STATE/lib/gpu-tracker-mail' "\$@" 2>>'$STATE/log/mail.log'
EOF2
}

# exim4 as Debian's package set it up: "local" (local delivery only) or nothing is touched, and
# its daemon, started when none runs (the queue run each minute retries a deferred delivery;
# sendmail delivers at once without it).
start_mail() {
    local conf=/etc/exim4/update-exim4.conf.conf type
    [[ -r $conf ]] || fail "exim4 is not installed ($conf missing)"
    type=$(sed -n "s/^dc_eximconfig_configtype='\(.*\)'/\1/p" "$conf")
    [[ $type == local ]] || fail "exim4 is configured as '$type', not 'local' (local delivery only): a mail server this script did not set up is left as it is; set up the cluster without --mail"
    if ! pgrep -x exim4 >/dev/null; then
        exim4 -bd -q1m || fail "the exim4 daemon did not start (/var/log/exim4/mainlog)"
    fi
}
