"""What the benchmark scripts share: loopback ports, a process's CPU and RSS, the machine."""
import atexit
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


def settle_file_system():
    """Writes back and, as root, drops the machine's clean caches (their inode table
    blocks among them): files created next then cost what they cost on a file system at
    rest. An ext4 without a journal (these machines' disk) passes over, when it allocates
    an inode, every free inode of a cached inode table block deleted in the last 60 s
    (360 s once that block is dirty again, as the next allocations in it make it): here
    3,000 creates took 0.11 s of CPU at rest and 1.0 s right after 3,000 deletes. A
    benchmark that creates files settles first and deletes nothing until it ends. False
    when not root (nothing dropped)."""
    os.sync()
    if os.geteuid() != 0:
        return False
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return True


PAGE_REPORTING_ORDER = "/sys/module/page_reporting/parameters/page_reporting_order"


def back_memory(gib):
    """On a virtual machine whose balloon reports free memory to the host (free page
    reporting), memory the host took back costs a host fault at its next first touch:
    here 2.5 s of system time a GiB, landing on whichever read's page cache or copy gets
    those pages (a cold read at 0.6 GB/s instead of 2.3). As root, stops the reporting
    until this process exits (the setting is restored then) and touches `gib` GiB once,
    so the pages the benchmark's reads get are ones the host backs. Returns what it did,
    for the report."""
    if os.geteuid() != 0 or not os.path.exists(PAGE_REPORTING_ORDER):
        return "free page reporting: not stopped (not root, or no such setting)"
    with open(PAGE_REPORTING_ORDER) as f:
        order = f.read().strip()

    def restore():
        with open(PAGE_REPORTING_ORDER, "w") as f:
            f.write(order)
    # Past the largest free block the buddy allocator keeps: nothing is reported.
    with open(PAGE_REPORTING_ORDER, "w") as f:
        f.write("11")
    atexit.register(restore)
    memory = bytearray(gib << 30)
    memory[::4096] = b"\x01" * (len(memory) // 4096)
    del memory
    return (f"free page reporting stopped for the run (page_reporting_order {order} -> 11) "
            f"and {gib} GiB touched first")


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
