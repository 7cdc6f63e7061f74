#!/bin/sh
# vsched's Debian package as an administrator uses it, in a Debian guest
# with systemd as init (lab/package/debian-systemd.toml; run by
# crates/cli/tests/packaging.rs, which judges the result):
#
#   sh systemd-check.sh DEB UPGRADE_DEB
#
# DEB and UPGRADE_DEB are in this script's directory; UPGRADE_DEB is the
# same package with a higher version. Each step prints one line
# "@step key=value ..." (values without spaces; lists in [...]), and
# after a failed step the log that explains it. The script asserts
# nothing itself: it reports, the test decides.
set -u
here=$(dirname "$0")
deb="$here/$1"
upgrade="$here/$2"
slice=/sys/fs/cgroup/workload.slice
metrics=http://127.0.0.1:9488/metrics

# Runs a command every 0.2 s until it succeeds, for at most $1 seconds.
wait_for() {
  tries=$(($1 * 5))
  shift
  i=0
  while [ "$i" -lt "$tries" ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
    i=$((i + 1))
  done
  return 1
}
cpus() { cat "$slice/cpuset.cpus" 2>/dev/null; }
# RWC hides vCPU 1 (the stacked pair's higher-numbered vCPU) from the
# slice: once the probe has seen the pair stacked and two reports in a row
# agreed (docs/daemon.md), seconds under TCG; 90 s is for a busy host.
narrowed() { [ "$(cpus)" = 0 ]; }
put_back() { [ -z "$(cpus)" ]; }
metrics_up() { curl -sf "$metrics" | grep -q '^vsched_vcpu_capacity'; }
listing() { find "$1" -mindepth 1 -maxdepth 1 -printf '%f,' 2>/dev/null; }
main_pid() { systemctl show -p MainPID --value vsched; }
work_allowed() {
  grep Cpus_allowed_list "/proc/$(systemctl show -p MainPID --value work)/status" | cut -f2
}
# What user-space RWC may change and must put back.
cgroups() {
  echo "cpus=[$(cpus)] root_ctl=[$(tr ' ' , < /sys/fs/cgroup/cgroup.subtree_control)] work_allowed=[$(work_allowed)]"
}
hidden_metric() {
  curl -sf "$metrics" | awk '$1 == "vsched_rwc_vcpu_hidden{vcpu=\"1\"}" { print $2 }'
}
show_log() { echo "---- $1"; tail -n 30 "$1"; echo "----"; }
journal() { echo "---- journal"; journalctl -u vsched --no-pager -n 40; echo "----"; }

state=$(systemctl is-system-running --wait)
echo "@boot state=$state failed=[$(systemctl --failed --no-legend --plain | awk '{ print $1 }' | tr '\n' ,)]"

# A workload in a slice of its own: the cgroup RWC is given to manage.
systemd-run --quiet --unit=work --slice=workload.slice sleep 100000
echo "@before $(cgroups)"

# Install: files in place, the service neither enabled nor started.
apt-get install -y -q "$deb" > /tmp/install.log 2>&1
e=$?
echo "@install exit=$e version=$(dpkg-query -W -f='${Version}' vsched) bin=$(command -v vsched) enabled=$(systemctl is-enabled vsched) active=$(systemctl is-active vsched)"
[ "$e" = 0 ] || show_log /tmp/install.log

# Enable and start: metrics on loopback, the status over the socket.
systemctl enable --now vsched > /tmp/enable.log 2>&1
e=$?
# The first probe report (a second) plus the daemon's start under TCG.
wait_for 60 metrics_up
m=$?
pid=$(main_pid)
echo "@start exit=$e metrics_ok=$((1 - m)) active=$(systemctl is-active vsched) enabled=$(systemctl is-enabled vsched) uid=$(stat -c %u "/proc/$pid") series=$(curl -sf $metrics | grep -c '^vsched_vcpu_')"
if [ "$e" != 0 ] || [ "$m" != 0 ]; then show_log /tmp/enable.log; journal; fi
# printf: dash's echo would interpret backslashes in the JSON.
printf '@status %s\n' "$(vsched status --json 2>&1 | tr -d '\n')"

# The RWC drop-in, as docs/daemon.md says to install it.
mkdir -p /etc/systemd/system/vsched.service.d
cp /usr/share/vsched/vsched-rwc.conf /etc/systemd/system/vsched.service.d/rwc.conf
echo 'VSCHED_DAEMON_OPTS="--listen 127.0.0.1:9488 --interval 1s --rwc-cgroup workload.slice"' > /etc/default/vsched
systemctl daemon-reload
systemctl restart vsched
wait_for 90 narrowed
e=$?
echo "@rwc narrowed=$((1 - e)) $(cgroups) hidden=$(hidden_metric) uid=$(stat -c %u "/proc/$(main_pid)")"
[ "$e" = 0 ] || journal

# Stopped with the cgroup narrowed: put back.
systemctl stop vsched
echo "@stop $(cgroups) state=[$(listing /run/vsched)] active=$(systemctl is-active vsched)"

# SIGKILL of everything in the service (daemon and its watchdog):
# ExecStopPost puts the cpusets back, Restart= starts it again 5 s later.
# The restore must come before that restart (a new daemon would also put
# them back, from the state file): NRestarts tells the two apart.
systemctl start vsched
wait_for 90 narrowed
narrowed=$?
before_kill=$(main_pid)
restarts_before=$(systemctl show -p NRestarts --value vsched)
systemctl kill --signal=KILL vsched
wait_for 10 put_back
e=$?
restarts_at_restore=$(systemctl show -p NRestarts --value vsched)
echo "@kill narrowed_first=$((1 - narrowed)) restored=$((1 - e)) restarted_before_restore=$((restarts_at_restore - restarts_before)) $(cgroups)"
wait_for 120 narrowed
e=$?
echo "@restarted narrowed=$((1 - e)) active=$(systemctl is-active vsched) new_pid=$([ "$(main_pid)" != "$before_kill" ] && echo yes || echo no) restarts=$(($(systemctl show -p NRestarts --value vsched) - restarts_before))"

# Reinstalled over itself, then upgraded, while running: restarted each
# time with the new files, the administrator's configuration kept.
pid=$(main_pid)
apt-get install -y -q --reinstall "$deb" > /tmp/reinstall.log 2>&1
e=$?
wait_for 10 systemctl is-active -q vsched
echo "@reinstall exit=$e active=$(systemctl is-active vsched) restarted=$([ "$(main_pid)" != "$pid" ] && echo yes || echo no) conf_kept=$(grep -c -- --rwc-cgroup /etc/default/vsched)"
[ "$e" = 0 ] || show_log /tmp/reinstall.log
pid=$(main_pid)
apt-get install -y -q "$upgrade" > /tmp/upgrade.log 2>&1
e=$?
wait_for 10 systemctl is-active -q vsched
echo "@upgrade exit=$e version=$(dpkg-query -W -f='${Version}' vsched) active=$(systemctl is-active vsched) restarted=$([ "$(main_pid)" != "$pid" ] && echo yes || echo no) conf_kept=$(grep -c -- --rwc-cgroup /etc/default/vsched)"
[ "$e" = 0 ] || show_log /tmp/upgrade.log

# Installed over itself while stopped (postinst takes the path of an
# upgrade): it stays stopped, the administrator's choice.
systemctl stop vsched
apt-get install -y -q --reinstall "$upgrade" > /tmp/reinstall-stopped.log 2>&1
e=$?
echo "@reinstall_stopped exit=$e active=$(systemctl is-active vsched) enabled=$(systemctl is-enabled vsched)"
[ "$e" = 0 ] || show_log /tmp/reinstall-stopped.log
systemctl start vsched

# Purged while running with the cgroup narrowed: stopped, put back,
# nothing of the package left (the administrator's drop-in stays theirs).
wait_for 90 narrowed
narrowed=$?
dpkg -L vsched > /tmp/files
apt-get purge -y -q vsched > /tmp/purge.log 2>&1
e=$?
left=$(while read -r f; do [ -e "$f" ] && [ ! -d "$f" ] && echo "$f"; done < /tmp/files | tr '\n' ,)
for d in /usr/lib/vsched /usr/share/vsched /usr/share/doc/vsched /etc/default/vsched /run/vsched \
  /etc/systemd/system/multi-user.target.wants/vsched.service; do
  [ -e "$d" ] || [ -L "$d" ] && left="$left$d,"
done
echo "@purge exit=$e narrowed_first=$((1 - narrowed)) $(cgroups) left=[$left] known=$(dpkg-query -W vsched >/dev/null 2>&1 && echo yes || echo no) unit_files=$(systemctl list-unit-files --no-legend vsched.service | wc -l) processes=$(pgrep -c -x vsched) dropin=[$(listing /etc/systemd/system/vsched.service.d)]"
[ "$e" = 0 ] || show_log /tmp/purge.log
