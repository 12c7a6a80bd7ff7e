#!/bin/sh
# conv_offcpu.sh - where the wall time of one conversion goes:
# per thread of ds-quant, the seconds on a CPU and the seconds off it, by
# what it waited for, from every context switch of the run
# (`perf record -a -e sched:sched_switch` with DWARF stacks).
#
#   sh bench/conv_offcpu.sh [SCHEME] [THREADS] [MODEL] [OUT]
#
# defaults: w8a8-dynamic, 2, bench/out/ds-v3-1moe-e16, bench/out/offcpu.dsq.
# Needs perf and the rights to trace the scheduler (root, or
# kernel.perf_event_paranoid <= -1). The output file is removed before the
# run (replacing a file times its deletion too) and after it.
#
# Reasons: "disk (O_DIRECT write)": a write waiting for the device;
# "fsync": a flush; "discard": blocks of a deleted or replaced file freed;
# "read": the source read; "page fault": memory first touched; "sleep
# (lock / condition)": waiting for another thread of the run; "runnable":
# ready but no free core (other jobs on the machine). Thread roles are
# named from their stacks: workers (quantize, SHA-256 + zstd of whole
# tensors, zstd of streamed pieces and their tensor's SHA-256 in file order:
# a worker whose piece's turn has not come sleeps on a condition), the
# writer (main thread: the ordered hand-off, the copy into the O_DIRECT
# ring), the SHA-256 pair thread (streamed tensors at --zstd-level 0 only),
# the O_DIRECT ring (common/dsq_dio.h) and the background fdatasync
# (common/dsq_syncer.h).
set -e
S=${1:-w8a8-dynamic}
T=${2:-2}
MODEL=${3:-bench/out/ds-v3-1moe-e16}
OUT=${4:-bench/out/offcpu.dsq}
BIN=${BIN:-bin}
TMP=$(mktemp -d)
trap 'rm -rf $TMP' EXIT
rm -f "$OUT"
cat "$MODEL"/*.safetensors > /dev/null
perf record -q -a -e sched:sched_switch --call-graph dwarf,8192 -o $TMP/perf.data -- \
    sh -c 'echo $$ > '$TMP'/pid; exec '$BIN'/ds-quant --scheme '$S' -T '$T' -f -q '"$MODEL"' '"$OUT" \
    2> $TMP/perf.err || { cat $TMP/perf.err; exit 1; }
rm -f "$OUT"
echo "conv_offcpu: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ds-quant --scheme $S -T $T $MODEL"
perf script -i $TMP/perf.data -F pid,tid,time,trace,ip,sym 2> /dev/null | awk -v pid=$(cat $TMP/pid) '
function reason(st, k) {
    if (st ~ /^R/) return "runnable";
    if (k ~ /blkdev_issue_discard/) return "discard";
    if (k ~ /iomap_dio_rw/) return "disk (O_DIRECT write)";
    if (k ~ /do_fsync|ext4_sync_file/) return "fsync";
    if (k ~ /exc_page_fault/) return "page fault";
    if (k ~ /filemap_read|pread/) return "read";
    if (k ~ /futex/) return "sleep (lock / condition)";
    return "other (" st ")";
}
function setrole(p, rank, name) {
    if (rank > rrank[p]) { rrank[p] = rank; role[p] = name }
}
function flush_ev() {
    if (!have) return;
    if (cur_pid == pid) {
        ours[prev] = 1;
        if (prev in tin) { run[prev] += t - tin[prev]; delete tin[prev] }
        tout[prev] = t; why[prev] = reason(st, stack);
        if (prev == pid) setrole(prev, 5, "writer (main)");
        if (stack ~ /dsq_conv_process/) setrole(prev, 4, "worker");
        if (stack ~ /chunk_task|dsq_pool_run|SHA256/) setrole(prev, 3, "SHA pair");
        if (stack ~ /iomap_dio_rw/) setrole(prev, 2, "O_DIRECT ring");
        if (stack ~ /do_fsync/) setrole(prev, 1, "fdatasync");
        if (first == 0) first = t;
        last = t;
    }
    if (nxt in ours || nxt_ours) {
        tin[nxt] = t;
        if (nxt in tout) { off[nxt, why[nxt]] += t - tout[nxt]; reasons[why[nxt]] = 1; delete tout[nxt] }
    }
    have = 0;
}
/^ *[0-9]+\/[0-9]+ / {
    flush_ev();
    split($1, a, "/"); cur_pid = a[1];
    t = $2; sub(/:$/, "", t);
    match($0, /prev_pid=[0-9]+/); prev = substr($0, RSTART + 9, RLENGTH - 9);
    match($0, /prev_state=[^ ]+/); st = substr($0, RSTART + 11, RLENGTH - 11);
    match($0, /next_pid=[0-9]+/); nxt = substr($0, RSTART + 9, RLENGTH - 9);
    nxt_ours = 0;
    stack = " "; have = 1; next;
}
{ if (have) { sub(/^[ \t]+/, ""); stack = stack $0 " | " } }
END {
    flush_ev();
    printf "0 wall (first to last switch of the process): %.2f s\n", last - first;
    printf "1 %-8s %-15s %7s %8s  %s\n", "thread", "role", "on-CPU", "off-CPU", "off-CPU by reason (s)";
    for (p in ours) {
        tot = 0; line = "";
        for (r in reasons) if ((p, r) in off && off[p, r] >= 0.005) { tot += off[p, r]; line = line sprintf("%s %.2f; ", r, off[p, r]) }
        printf "%s %-8s %-15s %7.2f %8.2f  %s\n", p, p, (p in role ? role[p] : "other"), run[p], tot, line;
    }
}' | sort -n -k1,1 | cut -d' ' -f2-
