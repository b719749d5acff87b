#!/usr/bin/env python3
# Usage: NATS_SERVER=/path/to/nats-server scripts/dedup-window-cost.py [N]  (docs/deploy.md, "A remote site")
# Measures what nats-server keeps in memory per message id of a stream's duplicate window
# (issue 25 item 2, option "a duplicate window at least the disk queue's maximum age").
# Raw NATS protocol over a socket; nats-server from PATH; each run its own server.
import json, os, socket, subprocess, sys, time, urllib.request, shutil

def run(n, with_ids, window_s, port, mport):
    sd = f"/tmp/sentinel-dedup-store-{port}"
    shutil.rmtree(sd, ignore_errors=True)
    srv = subprocess.Popen([os.environ.get("NATS_SERVER","nats-server"), "-js", "-sd", sd, "-p", str(port), "-m", str(mport), "-a", "127.0.0.1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", port)); break
            except OSError:
                time.sleep(0.1)
        f = s.makefile("rb")
        f.readline()  # INFO
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\nSUB _I.r 1\r\n')
        def request(subject, body):
            b = json.dumps(body).encode()
            s.sendall(b"PUB %s _I.r %d\r\n%s\r\n" % (subject.encode(), len(b), b))
            while True:
                line = f.readline()
                if line.startswith(b"MSG"):
                    size = int(line.split()[-1]); data = f.read(size + 2)[:-2]; return json.loads(data)
                if line.startswith(b"PING"):
                    s.sendall(b"PONG\r\n")
        r = request("$JS.API.STREAM.CREATE.D", {"name": "D", "subjects": ["d.>"], "storage": "file",
              "retention": "workqueue", "discard": "new", "max_msgs": -1, "max_bytes": -1,
              "duplicate_window": int(window_s * 1e9), "num_replicas": 1})
        assert "error" not in r, r
        def varz():
            return json.load(urllib.request.urlopen(f"http://127.0.0.1:{mport}/varz"))["mem"]
        time.sleep(1)
        base = varz()
        payload = b'{"v":1,"point_id":"pump1.speed","driver_instance":"modbus-pumps","source_epoch":1,"source_seq":123456,"observed_at":"2026-11-30T10:00:00.000000Z","value":1234.5}'
        chunk = []
        for i in range(n):
            if with_ids:
                h = b"NATS/1.0\r\nNats-Msg-Id: modbus-pumps:1:%d\r\n\r\n" % i
            else:
                h = b"NATS/1.0\r\nX-Seq: modbus-pumps:1:%d\r\n\r\n" % i   # same header bytes, no id
            chunk.append(b"HPUB d.plant-a.modbus-pumps %d %d\r\n%s%s\r\n" % (len(h), len(h) + len(payload), h, payload))
            if len(chunk) == 1000:
                s.sendall(b"".join(chunk)); chunk = []
                # keep the server from being flooded: one round trip per 1000
                s.sendall(b"PING\r\n")
                while True:
                    line = f.readline()
                    if line.startswith(b"PONG"): break
                    if line.startswith(b"PING"): s.sendall(b"PONG\r\n")
        if chunk:
            s.sendall(b"".join(chunk))
        # Publishes without a reply are stored asynchronously: wait until all are.
        for _ in range(600):
            info = request("$JS.API.STREAM.INFO.D", {})
            if info["state"]["last_seq"] >= n:
                break
            time.sleep(0.1)
        msgs = info["state"]["messages"]
        # Empty the stream as the core would (work queue): purge removes the messages; the
        # duplicate window's ids stay until they expire.
        request("$JS.API.STREAM.PURGE.D", {})
        time.sleep(3)
        after = varz()
        info2 = request("$JS.API.STREAM.INFO.D", {})
        return base, after, msgs, info2["state"]["messages"]
    finally:
        srv.terminate(); srv.wait()
        shutil.rmtree(sd, ignore_errors=True)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
for with_ids in (False, True, False, True):
    base, after, stored, left = run(n, with_ids, 3600, 14222, 18222)
    print(f"n={n} ids={with_ids} window=3600s rss_before={base/1e6:.1f}MB rss_after={after/1e6:.1f}MB "
          f"delta_per_msg={(after-base)/n:.1f}B stored={stored} after_purge={left}", flush=True)
