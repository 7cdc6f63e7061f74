#!/bin/sh
# Wakes the readers blocked on /tmp/f1 and /tmp/f2 when vCPUs 1 and 2 are
# both stopped, and says when and how the stop was seen (for
# sched_faults.rs, in a lab guest).
#
# usage: sh wake-during-stop.sh T0 STOP_AT_S
#   T0         the guest's uptime when the test's commands started; the
#              watch gives up 60 s after it ("@no stop seen").
#   STOP_AT_S  when the layout stops the pair, in seconds after T0.
#
# The stop is seen one of two ways:
# - "heartbeats": two heartbeats, one bound to each vCPU of the pair, fall
#   LAG_S behind this watcher's clock. The readers are woken during the
#   stop.
# - "pause": this watcher, on vCPU 0, was itself held LAG_S or more between
#   two looks, ending after STOP_AT_S: the emulator held the whole guest
#   along with the pair (it does so in some runs under TCG), and nothing in
#   the guest ran during the stop. The readers are woken at once, at the
#   thaw, while the SCHED_IDLE work on the pair still starves.
# Prints "@write UPTIME" at the wake-up and "@seen: HOW ..." with what the
# watch saw, or "@no stop seen: ..." and what the watch saw: each
# heartbeat's largest lag and the watcher's largest pause.
t0=$1
stop_at=$2
LAG_S=2.5
for c in 1 2; do
	cat /proc/uptime > /tmp/hb$c
	# Written whole and renamed over: a reader of a file rewritten in
	# place can read a few bytes of it before the truncation and none
	# after ("1" of "13.09"), a lag of seconds that never happened.
	taskset -c $c sh -c "while :; do read u _ < /proc/uptime; echo \$u > /tmp/hb$c.new; mv /tmp/hb$c.new /tmp/hb$c; sleep 0.05; done" &
	beats="$beats $!"
done
read prev _ < /proc/uptime
lag1=0 lag2=0 pause=0
while :; do
	read now _ < /proc/uptime
	read h1 _ < /tmp/hb1
	read h2 _ < /tmp/hb2
	set -- $(awk -v n="$now" -v a="$h1" -v b="$h2" -v p="$prev" -v t="$t0" -v at="$stop_at" \
		-v l1="$lag1" -v l2="$lag2" -v g="$pause" -v lag="$LAG_S" 'BEGIN {
		if (n - a > l1) l1 = n - a; if (n - b > l2) l2 = n - b; if (n - p > g) g = n - p
		if (n - a > lag && n - b > lag) s = "heartbeats"
		else if (n - p >= lag && n - t > at) s = "pause"
		else s = (n - t > 60 ? "late" : "wait")
		printf "%s %.2f %.2f %.2f\n", s, l1, l2, g }')
	lag1=$2 lag2=$3 pause=$4 prev=$now
	[ "$1" = wait ] || break
	sleep 0.05
done
kill $beats
saw="largest heartbeat lags $lag1 s and $lag2 s, the watcher's largest pause $pause s"
if [ "$1" = late ]; then
	echo "@no stop seen: $saw"
	exit 0
fi
read w _ < /proc/uptime
echo "@write $w"
echo "@seen: $1; $saw"
# Each reader waits in open(), so these opens do not block.
echo go > /tmp/f1
echo go > /tmp/f2
