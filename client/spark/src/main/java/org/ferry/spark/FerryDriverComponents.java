package org.ferry.spark;

import org.apache.spark.shuffle.sort.io.LocalDiskShuffleDriverComponents;

/**
 * The driver's side: Spark's own, but the map outputs are kept by the node's ferry_server, so
 * they survive their executor. Spark then allows dynamic allocation without shuffle tracking
 * (ExecutorAllocationManager) and keeps a lost executor's outputs (DAGScheduler).
 */
final class FerryDriverComponents extends LocalDiskShuffleDriverComponents {
  @Override
  public boolean supportsReliableStorage() {
    return true;
  }
}
