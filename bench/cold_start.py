#!/usr/bin/env python3
"""bench/cold_start.py BOOTSTRAP [STARTS]

Cold start to ready of a Lambda bootstrap, measured STARTS times (default 21): each time the
binary is started as a new process with the current environment (the function's configuration)
and AWS_LAMBDA_RUNTIME_API pointing at a listening socket here; the figure is the time from just
before the process is spawned to the moment its runtime connects to ask for its first event
(what Lambda's Init phase covers: process start, configuration, SDK clients). The process is
then killed. Prints the first start (the binary's pages may not be in the page cache yet), and the
median, min and max over all starts, and exits non-zero if a process exits before connecting.
"""
import os
import socket
import statistics
import subprocess
import sys
import time


def main() -> int:
    binary = sys.argv[1]
    starts = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(10)
    env = dict(os.environ)
    env["AWS_LAMBDA_RUNTIME_API"] = "127.0.0.1:%d" % listener.getsockname()[1]
    times = []
    for _ in range(starts):
        began = time.perf_counter()
        proc = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            proc.kill()
            _, err = proc.communicate()
            print(f"{binary} did not ask for work within 10 s; its stderr: {err.decode()[-2000:]}", file=sys.stderr)
            return 1
        times.append((time.perf_counter() - began) * 1000)
        conn.close()
        proc.kill()
        proc.wait()
    print(f"cold start to ready over {starts} process starts: median {statistics.median(times):.1f} ms "
          f"(min {min(times):.1f}, max {max(times):.1f}; first start {times[0]:.1f} ms; target <= 15 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
