#!/usr/bin/env python3
"""Turns transport_benchmark's JSON (--benchmark_out, with repetitions) into the tables
Spark's and Celeborn's NettyTransportBenchmark print: Best / Avg / Stdev / Relative per
scenario, splice and copy side by side, plus the counters (medians).

  format_results.py transport.json > transport.md
"""
import collections
import json
import re
import statistics
import sys

TITLES = {
    "BM_RequestLatency": ("Request latency (one block, open stream and connection)",
                          {"0": "1 KiB", "1": "64 KiB", "2": "1 MiB", "3": "16 MiB"}),
    "BM_ConcurrentFetch": ("Concurrent fetch throughput, 16 x 16 MiB blocks", None),
    "BM_FileBacked100x16MiB": ("File-backed fetch, 100 x 16 MiB blocks", None),
    "BM_SmallBlocksBatched": ("10,000 x 1 KiB blocks in one batched request", None),
    "BM_ServerThreads": ("Server threads, 4 clients, 16 x 16 MiB blocks", None),
    "BM_ThousandConnections": ("1,000 concurrent connections, 16 x 64 KiB blocks each", None),
}


def main():
    data = json.load(open(sys.argv[1]))
    ctx = data["context"]
    runs = collections.defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        runs[b["run_name"]].append(b)
    print(f"Host: {ctx.get('host_name', '?')}, {ctx['num_cpus']} CPUs at {ctx['mhz_per_cpu']} MHz, "
          f"run {ctx['date']}.\n")
    by_family = collections.OrderedDict()
    for name, reps in runs.items():
        family = name.split("/")[0]
        by_family.setdefault(family, []).append((name, reps))
    for family, entries in by_family.items():
        title, size_names = TITLES.get(family, (family, None))
        print(f"## {title}\n")
        print("| scenario | mode | Best (ms) | Avg (ms) | Stdev (ms) | GB/s (median) | "
              "server CPU s/GB | client CPU s/GB | server RSS MiB | extra | Relative |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        splice_best = {}  # scenario -> the splice row's best time
        for name, reps in entries:
            args = name.split("/")[1:]
            args = [a for a in args if a != "real_time"]
            mode = reps[0].get("label", "")
            scenario_args = args[:-1] if mode in ("splice", "copy") else args
            if family == "BM_RequestLatency" and size_names:
                scenario = size_names.get(scenario_args[0], scenario_args[0])
            elif family in ("BM_ConcurrentFetch",):
                scenario = f"{scenario_args[0]} client(s)"
            elif family == "BM_FileBacked100x16MiB":
                scenario = "sequential" if scenario_args[0] == "1" else f"{scenario_args[0]} parallel"
            elif family == "BM_ServerThreads":
                scenario = f"{scenario_args[0]} server thread(s)"
            else:
                scenario = "-"
            unit = reps[0]["time_unit"]
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
            times = [r["real_time"] * scale for r in reps]
            best, avg = min(times), statistics.mean(times)
            stdev = statistics.stdev(times) if len(times) > 1 else 0.0
            def med(key):
                vals = [r[key] for r in reps if key in r]
                return statistics.median(vals) if vals else float("nan")
            gbps = med("bytes_per_second") / 1e9
            extra = ""
            if "p50_us" in reps[0]:
                extra = f"p50 {med('p50_us'):.1f} us, p99 {med('p99_us'):.1f} us"
            if "items_per_second" in reps[0]:
                extra = f"{med('items_per_second'):,.0f} blocks/s"
            if mode != "copy":
                splice_best[scenario] = best
            rel = splice_best.get(scenario, best) / best if best else 0
            print(f"| {scenario} | {mode} | {best:.3f} | {avg:.3f} | {stdev:.3f} | {gbps:.2f} | "
                  f"{med('server_cpu_s_per_GB'):.3f} | {med('client_cpu_s_per_GB'):.3f} | "
                  f"{med('server_rss_MiB'):.1f} | {extra} | {rel:.2f}X |")
        print()
    print("Relative: the splice row's best time for the same scenario over this row's best "
          "time (above 1X: faster than splice).")


if __name__ == "__main__":
    main()
