#!/usr/bin/env python3
"""Memory and control messages per node of one N:N shuffle flow, modelled and checked.

    bench/scale_model.py [bench/out/scale-shm.json]

The model (one flow, N nodes, T source threads and T targets per node, rings of R bytes):
  rings per node     per-thread rings (the default): a target hosts one ring per source thread of
                     the cluster, so a node hosts T * N*T rings; per-rank rings (FlowOptions::
                     rings = per_rank): one ring per source rank, T * N
  memory per node    rings * R, plus the source side: with per-thread rings over shm nothing (a
                     source writes into the mapped rings); with per-rank rings each source thread
                     fills a segment of its own per target before it takes a slot of the shared
                     ring, T * N*T segments of S bytes; over tcp a source stages 4 segments per
                     ring it writes either way
  requests per node  3, whatever N and T: the flow's spec (one wait, shared by the node's
                     openers), the node's one record of its targets' rings (published by its
                     last target to open), and one wait for the target nodes' records (shared by
                     its source threads); on etcd a wait the first read does not answer costs a
                     watch too: 5, plus a retry where a connection attempt fails under load
  bytes per node     a + N * (c + d T): the wait carries N records, each the node's worker
                     address (c) and its T targets' ring descriptors (d each); a, c and d are
                     fitted to the measured runs of 1 and 2 threads

The measured points (the JSON of `dfi bench scale`) are printed beside the model's value for
the same shape, then the model's projection for 64, 256 and 1024 nodes x 16 threads with the
default rings (shm: 32 segments of 8 KiB; tcp: 8 of 32 KiB: 256 KiB either way).
"""
import json
import sys

RING_HEADER = 2 * 64  # two word lines in front of the segments (memory::RingLayout::bytes)
GIB = 1 << 30


def ring_bytes(segments, segment_bytes):
    return segments * segment_bytes + RING_HEADER


def model_memory(n, t, ring, per_rank=False, segment=0):
    """Bytes per node over shm: the rings its targets host, plus (per-rank rings) the segment
    each of its source threads fills per target before taking a slot of the shared ring."""
    if per_rank:
        return t * n * ring + t * n * t * segment
    return t * n * t * ring


def fit_line(points):
    """Least squares y = a + b x."""
    k = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    b = (k * sxy - sx * sy) / (k * sxx - sx * sx)
    return (sy - b * sx) / k, b


def series_points(result, panel_id, series_id):
    for panel in result["panels"]:
        if panel["id"] != panel_id:
            continue
        for s in panel["series"]:
            if s["id"] == series_id:
                return {int(p["x"]): p["value"] for p in s["points"]}
    return {}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/out/scale-shm.json"
    with open(path) as f:
        result = json.load(f)
    params = result["parameters"]
    ring = ring_bytes(params["segments"], params["segment_bytes"])
    print(f"checked against {path} ({result['transport']}, rings of {ring} B)")
    print(f"{'series':<14}{'N':>5}{'memory MiB':>12}{'model':>9}{'requests':>10}{'model':>7}")
    worst = 0.0
    shapes = [(t, False) for t in params["threads"]]
    if "per_rank" in params.get("rings", []):
        shapes += [(t, True) for t in params["threads"] if t >= 2]
    for threads, per_rank in shapes:
        for registry in params.get("registries", ["embedded"]):
            sid = f"dfi_{threads}" + ("" if registry == "embedded" else f"_{registry}") + ("_rank" if per_rank else "")
            memory = series_points(result, "memory", sid)
            requests = series_points(result, "requests", sid)
            for n in sorted(memory):
                predicted = model_memory(n, threads, ring, per_rank, params["segment_bytes"]) / (1 << 20)
                worst = max(worst, abs(memory[n] - predicted) / predicted)
                bound = "3" if registry == "embedded" else "5+"  # etcd: and retries
                print(f"{sid:<14}{n:>5}{memory[n]:>12.2f}{predicted:>9.2f}{requests.get(n, 0):>10.0f}{bound:>7}")
    print(f"largest memory difference, model vs measured: {100 * worst:.1f} %")

    # Registry bytes per rank during the open, fitted as a + b(T) N per thread count T from the
    # measured runs; b(T) = c + d T (a record: the node's address, then T ring descriptors).
    slopes = {}
    a = 0
    for threads in sorted(params["threads"]):
        measured_bytes = series_points(result, "registry_bytes", f"dfi_{threads}")
        if len(measured_bytes) < 2:
            continue
        a_t, b_t = fit_line([(n, kib * 1024) for n, kib in measured_bytes.items()])
        slopes[threads] = b_t
        if threads == min(params["threads"]):
            a = a_t
        print(f"registry bytes per rank and open, {threads} thread(s): {a_t:.0f} + {b_t:.0f} N B "
              f"(fitted to {sorted(measured_bytes)})")
        for n, kib in sorted(measured_bytes.items()):
            print(f"  N = {n:>4}: measured {kib * 1024:>9.0f} B, fit {a_t + b_t * n:>9.0f} B")
    if len(slopes) >= 2:
        (t1, b1), (t2, b2) = sorted(slopes.items())[:2]
        d = (b2 - b1) / (t2 - t1)
        c = b1 - d * t1
    else:
        c, d = 0, next(iter(slopes.values()), 0)
    print(f"a record of a node: {c:.0f} B + {d:.0f} B per target thread")
    print()
    print("projection over shm, default rings (32 x 8 KiB = 256 KiB), 16 threads per node, GiB per node:")
    print(f"{'nodes':>6}{'per-thread rings':>18}{'per-rank: rings':>17}{'+ source segments':>19}"
          f"{'requests/open':>15}{'registry MiB/open':>19}")
    default_ring = ring_bytes(32, 8192)
    for n in (64, 256, 1024):
        # One wait for N records of 16 targets each.
        megabytes = (a + n * (c + 16 * d)) / (1 << 20)
        hosted = model_memory(n, 16, default_ring, per_rank=True)
        print(f"{n:>6}{model_memory(n, 16, default_ring) / GIB:>18.2f}{hosted / GIB:>17.2f}"
              f"{(model_memory(n, 16, default_ring, True, 8192) - hosted) / GIB:>19.2f}{3:>15}{megabytes:>19.1f}")
    for segments, segment in ((4, 16384), (8, 4096), (8, 2048), (16, 1024)):
        small = ring_bytes(segments, segment)
        hosted = model_memory(1024, 16, small, per_rank=True)
        total = model_memory(1024, 16, small, True, segment)
        print(f"per-rank rings of {segments} x {segment // 1024} KiB at 1024 x 16: rings {hosted / GIB:.2f} GiB "
              f"+ source segments {(total - hosted) / GIB:.2f} GiB = {total / GIB:.2f} GiB per node")
    return 0 if worst < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
