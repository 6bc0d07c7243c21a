"""What the benchmark scripts share: loopback ports, a process's CPU and RSS, the machine."""
import os
import sys
import platform
import socket
import time

HZ = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def proc_stat(pid):
    """(CPU seconds, RSS MiB) of a process and its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / HZ
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return cpu, rss


def machine():
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} x {cpu}, Linux {platform.release()}"


def threads_cpu(pid, prefix):
    """CPU seconds of the process's threads whose name begins with prefix (those alive)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                name, fields = f.read().split(" (", 1)[1].rsplit(")", 1)
        except OSError:
            continue  # the thread ended
        if name.startswith(prefix):
            fields = fields.split()
            total += int(fields[11]) + int(fields[12])
    return total / HZ


def evict(paths):
    """Takes the files out of the page cache (written back first), and as root every
    clean page of the machine too (/proc/sys/vm/drop_caches), so reading them is reading
    the disk."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if os.geteuid() == 0:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")


def device_reads(path):
    """Reads the block device under `path` has completed (field 1 of its stat), or None."""
    dev = os.stat(path).st_dev
    stat = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat"
    if not os.path.exists(stat):
        return None
    with open(stat) as f:
        return int(f.read().split()[0])


def java_home():
    """The JDK scripts/setup installs (or $JAVA_HOME)."""
    for home in (os.environ.get("JAVA_HOME", ""), "/usr/lib/jvm/java-17-openjdk-amd64",
                 "/usr/lib/jvm/default-java"):
        if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
            return home
    sys.exit(f"{os.path.basename(sys.argv[0])}: no Java runtime (scripts/setup installs one)")
