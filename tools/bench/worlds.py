# worlds.py: the guest's half of `sandfs bench worlds` (tools/bench/worlds.go),
# run by python3 inside a guest. `worlds.py gen DIR DIRS FILES SIZE MIB`
# makes the tree in DIR. Otherwise it measures file operations on each
# directory named on the command line (`worlds.py PASSES CREATES WRITES
# LABEL=PATH...`, each a copy of one tree: DIRS directories of FILES files of
# SIZE bytes, and big.bin), each row PASSES times, and prints one line per
# measurement:
#
#     R <row> <label> <seconds> <count> <bytes>
#
# and progress lines starting with "# ". Cold rows drop the guest's page
# cache first (sync, drop_caches 3), so that a local disk's figures are its
# disk's, not its memory's, and a 9P mount's (cache=loose) the host's files.
import os, stat, sys, time


def drop():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def files_of(root):
    out = []
    for d in sorted(os.listdir(root)):
        p = root + "/" + d
        if os.path.isdir(p) and d.startswith("d"):
            out += [p + "/" + n for n in sorted(os.listdir(p))]
    return out


def walk(root):
    n = 0
    stack = [root]
    while stack:
        d = stack.pop()
        for name in os.listdir(d):
            p = d + "/" + name
            n += 1
            if stat.S_ISDIR(os.lstat(p).st_mode):
                stack.append(p)
    return n, 0


def stats(paths):
    for p in paths:
        os.lstat(p)
    return len(paths), 0


def read_all(paths, chunk):
    total = 0
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            while True:
                b = os.read(fd, chunk)
                if not b:
                    break
                total += len(b)
        finally:
            os.close(fd)
    return len(paths), total


def create(d, n, size):
    os.mkdir(d)
    data = b"c" * size
    for i in range(n):
        fd = os.open("%s/f%05d" % (d, i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
    return n, n * size


def overwrite(paths):
    # The first write to a lower file copies it up in a world.
    for p in paths:
        fd = os.open(p, os.O_WRONLY)
        os.write(fd, b"w" * 100)
        os.close(fd)
    return len(paths), 100 * len(paths)


def timed(row, label, cold, fn, *args):
    if cold:
        drop()
    t = time.perf_counter()
    n, nbytes = fn(*args)
    dt = time.perf_counter() - t
    print("R %s %s %.6f %d %d" % (row, label, dt, n, nbytes), flush=True)


def bench(label, root, passes, creates, writes):
    paths = files_of(root)
    if not paths:
        sys.exit("no files under " + root)
    print("# %s: %s, %d files" % (label, root, len(paths)), flush=True)
    for _ in range(passes):
        timed("walk", label, True, walk, root)
        timed("stat", label, True, stats, paths)
        timed("small-read", label, True, read_all, paths, 1 << 16)
        timed("big-read", label, True, read_all, [root + "/big.bin"], 1 << 20)
    for _ in range(passes):
        timed("small-read-warm", label, False, read_all, paths, 1 << 16)
        timed("big-read-warm", label, False, read_all, [root + "/big.bin"], 1 << 20)
    print("# %s: reads done, writing" % label, flush=True)
    # Each pass creates in a directory of its own and overwrites files
    # of its own (a copy-up is a file's first write).
    for i in range(passes):
        timed("create", label, False, create, "%s/new%d" % (root, i), creates, 4096)
        timed("copy-up", label, False, overwrite, paths[i * writes:(i + 1) * writes])
    os.sync()


def gen(root, dirs, files, size, big):
    # The same shape as the world's tree (worlds.go makeWorldTree), made
    # here on the guest's own disk.
    data = os.urandom(max(size, 1 << 20))
    for d in range(dirs):
        os.makedirs("%s/d%03d" % (root, d))
        for f in range(files):
            with open("%s/d%03d/f%04d" % (root, d, f), "wb") as fh:
                fh.write(data[:size])
    with open(root + "/big.bin", "wb") as fh:
        for _ in range(big):
            fh.write(data[: 1 << 20])
    os.sync()


def main():
    if sys.argv[1] == "gen":
        gen(sys.argv[2], *[int(a) for a in sys.argv[3:7]])
        return
    passes, creates, writes = [int(a) for a in sys.argv[1:4]]
    for arg in sys.argv[4:]:
        label, root = arg.split("=", 1)
        for _ in range(600):
            if os.path.exists(root + "/big.bin"):
                break
            time.sleep(0.1)
        bench(label, root, passes, creates, writes)
    print("# done", flush=True)


main()
