#!/usr/bin/env python3
"""capture_net.py - record what a real server sends back, as a fuzz seed.

  capture_net.py UPSTREAM PORTFILE OUT [PREFIX_HEX]

Listens on 127.0.0.1 (a free port, written to PORTFILE), takes one
connection, relays it to UPSTREAM (HOST:PORT) both ways, and writes the
bytes UPSTREAM sent back (after PREFIX_HEX, a target's leading bytes) to
OUT once either side closes. Point a target at it with FUZZ_ENDPOINT:

  build-test/bin/launch server --port 29999 &
  fuzz/capture_net.py 127.0.0.1:29999 port.txt fuzz/corpus/rdzv_reply/x &
  FUZZ_ENDPOINT=127.0.0.1:$(cat port.txt) build-fuzz/bin/fuzz_rdzv_reply /dev/null
"""
import selectors
import socket
import sys


def main():
    up_host, up_port = sys.argv[1].rsplit(":", 1)
    portfile, out = sys.argv[2], sys.argv[3]
    prefix = bytes.fromhex(sys.argv[4]) if len(sys.argv) > 4 else b""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    with open(portfile, "w") as f:
        f.write(str(ls.getsockname()[1]))
    cl, _ = ls.accept()
    ls.close()
    up = socket.create_connection((up_host, int(up_port)))
    got = bytearray()
    sel = selectors.DefaultSelector()
    sel.register(cl, selectors.EVENT_READ, up)
    sel.register(up, selectors.EVENT_READ, cl)
    done = False
    while not done:
        for key, _ in sel.select():
            src, dst = key.fileobj, key.data
            b = src.recv(65536)
            if not b:
                done = True
                break
            if src is up:
                got += b
            dst.sendall(b)
    cl.close()
    up.close()
    with open(out, "wb") as f:
        f.write(prefix + bytes(got))


if __name__ == "__main__":
    main()
