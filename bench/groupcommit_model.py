#!/usr/bin/env python3
"""groupcommit_model.py — what closed-loop clients can reach on one serial log.

A discrete-event model: C clients each spend t_nosync (the request's time
without its fsync: the HTTP round trip and the server's work, measured with
sync off as C / requests per second), then send a request; the log syncs one
batch at a time, each sync taking t_fsync and covering every request that
arrived before it started; a request that arrives during a sync waits for it
to end and is in the next. bench/run.sh's limit, C / (t_nosync + t_fsync),
assumes no request ever waits for a sync in flight; this model counts that
wait.

    bench/groupcommit_model.py CLIENTS T_NOSYNC_MS T_FSYNC_MS [DELAY_MS]

prints items/s and items per sync for the model beside the limit (batch 1).
With DELAY_MS, the log also waits, when idle, up to that long for as many
requests as the largest of its last 32 syncs carried before it starts a
sync (a commit delay, as PostgreSQL's commit_delay or MySQL's
binlog_group_commit_sync_delay): on this machine's figures it does not
raise the model's share of the limit (0.81-0.84 for delays of 0.05 to
0.3 ms against 0.84 without).
"""
import heapq
import random
import sys


def model(clients, t_nosync, t_fsync, seconds=20.0, jitter=0.3, seed=1, delay=0.0, window=32):
    rnd = random.Random(seed)
    seq = 0
    events = []
    for _ in range(clients):
        seq += 1
        events.append((rnd.uniform(0, t_nosync), seq, "request"))
    heapq.heapify(events)
    pending, batch, syncing, lingering = 0, 0, False, False
    done = syncs = 0
    sizes = []

    def push(t, kind):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind))

    def start(t):
        nonlocal syncing, batch, pending, syncs, lingering
        syncing, batch, pending, syncs, lingering = True, pending, 0, syncs + 1, False
        sizes.append(batch)
        push(t + t_fsync, "synced")

    while events:
        t, _, kind = heapq.heappop(events)
        if t > seconds:
            break
        if kind == "request":
            pending += 1
            if not syncing:
                expected = max(sizes[-window:]) if sizes else 1
                if delay <= 0 or pending >= expected:
                    start(t)
                elif not lingering:
                    lingering = True
                    push(t + delay, "linger")
            continue
        if kind == "linger":
            if not syncing and lingering and pending:
                start(t)
            continue
        for _ in range(batch):
            done += 1
            push(t + t_nosync * rnd.uniform(1 - jitter, 1 + jitter), "request")
        batch = 0
        if pending:
            start(t)
        else:
            syncing = False
    return done / seconds, done / max(syncs, 1)


def main():
    clients, t_nosync, t_fsync = int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000
    delay = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.0
    rate, per_sync = model(clients, t_nosync, t_fsync, delay=delay)
    limit = clients / (t_nosync + t_fsync)
    print(f"clients {clients}, t_nosync {t_nosync * 1000:.3f} ms, t_fsync {t_fsync * 1000:.3f} ms: "
          f"one serial log {rate:.0f} items/s at {per_sync:.2f} items per sync; "
          f"limit C / (t_nosync + t_fsync) {limit:.0f} items/s; model / limit {rate / limit:.2f}")


if __name__ == "__main__":
    main()
