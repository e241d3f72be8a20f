"""serve.py's memory under load: 100,000 requests from 8 closed-loop clients on localhost
(POST /embed, one short text each), the server's resident memory every 10,000 requests, then
SIGTERM (its exit code). One JSON line.

  python bench/serve_memory.py --model_dir=DIR [--requests=100000 --clients=8]
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--model_dir", required=True, help="an embeddings model directory")
parser.add_argument("--requests", type=int, default=100_000)
parser.add_argument("--clients", type=int, default=8)
args = parser.parse_args()
d = args.model_dir
with socket.socket() as s:
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
srv = subprocess.Popen([sys.executable, os.path.join(REPO, "serve.py"), f"--model_dir={d}",
                        f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def rss():
  with open(f"/proc/{srv.pid}/status") as f:
    return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


for _ in range(200):
  try:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    c.request("GET", "/health")
    c.getresponse().read()
    break
  except OSError:
    time.sleep(0.5)
N, T = args.requests, args.clients
done, lock, marks = [0], threading.Lock(), []
texts = ["the dog is hairy", "who was jim henson", "hello world", "a puppet"]


def client(k):
  c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
  while True:
    with lock:
      if done[0] >= N:
        return
      done[0] += 1
      n = done[0]
    body = json.dumps({"inputs": [texts[n % 4]]})
    c.request("POST", "/embed", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
    if n % 10000 == 0:
      marks.append((n, rss(), time.time()))


start, base = time.time(), rss()
threads = [threading.Thread(target=client, args=(k,)) for k in range(T)]
for t in threads:
  t.start()
for t in threads:
  t.join()
elapsed = time.time() - start
srv.send_signal(signal.SIGTERM)
code = srv.wait(60)
print(json.dumps({"requests": N, "clients": T, "seconds": round(elapsed, 1), "rss_mb_start": base,
                  "rss_mb_by_requests": [(n, m) for n, m, _ in sorted(marks)], "exit": code}))
