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

    bench/groupcommit_model.py CLIENTS T_NOSYNC_MS T_FSYNC_MS

prints items/s and items per sync for the model beside the limit (batch 1).
"""
import heapq
import random
import sys


def model(clients, t_nosync, t_fsync, seconds=20.0, jitter=0.3, seed=1):
    rnd = random.Random(seed)
    events = [(rnd.uniform(0, t_nosync), "request") for _ in range(clients)]
    heapq.heapify(events)
    pending, batch, syncing = 0, 0, False
    done = syncs = 0
    while events:
        t, kind = heapq.heappop(events)
        if t > seconds:
            break
        if kind == "request":
            pending += 1
            if not syncing:
                syncing, batch, pending, syncs = True, pending, 0, syncs + 1
                heapq.heappush(events, (t + t_fsync, "synced"))
            continue
        for _ in range(batch):
            done += 1
            heapq.heappush(events, (t + t_nosync * rnd.uniform(1 - jitter, 1 + jitter), "request"))
        batch = 0
        if pending:
            batch, pending, syncs = pending, 0, syncs + 1
            heapq.heappush(events, (t + t_fsync, "synced"))
        else:
            syncing = False
    return done / seconds, done / max(syncs, 1)


def main():
    clients, t_nosync, t_fsync = int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000
    rate, per_sync = model(clients, t_nosync, t_fsync)
    limit = clients / (t_nosync + t_fsync)
    print(f"clients {clients}, t_nosync {t_nosync * 1000:.3f} ms, t_fsync {t_fsync * 1000:.3f} ms: "
          f"one serial log {rate:.0f} items/s at {per_sync:.2f} items per sync; "
          f"limit C / (t_nosync + t_fsync) {limit:.0f} items/s; model / limit {rate / limit:.2f}")


if __name__ == "__main__":
    main()
