#!/bin/bash
# The entrypoint of the Spark image the Kubernetes tests build (spark-image): what
# Spark's own image's entrypoint does for an executor pod. Spark's Kubernetes backend
# starts the container with the argument "executor" and says the rest in the
# environment: SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES,
# SPARK_EXECUTOR_MEMORY, SPARK_APPLICATION_ID, SPARK_RESOURCE_PROFILE_ID,
# SPARK_EXECUTOR_POD_IP, SPARK_EXECUTOR_POD_NAME, SPARK_CONF_DIR, and the JVM's options
# as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
set -euo pipefail
if [[ "${1:-}" != executor ]]; then
  echo "spark-entrypoint: only executors run in this image (got '${1:-}')" >&2
  exit 2
fi
options=()
for ((i = 0; i < 1000; i++)); do
  name="SPARK_JAVA_OPT_$i"
  [[ -n "${!name+set}" ]] || break
  options+=("${!name}")
done
# spark.executor.extraClassPath (Spark's backend passes it as SPARK_CLASSPATH) first, as
# Spark's own entrypoint puts it.
classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*"
if [[ -n "${SPARK_CONF_DIR:-}" ]]; then classpath="$SPARK_CONF_DIR:$classpath"; fi
exec java "${options[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
  -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
  --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
  --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
  --podName "$SPARK_EXECUTOR_POD_NAME"
