# netflow.py: the guest's half of `sandfs bench net` (tools/bench/net.go),
# timed with the guest's monotonic clock.
#   tput HOST PORT MIB  one connection sends MIB MiB, half-closes and
#                       waits for the server's count of what it got:
#                       prints "R tput SECS BYTES-THE-SERVER-GOT"
#   conn HOST PORT N    N connections one after another, each connected,
#                       its server's close read, closed:
#                       prints "R conn SECS N"
import socket, sys, time

mode, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "tput":
    buf = bytes(1 << 16)
    s = socket.create_connection((host, port), timeout=120)
    t = time.monotonic()
    for _ in range(n * 16):
        s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    got = s.makefile().readline().strip()
    print("R tput %.6f %s" % (time.monotonic() - t, got))
elif mode == "conn":
    t = time.monotonic()
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=20)
        s.recv(1)
        s.close()
    print("R conn %.6f %d" % (time.monotonic() - t, n))
else:
    sys.exit("usage: netflow.py tput|conn HOST PORT N")
