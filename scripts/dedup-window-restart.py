#!/usr/bin/env python3
# Usage: NATS_SERVER=/path/to/nats-server scripts/dedup-window-restart.py  (docs/deploy.md, "A remote site")
# Does a stream's duplicate window survive (1) a purge of the consumed messages and (2) a
# nats-server restart after it? (The work-queue stream deletes what the core acked.)
import json, os, socket, subprocess, time, shutil
port, sd = 14333, "/tmp/sentinel-dedup-store-restart"
shutil.rmtree(sd, ignore_errors=True)
def start():
    p = subprocess.Popen([os.environ.get("NATS_SERVER","nats-server"), "-js", "-sd", sd, "-p", str(port), "-a", "127.0.0.1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", port)); break
        except OSError:
            time.sleep(0.1)
    f = s.makefile("rb"); f.readline()
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\nSUB _I.r 1\r\n')
    return p, s, f
def read_msg(s, f):
    while True:
        line = f.readline()
        if line.startswith(b"MSG") or line.startswith(b"HMSG"):
            size = int(line.split()[-1]); return f.read(size + 2)[:-2]
        if line.startswith(b"PING"): s.sendall(b"PONG\r\n")
def request(s, f, subject, body):
    b = json.dumps(body).encode()
    s.sendall(b"PUB %s _I.r %d\r\n%s\r\n" % (subject.encode(), len(b), b))
    return json.loads(read_msg(s, f))
def publish(s, f, msg_id):
    h = b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n" % msg_id.encode(); p = b"{}"
    s.sendall(b"HPUB d.x _I.r %d %d\r\n%s%s\r\n" % (len(h), len(h) + len(p), h, p))
    return json.loads(read_msg(s, f))
p, s, f = start()
print(request(s, f, "$JS.API.STREAM.CREATE.D", {"name": "D", "subjects": ["d.>"], "storage": "file", "retention": "workqueue", "duplicate_window": int(3600e9)}).get("error"))
print("first  ", publish(s, f, "a:1:1"))
request(s, f, "$JS.API.STREAM.PURGE.D", {})
print("after purge (consumed)", publish(s, f, "a:1:1"))
request(s, f, "$JS.API.STREAM.PURGE.D", {})
print("second id, then purge", publish(s, f, "a:1:2")); request(s, f, "$JS.API.STREAM.PURGE.D", {})
p.terminate(); p.wait()
p, s, f = start()
time.sleep(1)
print("after restart a:1:2", publish(s, f, "a:1:2"))
p.terminate(); p.wait()
shutil.rmtree(sd, ignore_errors=True)
