"""The ceiling of a shaped link: one TCP stream each way at once between two namespace hosts.

A ring allreduce sends and receives on every link at the same time, so the fair ceiling is
what plain TCP carries both ways together. Run as a module by run_netns_bench.py; each end
runs inside its host (`ip netns exec`):

  tcp_stream.py serve ADDRESS PORT MIB   accept one peer, send MIB to it, receive MIB from it
  tcp_stream.py connect ADDRESS PORT MIB  the other end
Both print `received BYTES in SECONDS` (first to last byte received).
"""
import socket
import sys
import threading
import time

CHUNK = 4 << 20


def _send(sock, total):
    block = memoryview(bytes(CHUNK))
    left = total
    while left > 0:
        left -= sock.send(block[:min(left, CHUNK)])  # a view: no copy per send
    sock.shutdown(socket.SHUT_WR)


def _receive(sock, total):
    buffer = bytearray(CHUNK)
    got = 0
    first = None
    while got < total:
        n = sock.recv_into(buffer)
        if n == 0:
            break
        if first is None:
            first = time.monotonic()
        got += n
    return got, time.monotonic() - (first or time.monotonic())


def exchange(sock, total):
    sender = threading.Thread(target=_send, args=(sock, total))
    sender.start()
    got, seconds = _receive(sock, total)
    sender.join()
    print("received %d in %.6f" % (got, seconds), flush=True)


def main(argv):
    mode, address, port, mib = argv[1], argv[2], int(argv[3]), int(argv[4])
    total = mib << 20
    if mode == "serve":
        with socket.create_server((address, port)) as server:
            print("listening", flush=True)
            conn, _ = server.accept()
            with conn:
                exchange(conn, total)
    else:
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = socket.create_connection((address, port), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.settimeout(None)
        with conn:
            exchange(conn, total)


if __name__ == "__main__":
    main(sys.argv)
