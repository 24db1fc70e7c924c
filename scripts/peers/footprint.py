"""One server's start-up and memory, for scripts/footprint.sh.

usage: footprint.py NAME PORT ARGV...   spawn ARGV, time its first 200 from POST /embed, send 300
                                        requests from 4 clients, print a JSON line with the time
                                        and the resident memory of the process and its children
       footprint.py --report FILE       the JSON lines as a Markdown table: median (range)
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

TEXT = "The quick brown fox jumps over the lazy dog."
REQUESTS, CLIENTS = 300, 4


def embed(url):
    body = json.dumps({"inputs": TEXT}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
        return r.status


def rss_mb(pid):
    """VmRSS of pid and every descendant, in MB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, StopIteration, ProcessLookupError):
            pass
    return total / 1024


def measure(name, port, argv):
    url = f"http://127.0.0.1:{port}/embed"
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        first = None
        while time.monotonic() - t0 < 120:
            if p.poll() is not None:
                sys.exit(f"{name} exited: {p.stderr.read().decode()[-2000:]}")
            try:
                if embed(url) == 200:
                    first = time.monotonic() - t0
                    break
            except OSError:
                time.sleep(0.005)
        if first is None:
            sys.exit(f"{name} gave no answer in 120 s")

        def client():
            for _ in range(REQUESTS // CLIENTS):
                embed(url)

        ts = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        print(json.dumps({"server": name, "first_answer_s": round(first, 3), "rss_mb": round(rss_mb(p.pid), 1)}))
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def report(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows.setdefault(r["server"], []).append(r)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.*)", lscpu)
    print(f"Host: {model[1] if model else '?'}, {os.cpu_count()} CPUs; each server unpinned; "
          f"median (range) of {max(len(v) for v in rows.values())} rounds\n")
    print("| server | first answer after spawn (s) | RSS after 300 requests (MB) |")
    print("|---|---:|---:|")

    def cell(xs, fmt):
        m = fmt.format(statistics.median(xs))
        return m if len(xs) < 2 else f"{m} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"

    for name, rs in rows.items():
        print(f"| {name} | {cell([r['first_answer_s'] for r in rs], '{:.2f}')} | {cell([r['rss_mb'] for r in rs], '{:.0f}')} |")


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        report(sys.argv[2])
    else:
        measure(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
