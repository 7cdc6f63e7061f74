#!/bin/sh
# Wakes the readers blocked on /tmp/f1 and /tmp/f2 while vCPUs 1 and 2 are
# both stopped, and says when (for sched_faults.rs, in a lab guest).
#
# usage: sh wake-during-stop.sh T0
#   T0  the guest's uptime when the test's commands started; the watch
#       gives up 60 s after it ("@no stop seen").
#
# The stop is seen as two heartbeats, one bound to each vCPU of the pair,
# falling LAG_S behind this watcher's clock. Prints "@write UPTIME" at the
# wake-up, or "@no stop seen" and what the watch saw: each heartbeat's
# largest lag and the watcher's own largest pause between two looks (a
# watcher that could not run during the stop would show it there).
t0=$1
LAG_S=2.5
for c in 1 2; do
	cat /proc/uptime > /tmp/hb$c
	taskset -c $c sh -c "while :; do read u _ < /proc/uptime; echo \$u > /tmp/hb$c; sleep 0.05; done" &
	beats="$beats $!"
done
read prev _ < /proc/uptime
lag1=0 lag2=0 pause=0
while :; do
	read now _ < /proc/uptime
	read h1 _ < /tmp/hb1
	read h2 _ < /tmp/hb2
	# An empty read (a heartbeat rewriting its file) counts as no lag.
	set -- $(awk -v n="$now" -v a="${h1:-$now}" -v b="${h2:-$now}" -v p="$prev" -v t="$t0" \
		-v l1="$lag1" -v l2="$lag2" -v g="$pause" -v lag="$LAG_S" 'BEGIN {
		if (n - a > l1) l1 = n - a; if (n - b > l2) l2 = n - b; if (n - p > g) g = n - p
		s = (n - a > lag && n - b > lag) ? "stop" : (n - t > 60 ? "late" : "wait")
		printf "%s %.2f %.2f %.2f\n", s, l1, l2, g }')
	lag1=$2 lag2=$3 pause=$4 prev=$now
	[ "$1" = wait ] || break
	sleep 0.05
done
kill $beats
if [ "$1" = late ]; then
	echo "@no stop seen: largest heartbeat lags $lag1 s and $lag2 s, the watcher's largest pause $pause s"
	exit 0
fi
read w _ < /proc/uptime
echo "@write $w"
# Each reader waits in open(), so these opens do not block.
echo go > /tmp/f1
echo go > /tmp/f2
