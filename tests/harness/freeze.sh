#!/usr/bin/env bash
# Freezes a broker so that it keeps its connections but answers nothing,
# and lets it go on: the sink battery's --broker-pause and --broker-resume.
#
#   freeze.sh stop PID   SIGSTOP, then wait until every thread of PID is
#                        stopped: kill returns once the signal is sent, and
#                        a thread running on another core may still answer
#                        a message for a moment after that
#   freeze.sh cont PID   SIGCONT
set -u
what=${1:?usage: freeze.sh stop|cont PID}
pid=${2:?usage: freeze.sh stop|cont PID}
case $what in
cont) exec kill -CONT "$pid" ;;
stop) kill -STOP "$pid" || exit 1 ;;
*) echo "usage: freeze.sh stop|cont PID" >&2; exit 2 ;;
esac
# Field 3 of /proc/PID/task/TID/stat is the thread's state, after the
# command name in parentheses (which may hold spaces): T when stopped.
for _ in $(seq 1 1000); do
    running=0
    for st in /proc/"$pid"/task/*/stat; do
        state=$(sed 's/^.*) \(.\).*/\1/' "$st" 2>/dev/null) || continue
        case $state in T | t | Z | X | '') ;; *) running=1 ;; esac
    done
    [ "$running" = 0 ] && exit 0
    sleep 0.005
done
echo "freeze.sh: process $pid still has running threads after SIGSTOP" >&2
exit 1
