"""A real YARN cluster for the benchmarks: a ResourceManager and one NodeManager, JVMs of
their own on 127.0.0.1, with the YARN the Spark line bundles (scripts/setup fetches it
to /opt/ferry-yarn/hadoop-<version>/lib), and the node's spark_shuffle aux service
either Spark's own (benchmarks/yarn/SparkShuffleHost.java, compiled here against the
Spark distribution) or Ferry's (server/yarn, beside a ferry_server reading its hand-off
dir). The same setup as tests/testing/yarn_cluster.h, for a benchmark's rounds.
"""
import glob
import os
import signal
import subprocess
import time

from benchlib import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
YARNS = os.environ.get("FERRY_YARN_ROOT", "/opt/ferry-yarn")
# JDK 17 closes what Hadoop's RPC and web layers reach into.
OPENS = ["java.lang", "java.lang.reflect", "java.util", "java.util.concurrent", "java.io",
         "java.net", "java.nio", "sun.nio.ch"]
LOG4J = """log4j.rootLogger=INFO, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} %p %c{1}: %m%n
"""


def hadoop_jars(spark_home):
    """The lib dir of the YARN whose version the Spark distribution's Hadoop client has."""
    apis = glob.glob(os.path.join(spark_home, "jars", "hadoop-client-api-*.jar"))
    if not apis:
        raise RuntimeError(f"{spark_home} bundles no hadoop-client-api jar")
    version = os.path.basename(apis[0])[len("hadoop-client-api-"):-len(".jar")]
    lib = os.path.join(YARNS, f"hadoop-{version}", "lib")
    if not os.path.exists(os.path.join(lib, f"hadoop-yarn-server-nodemanager-{version}.jar")):
        raise RuntimeError(f"no YARN {version} in {lib}: scripts/setup fetches it")
    return lib


def site_xml(path, properties):
    with open(path, "w") as f:
        f.write('<?xml version="1.0"?>\n<configuration>\n')
        for name, value in sorted(properties.items()):
            f.write(f"  <property><name>{name}</name><value>{value}</value></property>\n")
        f.write("</configuration>\n")


def spark_host_jar(java, spark_home, hadoop_lib, work):
    """benchmarks/yarn/SparkShuffleHost.java, compiled against this Spark and YARN."""
    classes = os.path.join(work, "host-classes")
    os.makedirs(classes)
    source = os.path.join(ROOT, "benchmarks", "yarn", "SparkShuffleHost.java")
    subprocess.run([os.path.join(java, "bin", "javac"), "--release", "17", "-nowarn", "-d",
                    classes, "-cp", f"{hadoop_lib}/*:{spark_home}/jars/*", source], check=True)
    jar = os.path.join(work, "spark-shuffle-host.jar")
    subprocess.run([os.path.join(java, "bin", "jar"), "cf", jar, "-C", classes, "."], check=True)
    return jar


class YarnCluster:
    """A ResourceManager and one NodeManager whose spark_shuffle is `aux` (the class, its
    classpath and its yarn-site settings); processes in groups of their own, all under
    `work`, the dir spark-submit's HADOOP_CONF_DIR (conf/) lives in."""

    def __init__(self, java, spark_home, work, aux_class, aux_classpath, aux_site,
                 memory_mb=8192, nm_heap="1g"):
        self.java, self.work = java, work
        self.conf = os.path.join(work, "conf")
        self.local = os.path.join(work, "nm", "local")
        self.procs = []
        for d in (self.conf, self.local, os.path.join(work, "nm", "logs"),
                  os.path.join(work, "nm", "recovery")):
            os.makedirs(d)
        lib = hadoop_jars(spark_home)
        self.classpath = ":".join(sorted(glob.glob(os.path.join(lib, "*.jar"))))
        site = {
            "yarn.resourcemanager.hostname": "127.0.0.1",
            "yarn.resourcemanager.scheduler.class":
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler",
            "yarn.scheduler.minimum-allocation-mb": "256",
            "yarn.resourcemanager.recovery.enabled": "false",
            "yarn.nodemanager.hostname": "127.0.0.1",
            "yarn.nodemanager.resource.memory-mb": str(memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": "8",
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "100",
            "yarn.nodemanager.local-dirs": self.local,
            "yarn.nodemanager.log-dirs": os.path.join(work, "nm", "logs"),
            "yarn.nodemanager.recovery.enabled": "true",
            "yarn.nodemanager.recovery.dir": os.path.join(work, "nm", "recovery"),
            # The applications' dirs are kept until the run ends (and `work` with them):
            # on this ext4 without a journal, files created within minutes of a mass
            # delete cost several times the CPU (benchlib.settle_file_system), and the
            # DeletionService's deletes of one application would land on the next one's
            # merged files, on whichever service ran next.
            "yarn.nodemanager.delete.debug-delay-sec": "86400",
            "yarn.nodemanager.aux-services": "spark_shuffle",
            "yarn.nodemanager.aux-services.spark_shuffle.class": aux_class,
            "yarn.nodemanager.aux-services.spark_shuffle.classpath": aux_classpath,
        }
        site.update(aux_site)
        site_xml(os.path.join(self.conf, "core-site.xml"),
                 {"fs.defaultFS": "file:///", "hadoop.tmp.dir": os.path.join(work, "hadoop-tmp")})
        with open(os.path.join(self.conf, "log4j.properties"), "w") as f:
            f.write(LOG4J)
        try:
            self.start(site, "resourcemanager", "384m",
                       "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
                       [f"yarn.resourcemanager.{key}" for key in (
                           "address", "scheduler.address", "resource-tracker.address",
                           "admin.address", "webapp.address")],
                       "Transitioned to active state")
            self.node_manager = self.start(
                site, "nodemanager", nm_heap,
                "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
                [f"yarn.nodemanager.{key}" for key in ("address", "localizer.address",
                                                       "webapp.address")],
                "Registered with ResourceManager").pid
        except BaseException:
            self.stop()  # the daemons that did start
            raise

    # A port free_port() chose can be taken (another process's connection, say) before the
    # JVM binds it, and the daemon then exits: each attempt takes new ports.
    ATTEMPTS = 3

    def start(self, site, name, heap, main, port_keys, ready, timeout=120):
        """Launches a daemon on fresh ports (its `port_keys` in yarn-site.xml) until its log
        says `ready`; a launch that exits first is tried again, up to ATTEMPTS."""
        path = os.path.join(self.work, f"{name}.log")
        for attempt in range(1, self.ATTEMPTS + 1):
            for key in port_keys:
                site[key] = f"127.0.0.1:{free_port()}"
            site_xml(os.path.join(self.conf, "yarn-site.xml"), site)
            since = os.path.getsize(path) if os.path.exists(path) else 0
            proc = self.launch(name, heap, main)
            deadline = time.time() + timeout
            while time.time() < deadline and proc.poll() is None:
                with open(path, errors="replace") as f:
                    f.seek(since)
                    if ready in f.read():
                        return proc
                time.sleep(0.5)
            if proc.poll() is None or attempt == self.ATTEMPTS:
                break  # up but not ready in time, or out of attempts
            self.procs.remove(proc)
        with open(path, errors="replace") as f:
            f.seek(since)
            tail = f.read()[-3000:]
        raise RuntimeError(f"YARN in {self.work}: no '{ready}' in {path} ({attempt} "
                           f"attempts):\n{tail}")

    def launch(self, name, heap, main):
        argv = [os.path.join(self.java, "bin", "java"), f"-Xmx{heap}",
                "-Djava.net.preferIPv4Stack=true"]
        argv += [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in OPENS]
        argv += ["-cp", f"{self.conf}:{self.classpath}", main]
        log = open(os.path.join(self.work, f"{name}.log"), "ab")
        proc = subprocess.Popen(argv, env=dict(os.environ, JAVA_HOME=self.java), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=self.work)
        self.procs.append(proc)
        return proc

    def kill_containers(self):
        """Every process beneath the NodeManager's local dirs (containers run in sessions
        of their own, outside the NodeManager's group)."""
        for _ in range(50):
            found = 0
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) == os.getpid():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                    if self.local + "/" in cmdline:
                        os.kill(int(entry), signal.SIGKILL)
                        found += 1
                except (OSError, ProcessLookupError):
                    continue
            if not found:
                return
            time.sleep(0.1)

    def stop(self):
        for proc in reversed(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.kill_containers()


def submit_argv(spark_home, conf):
    """spark-submit --master yarn (client mode) with the Spark jars at their local path
    (the NodeManager is on this host: nothing uploaded)."""
    conf = dict({"spark.yarn.jars": f"local:{spark_home}/jars/*", "spark.yarn.am.memory": "512m",
                 "spark.yarn.report.interval": "5s"}, **conf)
    argv = [os.path.join(spark_home, "bin", "spark-submit"), "--master", "yarn", "--deploy-mode",
            "client"]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return argv
