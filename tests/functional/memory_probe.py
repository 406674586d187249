"""Run a Tenks service as its console script does, tracing its Python
heap, and report the heap when asked (for test_memory and
tools/bench_memory.py).

    python memory_probe.py REPORT conductor|hostagent --config-file ...

tracemalloc traces every allocation from the start (which makes the
start a few seconds slower). Whenever the file REPORT.request appears, a
thread collects garbage, writes to REPORT the bytes allocated and not
freed, then removes REPORT.request.
"""

import gc
import importlib
import json
import os
import sys
import threading
import time
import tracemalloc

# Left out: the AMQP client's allocations, mostly the buffers of its
# connections (130 KiB each), which oslo.messaging's pool adds whenever
# more casts than ever before overlap, up to rpc_conn_pool_size.
AMQP_CLIENT = ('/amqp/', '/kombu/')


def heap():
    """Bytes allocated and not freed, but by the AMQP client."""
    gc.collect()
    # Not kept past this call: a snapshot's own objects are traced.
    by_file = tracemalloc.take_snapshot().statistics('filename')
    return sum(stat.size for stat in by_file
               if not any(part in stat.traceback[0].filename
                          for part in AMQP_CLIENT))


def report(path):
    request = path + '.request'
    while True:
        time.sleep(0.1)
        if not os.path.exists(request):
            continue
        with open(path + '.tmp', 'w') as f:
            json.dump({'heap': heap()}, f)
        os.replace(path + '.tmp', path)
        os.remove(request)


def read(paths, timeout=60):
    """Ask the probes writing ``paths`` for their reports, all at once;
    return {path: bytes its service's Python heap holds}."""
    for path in paths:
        open(path + '.request', 'w').close()
    deadline = time.monotonic() + timeout
    while any(os.path.exists(path + '.request') for path in paths):
        if time.monotonic() > deadline:
            raise AssertionError('no memory report in %s' % paths)
        time.sleep(0.05)
    heaps = {}
    for path in paths:
        with open(path) as f:
            heaps[path] = json.load(f)['heap']
    return heaps


if __name__ == '__main__':
    path, name = sys.argv.pop(1), sys.argv.pop(1)
    tracemalloc.start()
    threading.Thread(target=report, args=(path,), daemon=True,
                     name='memory-probe').start()
    # What the console script tenks-<name> runs.
    importlib.import_module('%s.server' % name).main()
