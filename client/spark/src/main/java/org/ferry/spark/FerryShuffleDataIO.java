package org.ferry.spark;

import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.api.ShuffleDataIO;
import org.apache.spark.shuffle.api.ShuffleDriverComponents;
import org.apache.spark.shuffle.api.ShuffleExecutorComponents;

/**
 * Map outputs that outlive their executor: Spark's ShuffleDataIO plugin
 * ({@code spark.shuffle.sort.io.plugin.class=org.ferry.spark.FerryShuffleDataIO}) whose executors
 * keep their map outputs, in Spark's own layout, in dirs the node's ferry_server serves, register
 * those dirs with it and name it as the outputs' location; and whose driver says the storage is
 * reliable, so dynamic allocation releases idle executors without shuffle tracking or a shuffle
 * service of Spark's, and a gone executor's outputs stay registered. Reducers fetch them with
 * Spark's own client and protocol. docs/spark.md ("Executors off the node's network: Ferry's
 * plugin") says how to set it up.
 */
public final class FerryShuffleDataIO implements ShuffleDataIO {
  private final SparkConf conf;

  public FerryShuffleDataIO(SparkConf conf) {
    this.conf = conf;
  }

  @Override
  public ShuffleExecutorComponents executor() {
    return new FerryExecutorComponents(conf);
  }

  @Override
  public ShuffleDriverComponents driver() {
    return new FerryDriverComponents();
  }
}
